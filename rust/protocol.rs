//! Tool-call protocol validation (SPEC §6), pairing checked inside each turn.

use crate::model::{Kind, MessageInfo};
use crate::turns::TurnStarts;
use std::borrow::Borrow;
use std::collections::HashMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ViolationKind {
    OrphanResult,
    DuplicateCallId,
    MissingResult,
}

impl ViolationKind {
    pub fn name(self) -> &'static str {
        match self {
            ViolationKind::OrphanResult => "orphan_result",
            ViolationKind::DuplicateCallId => "duplicate_call_id",
            ViolationKind::MissingResult => "missing_result",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub kind: ViolationKind,
    pub message_id: String,
    pub tool_call_id: String,
    /// Position of the reported message in the segment, and the call's index in it.
    pub position: usize,
    pub call_index: usize,
}

/// A call opened and not yet closed: the AI message that made it, where, and which call.
#[derive(Debug, Clone)]
struct OpenCall<M> {
    caller: M,
    position: usize,
    call_index: usize,
    /// The call's id as an `IdKey`: open calls are told apart by it, and ids of at most 16
    /// bytes are compared by it alone (a turn's ids often share a prefix and a length, so
    /// comparing them outright would read both strings for every open call).
    key: IdKey,
}

impl<M: Borrow<MessageInfo>> OpenCall<M> {
    fn id(&self) -> &str {
        let caller = self.caller.borrow();
        caller
            .call_ids
            .get(self.call_index)
            .map_or("", String::as_str)
    }
}

/// A call id's length and its first and last 8 bytes (4 and 4 for a shorter id, every byte
/// for one under 4): equal ids have equal keys, and ids of at most 16 bytes with equal keys
/// are equal (their bytes are all in the key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct IdKey {
    len: usize,
    head: u64,
    tail: u64,
}

impl IdKey {
    #[inline]
    fn of(id: &str) -> IdKey {
        let bytes = id.as_bytes();
        let len = bytes.len();
        let word = |chunk: Option<&[u8]>| {
            chunk
                .and_then(|chunk| <[u8; 8]>::try_from(chunk).ok())
                .map_or(0, u64::from_le_bytes)
        };
        let half = |chunk: Option<&[u8]>| {
            chunk
                .and_then(|chunk| <[u8; 4]>::try_from(chunk).ok())
                .map_or(0, |bytes| u64::from(u32::from_le_bytes(bytes)))
        };
        let (head, tail) = match len {
            8.. => (word(bytes.get(..8)), word(bytes.get(len - 8..))),
            4.. => (half(bytes.get(..4)), half(bytes.get(len - 4..))),
            _ => (
                bytes
                    .iter()
                    .fold(0u64, |packed, byte| packed << 8 | u64::from(*byte)),
                0,
            ),
        };
        IdKey { len, head, tail }
    }

    /// Whether the key holds every byte of its id.
    #[inline]
    fn is_whole(&self) -> bool {
        self.len <= 16
    }
}

/// Turns with at most this many open calls are searched linearly; beyond it an index keeps a
/// hostile turn with thousands of open calls linear.
const LINEAR_OPEN_CALLS: usize = 16;

/// The calls open inside one turn. A turn usually holds a handful of calls, so a linear scan
/// over a small vector beats hashing; one `OpenCalls` is reused across the turns of a history,
/// so a turn allocates nothing.
#[derive(Debug)]
pub struct OpenCalls<M> {
    calls: Vec<OpenCall<M>>,
    /// Slot in `calls` by id, built once a turn has more than `LINEAR_OPEN_CALLS` open.
    index: Option<HashMap<String, usize>>,
}

impl<M: Borrow<MessageInfo> + Clone> OpenCalls<M> {
    pub fn new() -> OpenCalls<M> {
        OpenCalls {
            calls: Vec::new(),
            index: None,
        }
    }

    /// Forgets every open call (a new turn starts).
    pub fn clear(&mut self) {
        self.calls.clear();
        self.index = None;
    }

