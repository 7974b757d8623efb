//! Turn segmentation (SPEC §4): forward over whole histories, backward for windows.

use crate::model::{Kind, MessageInfo, Source};
use std::sync::Arc;

/// Index of the first message of every turn of `source[..end]`, oldest first.
///
/// A user message starts a turn unless a turn is open and the previous model-visible message
/// carries the same (non-None) `turn_id`.
pub fn turn_starts<S: Source>(source: &mut S, end: usize) -> Result<Vec<usize>, S::Error> {
    let mut starts = Vec::new();
    let mut previous_turn_id: Option<Option<String>> = None; // None: no visible message yet
    for index in 0..end {
        let message = source.get(index)?;
        if message.kind == Kind::User {
            let continues = !starts.is_empty()
                && message.turn_id.is_some()
                && matches!(&previous_turn_id, Some(previous) if *previous == message.turn_id);
            if !continues {
                starts.push(index);
            }
        }
        if message.kind.model_visible() {
            previous_turn_id = Some(message.turn_id.clone());
        }
    }
    Ok(starts)
}

/// Yields `(start, end)` of every turn, newest first, reading only as far back as it is pulled.
/// The same state machine as `_reference/turns.py::turns_backward`.
pub struct TurnsBackward {
    next_index: usize, // messages[..next_index] are unread
    end: usize,
    pending_user: Option<(usize, Arc<MessageInfo>)>,
    earliest_user: Option<usize>,
    done: bool,
}

impl TurnsBackward {
    pub fn new(len: usize) -> TurnsBackward {
        TurnsBackward {
            next_index: len,
            end: len,
            pending_user: None,
            earliest_user: None,
            done: false,
        }
    }

    pub fn next_turn<S: Source>(
        &mut self,
        source: &mut S,
    ) -> Result<Option<(usize, usize)>, S::Error> {
        if self.done {
            return Ok(None);
        }
        while self.next_index > 0 {
            self.next_index -= 1;
            let index = self.next_index;
            let message = source.get(index)?;
            if !message.kind.model_visible() {
                continue;
            }
            let mut closed = None;
            if let Some((user_index, user)) = self.pending_user.take() {
                if user.turn_id.is_some() && message.turn_id == user.turn_id {
                    self.earliest_user = Some(user_index);
                } else {
                    closed = Some((user_index, self.end));
                    self.end = user_index;
                    self.earliest_user = None;
                }
            }
            if message.kind == Kind::User {
                self.pending_user = Some((index, message));
            }
            if closed.is_some() {
                return Ok(closed);
            }
        }
        self.done = true;
        if let Some((user_index, _)) = self.pending_user.take() {
            return Ok(Some((user_index, self.end)));
        }
        Ok(self.earliest_user.take().map(|start| (start, self.end)))
    }
}

/// The model-visible messages of `source[start..end]`, as indices.
pub fn visible_indices<S: Source>(
    source: &mut S,
    start: usize,
    end: usize,
) -> Result<Vec<(usize, Arc<MessageInfo>)>, S::Error> {
    let mut visible = Vec::with_capacity(end - start);
    for index in start..end {
        let message = source.get(index)?;
        if message.kind.model_visible() {
            visible.push((index, message));
        }
    }
    Ok(visible)
}

/// A turn is complete when it ends with a final answer and every tool call has its result.
pub fn inferred_completed(turn: &[(usize, Arc<MessageInfo>)], has_missing_result: bool) -> bool {
    match turn.last() {
        Some((_, last)) if !has_missing_result => last.kind == Kind::Ai && last.final_text,
        _ => false,
    }
}

/// True when any AI message of the turn calls a tool or any tool result is present.
pub fn has_tool_calls(turn: &[(usize, Arc<MessageInfo>)]) -> bool {
    turn.iter()
        .any(|(_, m)| (m.kind == Kind::Ai && !m.call_ids.is_empty()) || m.kind == Kind::Tool)
}
