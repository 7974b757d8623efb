//! Turn segmentation (SPEC §4): forward over whole histories, backward for windows.
//!
//! The functions are generic over how the caller holds a message (`M: Borrow<MessageInfo>`):
//! a reference into a slice, an `Arc`, or the binding's handle on a Python object, so the
//! binding can stream a history through them without copying it first.

use crate::model::{Kind, MessageInfo, Source};
use crate::protocol::OpenCalls;
use std::borrow::Borrow;

/// Decides, message by message in history order, which messages start a turn.
///
/// A user message starts a turn unless a turn is open and the previous model-visible message
/// carries the same (non-None) `turn_id`.
pub struct TurnStarts<M> {
    any_start: bool,
    /// The previous model-visible message, when it has a turn id (only a turn id can make
    /// the next user message continue its turn, so one without is not held on to).
    previous_visible: Option<M>,
}

impl<M: Borrow<MessageInfo> + Clone> TurnStarts<M> {
    pub fn new() -> TurnStarts<M> {
        TurnStarts {
            any_start: false,
            previous_visible: None,
        }
    }

    /// Reads the next message; true when it starts a turn.
    pub fn push(&mut self, message: &M) -> bool {
        let info = message.borrow();
        let mut starts = false;
        if info.kind == Kind::User {
            let continues = self.any_start
                && info.turn_id.is_some()
                && self
                    .previous_visible
                    .as_ref()
                    .is_some_and(|previous| previous.borrow().turn_id == info.turn_id);
            starts = !continues;
            self.any_start |= starts;
        }
        if info.visible {
            self.previous_visible = info.turn_id.is_some().then(|| message.clone());
        }
        starts
    }
}

impl<M: Borrow<MessageInfo> + Clone> Default for TurnStarts<M> {
    fn default() -> Self {
        TurnStarts::new()
    }
}

/// Index of the first message of every turn of `messages`, oldest first.
pub fn turn_starts<M: Borrow<MessageInfo> + Clone>(messages: &[M]) -> Vec<usize> {
    let mut scanner = TurnStarts::new();
    let mut starts = Vec::new();
    for (index, message) in messages.iter().enumerate() {
        if scanner.push(message) {
            starts.push(index);
        }
    }
    starts
}

/// Segments a whole history read once, in order: every turn as `(start, end, inferred
/// completed)`, oldest first. Each message is looked at once, while it is in cache.
pub struct Segmenter<M> {
    starts: TurnStarts<M>,
    open: OpenCalls<M>,
    index: usize,
    current: Option<usize>,
    /// The current turn's last model-visible message is a final answer.
    ends_with_answer: bool,
    turns: Vec<(usize, usize, bool)>,
}

impl<M: Borrow<MessageInfo> + Clone> Segmenter<M> {
    pub fn new() -> Segmenter<M> {
        Segmenter {
            starts: TurnStarts::new(),
            open: OpenCalls::new(),
            index: 0,
            current: None,
            ends_with_answer: false,
            turns: Vec::new(),
        }
    }

    /// Reads the next message of the history.
    pub fn push(&mut self, message: &M) {
        if self.starts.push(message) {
            self.close_turn();
            self.current = Some(self.index);
        }
        if self.current.is_some() {
            let info = message.borrow();
            // Messages before the first turn belong to none; their calls are not paired, and
            // a message no model sees pairs nothing.
            if info.visible {
                self.ends_with_answer = info.kind == Kind::Ai && info.final_text;
                self.open.read(self.index, message, &mut |_| {});
            }
        }
        self.index += 1;
    }

    fn close_turn(&mut self) {
        if let Some(start) = self.current.take() {
            // Complete: ends with a final answer and every call has its result.
            let completed = self.ends_with_answer && self.open.is_empty();
            self.turns.push((start, self.index, completed));
        }
        self.open.clear();
        self.ends_with_answer = false;
    }

    /// Every turn read so far, the last one ending at the last message.
    pub fn finish(mut self) -> Vec<(usize, usize, bool)> {
        self.close_turn();
        self.turns
    }
}

impl<M: Borrow<MessageInfo> + Clone> Default for Segmenter<M> {
    fn default() -> Self {
        Segmenter::new()
    }
}

/// Every turn of a whole history: `(start, end, inferred completed)`, oldest first.
pub fn segment<M: Borrow<MessageInfo> + Clone>(messages: &[M]) -> Vec<(usize, usize, bool)> {
    let mut segmenter = Segmenter::new();
    for message in messages {
        segmenter.push(message);
    }
    segmenter.finish()
}

/// Yields `(start, end)` of every turn, newest first, reading only as far back as it is pulled,
/// with the turn's model-visible messages (newest first: the order they are read in).
/// The same state machine as `_reference/turns.py::turns_backward`.
pub struct TurnsBackward<M> {
    next_index: usize, // messages[..next_index] are unread
    end: usize,
    pending_user: Option<(usize, M)>,
    earliest_user: Option<usize>,
    /// The visible message that closed the last turn yielded: the newest of the next one.
    carried: Option<(usize, M)>,
    done: bool,
}