    /// No call is open.
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    #[inline(always)]
    fn find(&self, id: &str, key: IdKey) -> Option<usize> {
        match &self.index {
            Some(index) => index.get(id).copied(),
            None => self
                .calls
                .iter()
                .position(|call| call.key == key && (key.is_whole() || call.id() == id)),
        }
    }

    /// Opens `call`; false when its id is already open.
    fn open(&mut self, call: OpenCall<M>) -> bool {
        if self.find(call.id(), call.key).is_some() {
            return false;
        }
        if self.index.is_none() && self.calls.len() >= LINEAR_OPEN_CALLS {
            let index = self
                .calls
                .iter()
                .enumerate()
                .map(|(slot, open)| (open.id().to_owned(), slot))
                .collect();
            self.index = Some(index);
        }
        if let Some(index) = &mut self.index {
            index.insert(call.id().to_owned(), self.calls.len());
        }
        self.calls.push(call);
        true
    }

    /// Closes the open call `id`; false when it is not open.
    fn close(&mut self, id: &str) -> bool {
        let Some(slot) = self.find(id, IdKey::of(id)) else {
            return false;
        };
        self.calls.swap_remove(slot);
        if let Some(index) = &mut self.index {
            index.remove(id);
            if let Some(moved) = self.calls.get(slot) {
                index.insert(moved.id().to_owned(), slot);
            }
        }
        true
    }

    /// Reads the message at `position` of the turn: its calls open, its result closes; a
    /// duplicate call id or an orphan result goes to `found`.
    pub fn read(&mut self, position: usize, message: &M, found: &mut impl FnMut(Violation)) {
        let info = message.borrow();
        match info.kind {
            Kind::Ai => {
                for (call_index, call_id) in info.call_ids.iter().enumerate() {
                    let call = OpenCall {
                        caller: message.clone(),
                        position,
                        call_index,
                        key: IdKey::of(call_id),
                    };
                    if !self.open(call) {
                        found(Violation {
                            kind: ViolationKind::DuplicateCallId,
                            message_id: info.message_id.clone(),
                            tool_call_id: call_id.clone(),
                            position,
                            call_index,
                        });
                    }
                }
            }
            Kind::Tool if !self.close(&info.tool_call_id) => found(Violation {
                kind: ViolationKind::OrphanResult,
                message_id: info.message_id.clone(),
                tool_call_id: info.tool_call_id.clone(),
                position,
                call_index: 0,
            }),
            _ => {}
        }
    }

    /// Appends the violations of one turn's messages to `out`, in message order; positions
    /// are in `segment`. Calls left open by an earlier use are forgotten first.
    ///
    /// `adjacent` is how the window reads a turn (SPEC §20): a call is answered only by the
    /// run of tool messages right after its AI message, so calls still open when any other
    /// message comes are missing there, and a result after that message is an orphan.
    pub fn validate_into(
        &mut self,
        segment: impl IntoIterator<Item = M>,
        adjacent: bool,
        out: &mut Vec<Violation>,
    ) {
        self.clear();
        let first = out.len();
        for (position, message) in segment.into_iter().enumerate() {
            if adjacent && message.borrow().kind != Kind::Tool && !self.calls.is_empty() {
                self.drain_missing(out);
            }
            self.read(position, &message, &mut |v| out.push(v));
        }
        self.drain_missing(out);
        if let Some(turn) = out.get_mut(first..) {
            sort_in_message_order(turn);
        }
    }

    /// Ends the turn: every call still open is a missing result, appended to `out`.
    fn drain_missing(&mut self, out: &mut Vec<Violation>) {
        out.extend(self.calls.drain(..).map(|call| Violation {
            kind: ViolationKind::MissingResult,
            message_id: call.caller.borrow().message_id.clone(),
            tool_call_id: call.id().to_owned(),
            position: call.position,
            call_index: call.call_index,
        }));
        self.index = None;
    }
}

