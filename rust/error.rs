//! The one error enum of the core. `py.rs` turns each variant into the Python exception the
//! pure-Python reference raises, with the same message.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CoreError {
    /// `messages[index]` is not a message; `type_name` is its Python type's name.
    NotAMessage { index: usize, type_name: String },
    /// The history holds no user message, so no window can start with one.
    NoUserMessage,
}

impl fmt::Display for CoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CoreError::NotAMessage { index, type_name } => {
                write!(f, "messages[{index}] is not a Message: got {type_name}")
            }
            CoreError::NoUserMessage => f.write_str(
                "messages holds no UserMessage: a window must start with a user message",
            ),
        }
    }
}

impl std::error::Error for CoreError {}
