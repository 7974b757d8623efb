//! What the core knows of a message, and how it reads a history it does not own.

use std::borrow::Borrow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Message kinds: the library class a message derives from; the codes match
/// `agentctx_fast.core.messages.KIND_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    System,
    User,
    Ai,
    Tool,
    Action,
    Form,
}

impl Kind {
    pub fn from_code(code: i64) -> Option<Kind> {
        Some(match code {
            0 => Kind::System,
            1 => Kind::User,
            2 => Kind::Ai,
            3 => Kind::Tool,
            4 => Kind::Action,
            5 => Kind::Form,
            _ => return None,
        })
    }

    /// Whether the library's own class of this kind is sent to a model (a subclass may say
    /// otherwise through its `model_visible` property).
    pub fn visible_by_default(self) -> bool {
        !matches!(self, Kind::Action | Kind::Form)
    }
}

/// The fields of a message that segmentation, validation and windows need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageInfo {
    pub kind: Kind,
    /// The message's `model_visible`.
    pub visible: bool,
    /// An AI message with non-empty text and no tool calls.
    pub final_text: bool,
    pub turn_id: Option<String>,
    /// Ids of an AI message's tool calls, in order.
    pub call_ids: Vec<String>,
    /// Names of an AI message's tool calls, in order (a synthetic result carries its call's).
    pub call_names: Vec<String>,
    /// A tool message's `tool_call_id`.
    pub tool_call_id: String,
    pub message_id: String,
}

impl MessageInfo {
    pub fn new(kind: Kind, message_id: &str) -> MessageInfo {
        MessageInfo {
            kind,
            visible: kind.visible_by_default(),
            message_id: message_id.to_owned(),
            turn_id: None,
            final_text: false,
            call_ids: Vec::new(),
            call_names: Vec::new(),
            tool_call_id: String::new(),
        }
    }
}

/// What a binding keeps of a message: its info, and its heuristic tokens once counted.
pub struct MessageCore {
    pub info: MessageInfo,
    /// Heuristic tokens, `u64::MAX` until first counted.
    tokens: AtomicU64,
}

impl MessageCore {
    pub fn new(info: MessageInfo) -> MessageCore {
        let tokens = AtomicU64::new(u64::MAX);
        MessageCore { info, tokens }
    }

    /// The heuristic tokens counted so far (None until first counted).
    #[inline]
    pub fn known_tokens(&self) -> Option<u64> {
        let known = self.tokens.load(Ordering::Relaxed);
        (known != u64::MAX).then_some(known)
    }

    pub fn keep_tokens(&self, tokens: u64) {
        self.tokens.store(tokens, Ordering::Relaxed);
    }

    /// The summed tokens of `messages`, or None if one was not counted yet.
    pub fn known_sum<'a>(messages: impl IntoIterator<Item = &'a MessageCore>) -> Option<u128> {
        let counts = messages.into_iter().map(|message| message.known_tokens());
        counts.map(|count| count.map(u128::from)).sum()
    }
}

/// How the core reads a message a binding keeps: borrowed in a window, shared when streamed.
impl Borrow<MessageInfo> for &MessageCore {
    fn borrow(&self) -> &MessageInfo {
        &self.info
    }
}

impl Borrow<MessageInfo> for Arc<MessageCore> {
    fn borrow(&self) -> &MessageInfo {
        &self.info
    }
}

/// One message of a window view: an original message of the history, or the synthetic result
/// that closes call `call` of the AI message at `caller`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Item {
    Original(usize),
    MissingResult { caller: usize, call: usize },
}

/// A history the core reads lazily, by index, so a window never touches turns it cannot use.
/// `E` is the caller's error type (a Python exception in the binding).
pub trait Source {
    type Error: From<crate::error::CoreError>;
    /// How the source hands out a message: cheap to clone, read through `Borrow`.
    type Message: Borrow<MessageInfo> + Clone;
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The message at `index`, or `CoreError::NotAMessage`.
    fn get(&mut self, index: usize) -> Result<Self::Message, Self::Error>;
    /// Estimated tokens of a view (the items are in window order). Token counts are summed
    /// in `u128`: counts are below 2**63 each, so no window's sum can overflow.
    fn tokens(&mut self, items: &[Item]) -> Result<u128, Self::Error>;
    /// The summed tokens of a turn's messages (in any order) when the source knows every
    /// message's count without running a caller's code; None has the turn's view counted by
    /// `tokens`.
    fn known_tokens(&mut self, turn: &[(usize, Self::Message)]) -> Option<u128> {
        let _ = turn;
        None
    }
    /// Tokens of the system message of the window.
    fn system_tokens(&mut self) -> Result<u128, Self::Error>;
    /// The recorded status of a turn: `Some(true)` for COMPLETED, `None` without a record.
    fn recorded_completed(&mut self, turn_id: &str) -> Result<Option<bool>, Self::Error>;
}

/// A deterministic xorshift walk from `seed`, for tests: each call, a number below `bound`.
#[cfg(test)]
pub fn walk(seed: u64) -> impl FnMut(u64) -> u64 {
    let mut state = seed;
    move |bound| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % bound
    }
}

/// A plain in-memory source, for tests and for callers that already hold every message.
pub struct VecSource {
    pub messages: Vec<Arc<MessageInfo>>,
    pub token_counts: Vec<u64>,
    pub statuses: Vec<(String, bool)>,
    pub system_tokens: u128,
}

impl Source for VecSource {
    type Error = crate::error::CoreError;
    type Message = Arc<MessageInfo>;
    fn len(&self) -> usize {
        self.messages.len()
    }
    fn get(&mut self, index: usize) -> Result<Self::Message, Self::Error> {
        self.messages
            .get(index)
            .cloned()
            .ok_or(crate::error::CoreError::NotAMessage {
                at: format!("messages[{index}]"),
                type_name: "NoneType".into(),
            })
    }
    fn tokens(&mut self, items: &[Item]) -> Result<u128, Self::Error> {
        Ok(items
            .iter()
            .map(|item| match item {
                Item::Original(index) => {
                    u128::from(self.token_counts.get(*index).copied().unwrap_or(0))
                }
                Item::MissingResult { .. } => u128::from(crate::tokens::missing_result_tokens()),
            })
            .sum())
    }
    fn system_tokens(&mut self) -> Result<u128, Self::Error> {
        Ok(self.system_tokens)
    }
    fn recorded_completed(&mut self, turn_id: &str) -> Result<Option<bool>, Self::Error> {
        Ok(self
            .statuses
            .iter()
            .find(|(id, _)| id == turn_id)
            .map(|(_, done)| *done))
    }
}