impl<M: Borrow<MessageInfo> + Clone> TurnsBackward<M> {
    pub fn new(len: usize) -> TurnsBackward<M> {
        TurnsBackward {
            next_index: len,
            end: len,
            pending_user: None,
            earliest_user: None,
            carried: None,
            done: false,
        }
    }

    /// The next turn back, and in `turn` its model-visible messages with their indices, newest
    /// first (`visible_turn` of the reference, reversed): each message is read once, by the
    /// scan that finds the turn's start.
    pub fn next_turn<S: Source<Message = M>>(
        &mut self,
        source: &mut S,
        turn: &mut Vec<(usize, M)>,
    ) -> Result<Option<(usize, usize)>, S::Error> {
        turn.clear();
        if self.done {
            return Ok(None);
        }
        turn.extend(self.carried.take());
        while self.next_index > 0 {
            self.next_index -= 1;
            let index = self.next_index;
            let message = source.get(index)?;
            let info = message.borrow();
            if !info.visible {
                continue;
            }
            let is_user = info.kind == Kind::User;
            let mut closed = None;
            if let Some((user_index, user)) = &self.pending_user {
                let user_index = *user_index;
                let user = user.borrow();
                if user.turn_id.is_some() && info.turn_id == user.turn_id {
                    self.earliest_user = Some(user_index);
                } else {
                    closed = Some((user_index, self.end));
                    self.end = user_index;
                    self.earliest_user = None;
                }
                self.pending_user = None;
            }
            if is_user {
                self.pending_user = Some((index, message.clone()));
            }
            if closed.is_some() {
                // Read before the turn's start: the newest message of the next turn.
                self.carried = Some((index, message));
                return Ok(closed);
            }
            turn.push((index, message));
        }
        self.done = true;
        let found = match self.pending_user.take() {
            Some((user_index, _)) => Some((user_index, self.end)),
            None => self.earliest_user.take().map(|start| (start, self.end)),
        };
        if let Some((start, _)) = found {
            // Messages before the earliest user message of a continued turn are in no turn.
            while turn.last().is_some_and(|(index, _)| *index < start) {
                turn.pop();
            }
        }
        Ok(found)
    }
}

/// A turn is complete when it ends with a final answer and every tool call has its result
/// (`last`: the turn's last model-visible message).
pub fn inferred_completed(last: &MessageInfo, has_missing_result: bool) -> bool {
    !has_missing_result && last.kind == Kind::Ai && last.final_text
}

/// True when any AI message of the turn calls a tool or any tool result is present.
pub fn has_tool_calls<M: Borrow<MessageInfo>>(turn: &[(usize, M)]) -> bool {
    turn.iter().any(|(_, m)| {
        let m = m.borrow();
        (m.kind == Kind::Ai && !m.call_ids.is_empty()) || m.kind == Kind::Tool
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{walk, VecSource};
    use std::sync::Arc;

    #[test]
    fn the_backward_scan_hands_over_each_turn_as_the_forward_segmentation_sees_it() {
        // Random histories with invisible messages and turn ids that continue turns: every
        // turn, newest first, with its model-visible messages newest first.
        let mut next = walk(0x51_7cc1_b727_220a_u64);
        let mut turns_seen = 0;
        for _ in 0..3000 {
            let len = usize::try_from(next(14)).unwrap_or(0);
            let messages: Vec<Arc<MessageInfo>> = (0..len)
                .map(|position| {
                    let kind = [Kind::User, Kind::Ai, Kind::Tool, Kind::Action, Kind::System]
                        .get(usize::try_from(next(5)).unwrap_or(0))
                        .copied()
                        .unwrap_or(Kind::User);
                    let mut info = MessageInfo::new(kind, &format!("m{position}"));
                    info.turn_id = match next(3) {
                        0 => None,
                        id => Some(format!("t{id}")),
                    };
                    // (A user message no model sees starts a turn going forward only.)
                    if next(6) == 0 && kind != Kind::User {
                        info.visible = !info.visible;
                    }
                    Arc::new(info)
                })
                .collect();
            let mut expected: Vec<(usize, usize)> = segment(&messages)
                .into_iter()
                .map(|(start, end, _)| (start, end))
                .collect();
            expected.reverse();
            let mut source = VecSource {
                messages: messages.clone(),
                token_counts: Vec::new(),
                statuses: Vec::new(),
                system_tokens: 0,
            };
            let mut scan = TurnsBackward::new(len);
            let mut turn = Vec::new();
            let mut found = Vec::new();
            while let Ok(Some((start, end))) = scan.next_turn(&mut source, &mut turn) {
                let visible: Vec<usize> = (start..end)
                    .rev()
                    .filter(|index| messages.get(*index).is_some_and(|m| m.visible))
                    .collect();
                let handed: Vec<usize> = turn.iter().map(|(index, _)| *index).collect();
                assert_eq!(handed, visible, "turn {start}..{end} of {messages:?}");
                for (index, message) in &turn {
                    assert!(messages
                        .get(*index)
                        .is_some_and(|m| Arc::ptr_eq(m, message)));
                }
                found.push((start, end));
            }
            turns_seen += found.len();
            assert_eq!(found, expected, "{messages:?}");
        }
        assert!(turns_seen > 3000, "only {turns_seen} turns");
    }
}
