//! The one error enum of the core, with the messages of the pure-Python reference, and the
//! place a value came from as those messages name it. `py/errors.rs` only picks each variant's
//! Python class.

use std::fmt;

/// Where a value came from, as error messages name it: `messages[3]`, `system`,
/// `messages[3].tool_calls[0]`, ...
#[derive(Clone, Copy)]
pub enum Where<'a> {
    Index(usize),
    System,
    /// Call `index` of the message at the place.
    Call(&'a Where<'a>, usize),
    /// Content part `index` of the message at the place.
    Part(&'a Where<'a>, usize),
}

impl fmt::Display for Where<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Where::Index(index) => write!(f, "messages[{index}]"),
            Where::System => f.write_str("system"),
            Where::Call(at, index) => write!(f, "{at}.tool_calls[{index}]"),
            Where::Part(at, index) => write!(f, "{at}.content[{index}]"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CoreError {
    /// The value at `at` is not a message; `type_name` is its class's name.
    NotAMessage { at: String, type_name: String },
    /// The value at `at` derives from the message base but from no message kind.
    NoMessageKind { at: String, type_name: String },
    /// The history is not a sequence.
    NotASequence { type_name: String },
    /// A field that must be a str is not.
    NotAStr {
        at: String,
        field: &'static str,
        type_name: String,
    },
    /// An id holds a lone surrogate (ids are compared exactly).
    LoneSurrogate { at: String, field: &'static str },
    /// A tool call of an AI message is not a tool call.
    NotAToolCall { at: String, type_name: String },
    /// The history holds no user message, so no window can start with one.
    NoUserMessage,
    /// A message of `at` names call `call`, which its AI message does not have.
    NoSuchCall { at: String, call: usize },
    /// Text to count is not a str.
    NotText { type_name: String },
    /// An encoding name is not a str.
    EncodingNotAStr { type_name: String },
    /// An encoding name names no built-in encoding; `repr` is the name's.
    UnknownEncoding { repr: String },
    /// An argument outside its domain: `what` must be `expected`; `repr` is the argument's.
    OutOfDomain {
        what: &'static str,
        expected: &'static str,
        repr: String,
    },
    /// Window options not made by `WindowOptions(...)`.
    UncheckedOptions,
}

impl CoreError {
    /// Whether the reference raises `InvalidArgumentError` for it (a value outside its
    /// domain); else `InvalidMessageTypeError` (a value of the wrong type).
    pub fn is_invalid_argument(&self) -> bool {
        matches!(
            self,
            CoreError::LoneSurrogate { .. }
                | CoreError::NoUserMessage
                | CoreError::EncodingNotAStr { .. }
                | CoreError::UnknownEncoding { .. }
                | CoreError::OutOfDomain { .. }
                | CoreError::UncheckedOptions
        )
    }
}

impl fmt::Display for CoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CoreError::NotAMessage { at, type_name } => {
                write!(f, "{at} is not a Message: got {type_name}")
            }
            CoreError::NoMessageKind { at, type_name } => {
                write!(f, "{at} is a {type_name}, which is no message kind")
            }
            CoreError::NotASequence { type_name } => {
                write!(f, "messages must be a sequence of Message, got {type_name}")
            }
            CoreError::NotAStr {
                at,
                field,
                type_name,
            } => write!(f, "{at}.{field} must be a str, got {type_name}"),
            CoreError::LoneSurrogate { at, field } => {
                write!(f, "{at}.{field} holds a lone surrogate")
            }
            CoreError::NotAToolCall { at, type_name } => {
                write!(f, "{at} is not a ToolCall: got {type_name}")
            }
            CoreError::NoUserMessage => f.write_str(
                "messages holds no UserMessage: a window must start with a user message",
            ),
            CoreError::NoSuchCall { at, call } => write!(f, "{at} has no call {call}"),
            CoreError::NotText { type_name } => {
                write!(f, "count_text needs a str, got {type_name}")
            }
            CoreError::EncodingNotAStr { type_name } => {
                write!(f, "encoding must be a str, got {type_name}")
            }
            CoreError::UnknownEncoding { repr } => write!(
                f,
                "encoding must be 'o200k_base' or 'cl100k_base', got {repr}"
            ),
            CoreError::OutOfDomain {
                what,
                expected,
                repr,
            } => write!(f, "{what} must be {expected}, got {repr}"),
            CoreError::UncheckedOptions => {
                f.write_str("options were not checked: make them with WindowOptions(...)")
            }
        }
    }
}

impl std::error::Error for CoreError {}