/// Puts one segment's violations in message order. `(position, call_index)` is unique per
/// violation (a duplicate is never opened and an orphan is a tool message), so this is the
/// reference's order.
fn sort_in_message_order(segment: &mut [Violation]) {
    if segment.len() > 1 {
        segment.sort_unstable_by_key(|v| (v.position, v.call_index));
    }
}

impl<M: Borrow<MessageInfo> + Clone> Default for OpenCalls<M> {
    fn default() -> Self {
        OpenCalls::new()
    }
}

/// Validates a whole history read once, in order, turn by turn (messages before the first
/// turn form one segment).
pub struct Validator<M> {
    starts: TurnStarts<M>,
    open: OpenCalls<M>,
    /// Position of the next message in its segment.
    position: usize,
    /// Where the current segment's violations start in `violations`.
    segment_first: usize,
    violations: Vec<Violation>,
}

impl<M: Borrow<MessageInfo> + Clone> Validator<M> {
    pub fn new() -> Validator<M> {
        Validator {
            starts: TurnStarts::new(),
            open: OpenCalls::new(),
            position: 0,
            segment_first: 0,
            violations: Vec::new(),
        }
    }

    /// Reads the next message of the history.
    pub fn push(&mut self, message: &M) {
        if self.starts.push(message) && self.position > 0 {
            self.close_segment();
        }
        let violations = &mut self.violations;
        self.open
            .read(self.position, message, &mut |v| violations.push(v));
        self.position += 1;
    }

    fn close_segment(&mut self) {
        self.open.drain_missing(&mut self.violations);
        if let Some(segment) = self.violations.get_mut(self.segment_first..) {
            sort_in_message_order(segment);
        }
        self.segment_first = self.violations.len();
        self.position = 0;
    }

    /// Every violation read so far, in message order.
    pub fn finish(mut self) -> Vec<Violation> {
        self.close_segment();
        self.violations
    }
}

impl<M: Borrow<MessageInfo> + Clone> Default for Validator<M> {
    fn default() -> Self {
        Validator::new()
    }
}

/// AI messages with more calls than this are left to `OpenCalls` (checking that a message's
/// ids are distinct compares every pair).
const PLAIN_CALLS_AT_MOST: usize = 8;

/// `a == b`, comparing ids of 4 to 16 bytes as two overlapping words each (the first and last
/// 4 or 8 bytes cover every byte) rather than by a call to `memcmp`.
#[inline(always)]
fn same_id(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let len = a.len();
    if len != b.len() {
        return false;
    }
    fn word<const N: usize>(bytes: &[u8], at: usize) -> Option<[u8; N]> {
        bytes.get(at..at + N)?.try_into().ok()
    }
    match len {
        8..=16 => {
            word::<8>(a, 0) == word::<8>(b, 0) && word::<8>(a, len - 8) == word::<8>(b, len - 8)
        }
        4..=7 => {
            word::<4>(a, 0) == word::<4>(b, 0) && word::<4>(a, len - 4) == word::<4>(b, len - 4)
        }
        _ => a == b,
    }
}

/// Whether a turn's calls are plainly paired: each AI message's calls (distinct ids) are
/// answered by the tool messages right after it, one per call in call order, and no other
/// tool message is in the turn. Such a turn has no violation, so `OpenCalls` need not read
/// it; false says nothing (the turn is validated in full). With `open_at_end`, the last AI
/// message's calls may still be waiting at the end (a step in progress, whose missing
/// results are then the turn's only violations).
pub fn plainly_paired<'m>(
    turn: impl IntoIterator<Item = &'m MessageInfo>,
    open_at_end: bool,
) -> bool {
    // The calls of the last AI message still waiting for their results, in order.
    let mut waiting: &[String] = &[];
    for info in turn {
        match info.kind {
            Kind::Tool => match waiting.split_first() {
                Some((id, rest)) if same_id(id, &info.tool_call_id) => waiting = rest,
                _ => return false,
            },
            _ if !waiting.is_empty() => return false,
            Kind::Ai => {
                let calls = info.call_ids.as_slice();
                if !few_distinct(calls) {
                    return false;
                }
                waiting = calls;
            }
            _ => {}
        }
    }
    open_at_end || waiting.is_empty()
}

/// `ids` are at most `PLAIN_CALLS_AT_MOST` distinct ids (an AI message makes one to three
/// calls most of the time: those are compared without a loop).
#[inline(always)]
fn few_distinct(ids: &[String]) -> bool {
    match ids {
        [] | [_] => true,
        [a, b] => !same_id(a, b),
        [a, b, c] => !(same_id(a, b) || same_id(a, c) || same_id(b, c)),
        _ if ids.len() > PLAIN_CALLS_AT_MOST => false,
        _ => {
            let mut rest = ids;
            while let [id, later @ ..] = rest {
                if later.iter().any(|other| same_id(id, other)) {
                    return false;
                }
                rest = later;
            }
            true
        }
    }
}

/// Violations of one turn's messages, in message order; positions are in `segment`.
pub fn validate_segment<M: Borrow<MessageInfo> + Clone>(
    segment: impl IntoIterator<Item = M>,
) -> Vec<Violation> {
    let mut found = Vec::new();
    OpenCalls::new().validate_into(segment, false, &mut found);
    found
}

/// Every violation of the history, turn by turn (messages before the first turn form one).
pub fn validate<M: Borrow<MessageInfo> + Clone>(messages: &[M]) -> Vec<Violation> {
    let mut validator = Validator::new();
    for message in messages {
        validator.push(message);
    }
    validator.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::walk;

    fn ai(id: &str, calls: &[&str]) -> MessageInfo {
        let mut info = MessageInfo::new(Kind::Ai, id);
        info.call_ids = calls.iter().map(|c| (*c).to_owned()).collect();
        info
    }

    fn tool(id: &str, call: &str) -> MessageInfo {
        let mut info = MessageInfo::new(Kind::Tool, id);
        info.tool_call_id = call.to_owned();
        info
    }

    /// The reference's algorithm, straight: an ordered map of open calls, then a stable sort.
    fn naive(segment: &[MessageInfo]) -> Vec<(ViolationKind, String, String)> {
        let mut found = Vec::new();
        let mut open: Vec<(String, usize, usize, String)> = Vec::new();
        for (position, m) in segment.iter().enumerate() {
            match m.kind {
                Kind::Ai => {
                    for (ci, id) in m.call_ids.iter().enumerate() {
                        if open.iter().any(|(o, ..)| o == id) {
                            found.push((position, ci, ViolationKind::DuplicateCallId, m, id));
                        } else {
                            open.push((id.clone(), position, ci, m.message_id.clone()));
                        }
                    }
                }
                Kind::Tool => match open.iter().position(|(o, ..)| *o == m.tool_call_id) {
                    Some(slot) => {
                        open.remove(slot);
                    }
                    None => {
                        found.push((position, 0, ViolationKind::OrphanResult, m, &m.tool_call_id))
                    }
                },
                _ => {}
            }
        }
        let mut all: Vec<_> = found
            .into_iter()
            .map(|(p, c, k, m, id)| (p, c, k, m.message_id.clone(), id.clone()))
            .collect();
        for (id, p, c, message_id) in open {
            all.push((p, c, ViolationKind::MissingResult, message_id, id));
        }
        all.sort_by_key(|v| (v.0, v.1));
        all.into_iter().map(|(_, _, k, m, id)| (k, m, id)).collect()
    }

    #[test]
    fn ids_alike_at_both_ends_are_told_apart() {
        // Same length, same first and last 8 bytes: only the middle tells these apart.
        let (x, y) = ("call_abcd_X_wxyz1234", "call_abcd_Y_wxyz1234");
        let segment = [ai("a", &[x]), tool("t1", y), tool("t2", x)];
        let got: Vec<_> = validate_segment(segment.iter())
            .into_iter()
            .map(|v| (v.kind, v.message_id, v.tool_call_id))
            .collect();
        assert_eq!(got, naive(&segment));
        assert_eq!(
            got,
            [(ViolationKind::OrphanResult, "t1".to_owned(), y.to_owned())]
        );
        // Every length up to 16 is keyed whole: ids differing in any one byte differ.
        for len in 1..=20 {
            let base = "abcdefghijklmnopqrst".get(..len).unwrap_or_default();
            for at in 0..len {
                let mut other = base.as_bytes().to_vec();
                other[at] = b'_';
                let other = String::from_utf8(other).unwrap_or_default();
                let segment = [ai("a", &[base]), tool("t", &other)];
                let got = validate_segment(segment.iter()).len();
                assert_eq!(got, 2, "len {len}, byte {at}"); // an orphan and a missing result
            }
        }
    }

    #[test]
    fn small_and_indexed_turns_match_the_reference() {
        // A deterministic pseudo-random walk over few ids (reuse, duplicates, orphans) and
        // over many (more open calls than the linear limit, so the index is used).
        let mut next = walk(0x2545_f491_4f6c_dd1d_u64);
        for case in 0..400 {
            let ids = if case % 2 == 0 { 4 } else { 60 };
            let mut segment = Vec::new();
            for position in 0..(5 + next(80)) {
                let message_id = format!("m{position}");
                if next(3) == 0 {
                    segment.push(tool(&message_id, &format!("c{}", next(ids))));
                } else {
                    let calls: Vec<String> =
                        (0..next(5)).map(|_| format!("c{}", next(ids))).collect();
                    let calls: Vec<&str> = calls.iter().map(String::as_str).collect();
                    segment.push(ai(&message_id, &calls));
                }
            }
            let got: Vec<_> = validate_segment(segment.iter())
                .into_iter()
                .map(|v| (v.kind, v.message_id, v.tool_call_id))
                .collect();
            assert_eq!(got, naive(&segment), "case {case}");
        }
    }

    fn user(id: &str) -> MessageInfo {
        MessageInfo::new(Kind::User, id)
    }

    #[test]
    fn same_id_is_equality() {
        let base = "abcdefghijklmnopqrstu";
        for len in 0..=base.len() {
            let id = base.get(..len).unwrap_or_default();
            let copy: String = id.chars().collect(); // another allocation, the same bytes
            assert!(same_id(id, &copy));
            assert!(!same_id(id, base.get(..len + 1).unwrap_or("-")));
            for at in 0..len {
                let mut other = id.as_bytes().to_vec();
                other[at] = b'_';
                let other = String::from_utf8(other).unwrap_or_default();
                assert!(!same_id(id, &other), "len {len}, byte {at}");
            }
        }
    }

    #[test]
    fn plainly_paired_turns_have_no_violation() {
        let plain: Vec<Vec<MessageInfo>> = vec![
            vec![user("u"), ai("a", &[])],
            vec![user("u")],
            vec![],
            vec![
                user("u"),
                ai("a", &["c0", "c1", "c2"]),
                tool("t0", "c0"),
                tool("t1", "c1"),
                tool("t2", "c2"),
                ai("b", &["c0"]), // an id answered before may be used again
                tool("t3", "c0"),
                ai("f", &[]),
            ],
        ];
        for turn in &plain {
            assert!(plainly_paired(turn, false), "{turn:?}");
            assert!(validate_segment(turn.iter()).is_empty(), "{turn:?}");
        }
        // Turns with a violation, and clean turns paired in another order: never plain.
        let calls: Vec<String> = (0..=PLAIN_CALLS_AT_MOST).map(|c| format!("c{c}")).collect();
        let many: Vec<&str> = calls.iter().map(String::as_str).collect();
        let mut many_turn = vec![user("u"), ai("a", &many)];
        many_turn.extend(many.iter().map(|c| tool("t", c)));
        let not_plain: Vec<(Vec<MessageInfo>, bool)> = vec![
            (
                vec![
                    user("u"),
                    ai("a", &["c0", "c1"]),
                    tool("t1", "c1"),
                    tool("t0", "c0"),
                ],
                false,
            ),
            (
                vec![user("u"), ai("a", &["c0", "c0"]), tool("t0", "c0")],
                true,
            ),
            (
                vec![
                    user("u"),
                    ai("a", &["c0", "c0"]),
                    tool("t0", "c0"),
                    tool("t1", "c0"),
                ],
                true,
            ),
            (vec![user("u"), ai("a", &["c0"])], true),
            (vec![user("u"), tool("t0", "c0")], true),
            (vec![user("u"), ai("a", &["c0"]), tool("t0", "c1")], true),
            (
                vec![user("u"), ai("a", &["c0"]), ai("b", &[]), tool("t0", "c0")],
                false,
            ),
            (
                vec![
                    user("u"),
                    ai("a", &["c0"]),
                    ai("b", &["c1"]),
                    tool("t0", "c0"),
                    tool("t1", "c1"),
                ],
                false,
            ),
            (
                vec![
                    user("u"),
                    ai("a", &["c0"]),
                    tool("t0", "c0"),
                    tool("t1", "c0"),
                ],
                true,
            ),
            (many_turn, false),
        ];
        for (turn, violated) in &not_plain {
            assert!(!plainly_paired(turn, false), "{turn:?}");
            assert_eq!(
                !validate_segment(turn.iter()).is_empty(),
                *violated,
                "{turn:?}"
            );
        }
    }

    #[test]
    fn few_distinct_is_distinctness_of_at_most_eight_ids() {
        // Ids of every length `same_id` tells apart, enough of them for nine distinct ones.
        let pool = [
            "c0",
            "c1",
            "call_0",
            "call_1",
            "call_0000000001",
            "call_0000000002",
            "call_0000000000000000001",
            "call_0000000000000000002",
            "x",
            "y",
            "tool_a",
            "tool_b",
        ];
        let mut next = walk(0x2545_f491_4f6c_dd1d_u64);
        for _ in 0..40_000 {
            let ids: Vec<String> = (0..next(11))
                .map(|_| {
                    pool.get(next(12) as usize)
                        .copied()
                        .unwrap_or("")
                        .to_owned()
                })
                .collect();
            let distinct = ids
                .iter()
                .enumerate()
                .all(|(place, id)| !ids.get(..place).unwrap_or_default().contains(id));
            let expected = ids.len() <= PLAIN_CALLS_AT_MOST && distinct;
            assert_eq!(few_distinct(&ids), expected, "{ids:?}");
        }
    }

    #[test]
    fn plainly_paired_turns_are_clean_in_random_walks() {
        // Whenever the shortcut says plain, the full validation finds nothing.
        let mut next = walk(0x9e37_79b9_7f4a_7c15_u64);
        let mut plain = 0;
        for _ in 0..4000 {
            let mut turn = vec![user("u")];
            let mut last_calls = Vec::new();
            for position in 0..next(8) {
                let message_id = format!("m{position}");
                match next(4) {
                    0 | 1 if !last_calls.is_empty() => {
                        let call: String = last_calls.remove(0);
                        let call = if next(6) == 0 {
                            format!("c{}", next(3))
                        } else {
                            call
                        };
                        turn.push(tool(&message_id, &call));
                    }
                    2 => turn.push(user(&message_id)),
                    _ => {
                        last_calls = (0..next(4)).map(|_| format!("c{}", next(4))).collect();
                        let calls: Vec<&str> = last_calls.iter().map(String::as_str).collect();
                        turn.push(ai(&message_id, &calls));
                    }
                }
            }
            if plainly_paired(&turn, false) {
                plain += 1;
                assert!(validate_segment(turn.iter()).is_empty(), "{turn:?}");
            }
        }
        assert!(plain > 200, "only {plain} plain turns");
    }
}
