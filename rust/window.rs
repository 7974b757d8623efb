//! Window selection (SPEC §5 rules 1-7 and the repairs of §6), scanning backwards from the end.
//! The same algorithm, step for step, as `_reference/window.py::select`.

use crate::error::CoreError;
use crate::model::{Item, Kind, MessageInfo, Source};
use crate::protocol::{plainly_paired, OpenCalls, Violation, ViolationKind};
use crate::turns::{has_tool_calls, inferred_completed, TurnsBackward};
use std::borrow::Borrow;

/// The window options of SPEC §5 as the core takes them (the binding reads them from the
/// caller's `WindowOptions`; a limit past the range of `usize` or `u128` is its maximum, which
/// no history reaches, so the window is the one the exact limit gives).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowOptions {
    pub max_attached_turns: usize,
    pub max_attached_messages: usize,
    pub compact_completed_tool_turns: bool,
    pub compression_keep_recent_turns: usize,
    pub max_attached_tokens: Option<u128>,
    /// `current_turn="last"`: the last turn is the current turn; false (`"none"`): every turn
    /// is a history turn, and a history without a user message gives an empty window.
    pub has_current_turn: bool,
    pub has_system: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CutBy {
    Turns,
    Messages,
    Tokens,
}

impl CutBy {
    pub fn name(self) -> &'static str {
        match self {
            CutBy::Turns => "max_attached_turns",
            CutBy::Messages => "max_attached_messages",
            CutBy::Tokens => "max_attached_tokens",
        }
    }
}

/// The window without its system message, which the binding places first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    pub items: Vec<Item>,
    pub older_count: usize,
    pub older_tokens: u128,
    pub estimated_tokens: u128,
    pub attached_turns: usize,
    pub compacted_turns: usize,
    pub cut_by: Option<CutBy>,
    pub repairs: Vec<Violation>,
    pub seen_history_turns: usize,
    pub unread_end: usize,
}

/// The text of the synthetic result that closes a call left without one (SPEC §6).
pub const MISSING_RESULT_TEXT: &str = "tool result missing";

/// The `message_id` of the synthetic result closing call `call_id`.
pub fn missing_result_id(call_id: &str) -> String {
    format!("{call_id}:missing")
}

/// Index of the first SystemMessage before the first UserMessage.
pub fn leading_system<S: Source>(source: &mut S) -> Result<Option<usize>, S::Error> {
    for index in 0..source.len() {
        match source.get(index)?.borrow().kind {
            Kind::User => return Ok(None),
            Kind::System => return Ok(Some(index)),
            _ => {}
        }
    }
    Ok(None)
}

type Turn<M> = Vec<(usize, M)>;

fn originals<M>(turn: &[(usize, M)]) -> impl Iterator<Item = Item> + '_ {
    turn.iter().map(|(index, _)| Item::Original(*index))
}

/// The turn's violations as the window reads them (SPEC §20: a result answers its call only
/// in the run of results right after the call's AI message) into `violations`, positions in
/// history order; `turn` is newest first, as the backward scan reads it. A plainly paired
/// turn (the usual one) has none and is not validated. The current turn leaves the calls of
/// its step in progress open: they are not violations there.
pub(crate) fn view_violations<M: Borrow<MessageInfo> + Clone>(
    turn: &Turn<M>,
    is_current: bool,
    open: &mut OpenCalls<M>,
    violations: &mut Vec<Violation>,
) {
    violations.clear();
    if plainly_paired(turn.iter().rev().map(|(_, m)| m.borrow()), is_current) {
        return;
    }
    open.validate_into(turn.iter().rev().map(|(_, m)| m.clone()), true, violations);
    if is_current && !violations.is_empty() {
        let step = step_in_progress(turn);
        violations
            .retain(|v| !(v.kind == ViolationKind::MissingResult && Some(v.position) == step));
    }
}

/// Position (in history order) of the turn's last AI message when only tool results follow
/// it: the step in progress, whose calls are left open (their results may still come).
/// `turn` is newest first.
fn step_in_progress<M: Borrow<MessageInfo>>(turn: &Turn<M>) -> Option<usize> {
    let (from_end, (_, last)) = turn
        .iter()
        .enumerate()
        .find(|(_, (_, m))| m.borrow().kind != Kind::Tool)?;
    (last.borrow().kind == Kind::Ai).then(|| turn.len() - 1 - from_end)
}

/// Appends to `items`, newest first, the view of `turn` (newest first; left in history order)
/// with orphan results left out and missing results closed synthetically.
fn push_repaired<M: Borrow<MessageInfo>>(
    turn: &mut Turn<M>,
    violations: &[Violation],
    items: &mut Vec<Item>,
) {
    let view_start = items.len();
    turn.reverse(); // history order: the violations' positions count in it
    repaired(turn, violations, items);
    if let Some(view) = items.get_mut(view_start..) {
        view.reverse();
    }
}

/// The turn with orphan results left out and missing results closed synthetically, each
/// synthetic result right after the run of results that follows its call. `violations` are in
/// message order, so orphans and insertion points are met in order: one pass.
fn repaired<M: Borrow<MessageInfo>>(
    turn: &Turn<M>,
    violations: &[Violation],
    view: &mut Vec<Item>,
) {
    // (insert after position, caller index, call index), in the order Python inserts them; a
    // message's missing results are listed together, so its run of results is walked once.
    let mut inserts: Vec<(usize, usize, usize)> = Vec::new();
    let mut run: Option<(usize, usize)> = None; // (caller position, last position of its run)
    for v in violations
        .iter()
        .filter(|v| v.kind == ViolationKind::MissingResult)
    {
        let last = match run {
            Some((caller, last)) if caller == v.position => last,
            _ => {
                let mut last = v.position;
                while turn
                    .get(last + 1)
                    .is_some_and(|(_, m)| m.borrow().kind == Kind::Tool)
                {
                    last += 1;
                }
                last
            }
        };
        run = Some((v.position, last));
        if let Some((caller_index, _)) = turn.get(v.position) {
            inserts.push((last, *caller_index, v.call_index));
        }
    }
    let mut orphans = violations
        .iter()
        .filter(|v| v.kind == ViolationKind::OrphanResult)
        .map(|v| v.position)
        .peekable();
    let mut inserts = inserts.into_iter().peekable();
    for (position, (index, _)) in turn.iter().enumerate() {
        if orphans.next_if_eq(&position).is_none() {
            view.push(Item::Original(*index));
        }
        while let Some((_, caller, call)) = inserts.next_if(|(after, _, _)| *after == position) {
            view.push(Item::MissingResult { caller, call });
        }
    }
}

/// Tokens of `view`, a view of the window newest first, counted by the source in window order.
fn counted<S: Source>(
    source: &mut S,
    view: &[Item],
    forward: &mut Vec<Item>,
) -> Result<u128, S::Error> {
    forward.clear();
    forward.extend(view.iter().rev());
    source.tokens(forward)
}

/// Tokens of `turn` kept whole (`view` holds its originals, newest first): the sum of counts
/// the source already knows, else the source's count of the view.
fn whole_tokens<S: Source>(
    source: &mut S,
    turn: &[(usize, S::Message)],
    view: &[Item],
    forward: &mut Vec<Item>,
) -> Result<u128, S::Error> {
    match source.known_tokens(turn) {
        Some(known) => Ok(known),
        None => counted(source, view, forward),
    }
}

/// Apply rules 1-7 of SPEC §5 to `source`.
///
/// The turns share one buffer for the turn being read and one for the window's items, so a
/// window allocates a handful of times whatever the number of turns it attaches. A turn comes
/// newest first, as the backward scan reads it, and so does its view: the window's items are
/// built newest first and put in window order once, at the end.
pub fn select<S: Source>(source: &mut S, options: &WindowOptions) -> Result<Window, S::Error> {
    let mut turns = TurnsBackward::new(source.len());
    let mut turn: Turn<S::Message> = Vec::with_capacity(16);
    let current_start = if options.has_current_turn {
        let Some((current_start, _)) = turns.next_turn(source, &mut turn)? else {
            return Err(CoreError::NoUserMessage.into());
        };
        Some(current_start)
    } else {
        None
    };
    let forward = &mut Vec::new();
    // At most 1 KiB up front: a window usually holds a few dozen messages.
    let mut items = Vec::with_capacity(options.max_attached_messages.min(40));
    // The current turn is repaired like a history turn but never left out: a call id repeated
    // inside one of its AI messages stays, unrepaired (and is not listed as a repair), and the
    // calls of its step in progress stay open.
    let mut open = OpenCalls::new();
    let mut violations = Vec::new();
    if current_start.is_some() {
        view_violations(&turn, true, &mut open, &mut violations);
        if violations.is_empty() {
            items.extend(originals(&turn));
        } else {
            push_repaired(&mut turn, &violations, &mut items);
        }
    }
    let current_repairs: Vec<Violation> = violations
        .iter()
        .filter(|v| v.kind != ViolationKind::DuplicateCallId)
        .cloned()
        .collect();
    let system_tokens = if options.has_system {
        source.system_tokens()?
    } else {
        0
    };
    let mut total_messages = items.len();
    let current_tokens = if items.is_empty() {
        0
    } else if violations.is_empty() {
        whole_tokens(source, &turn, &items, forward)?
    } else {
        counted(source, &items, forward)?
    };
    let mut total_tokens = system_tokens.saturating_add(current_tokens);
    let mut repairs_by_turn: Vec<Vec<Violation>> = Vec::new(); // newest first
    let (mut attached, mut compacted, mut seen) = (0usize, 0usize, 0usize);
    let (mut older_count, mut older_tokens) = (0usize, 0u128);
    let mut cut_by = None;
    let mut unread_end = current_start.unwrap_or(0);
    while let Some((start, _)) = turns.next_turn(source, &mut turn)? {
        seen += 1;
        unread_end = start;
        if seen > options.max_attached_turns {
            cut_by = Some(CutBy::Turns);
            break;
        }
        view_violations(&turn, false, &mut open, &mut violations);
        let (Some((last_index, last)), Some((first_index, first))) = (turn.first(), turn.last())
        else {
            continue; // unreachable: a turn starts with its user message
        };
        let (first_index, last_index) = (*first_index, *last_index);
        let recorded = match &first.borrow().turn_id {
            Some(turn_id) => source.recorded_completed(turn_id)?,
            None => None,
        };
        let last = last.borrow();
        let ends_with_answer = last.kind == Kind::Ai && last.final_text;
        let is_completed = match recorded {
            Some(done) => done,
            None => inferred_completed(
                last,
                violations
                    .iter()
                    .any(|v| v.kind == ViolationKind::MissingResult),
            ),
        };
        let is_compacted = options.compact_completed_tool_turns
            && seen > options.compression_keep_recent_turns
            && is_completed
            && has_tool_calls(&turn)
            && ends_with_answer;
        let left_out = !is_compacted
            && violations
                .iter()
                .any(|v| v.kind == ViolationKind::DuplicateCallId);
        let view_start = items.len();
        let whole = !is_compacted && !left_out && violations.is_empty();
        if is_compacted {
            items.extend([Item::Original(last_index), Item::Original(first_index)]);
        } else if left_out {
            // The turn is repaired by leaving it out.
        } else if whole {
            items.extend(originals(&turn));
        } else {
            push_repaired(&mut turn, &violations, &mut items);
        }
        let view = items.get(view_start..).unwrap_or_default();
        let view_tokens = if view.is_empty() {
            0
        } else if whole {
            whole_tokens(source, &turn, view, forward)?
        } else {
            counted(source, view, forward)?
        };
        let view_len = view.len();
        if options
            .max_attached_tokens
            .is_some_and(|budget| total_tokens.saturating_add(view_tokens) > budget)
        {
            cut_by = Some(CutBy::Tokens);
            items.truncate(view_start);
            break;
        }
        if total_messages + view_len > options.max_attached_messages {
            cut_by = Some(CutBy::Messages);
            items.truncate(view_start);
            break;
        }
        total_messages += view_len;
        total_tokens = total_tokens.saturating_add(view_tokens);
        if !is_compacted && !violations.is_empty() {
            repairs_by_turn.push(violations.clone());
        }
        if !left_out {
            attached += 1;
            compacted += usize::from(is_compacted);
            if seen > options.compression_keep_recent_turns {
                older_count += view_len;
                older_tokens = older_tokens.saturating_add(view_tokens);
            }
        }
    }
    items.reverse();
    Ok(Window {
        items,
        older_count,
        older_tokens,
        estimated_tokens: total_tokens,
        attached_turns: attached,
        compacted_turns: compacted,
        cut_by,
        repairs: if repairs_by_turn.is_empty() {
            current_repairs
        } else {
            repairs_by_turn
                .into_iter()
                .rev()
                .flatten()
                .chain(current_repairs)
                .collect()
        },
        seen_history_turns: seen,
        unread_end,
    })
}

#[cfg(test)]
mod tests {
    use super::{select, Item, WindowOptions};
    use crate::model::{Kind, MessageInfo, VecSource};
    use std::sync::Arc;

    fn source(kinds: &[Kind]) -> VecSource {
        let messages = kinds
            .iter()
            .enumerate()
            .map(|(index, kind)| {
                let mut info = MessageInfo::new(*kind, &format!("m{index}"));
                if *kind == Kind::Ai {
                    info.final_text = true;
                }
                Arc::new(info)
            })
            .collect();
        VecSource {
            messages,
            token_counts: vec![5; kinds.len()],
            statuses: Vec::new(),
            system_tokens: 0,
        }
    }

    fn options(has_current_turn: bool, max_attached_turns: usize) -> WindowOptions {
        WindowOptions {
            max_attached_turns,
            max_attached_messages: 100,
            compact_completed_tool_turns: false,
            compression_keep_recent_turns: 2,
            max_attached_tokens: None,
            has_current_turn,
            has_system: false,
        }
    }

    #[test]
    fn with_no_current_turn_every_turn_is_history() {
        let kinds = [Kind::User, Kind::Ai, Kind::User, Kind::Ai];
        let window = select(&mut source(&kinds), &options(false, 1));
        let window = window.expect("a window");
        assert_eq!(window.items, vec![Item::Original(2), Item::Original(3)]);
        assert_eq!((window.attached_turns, window.seen_history_turns), (1, 2));
        assert_eq!(window.estimated_tokens, 10);
        let last = select(&mut source(&kinds), &options(true, 1)).expect("a window");
        assert_eq!(last.items.len(), 4);
        assert_eq!(last.attached_turns, 1);
    }

    #[test]
    fn with_no_current_turn_a_history_without_a_user_message_is_an_empty_window() {
        let kinds = [Kind::System, Kind::Ai];
        let window = select(&mut source(&kinds), &options(false, 10)).expect("a window");
        assert!(window.items.is_empty());
        assert_eq!((window.estimated_tokens, window.unread_end), (0, 0));
        assert!(select(&mut source(&kinds), &options(true, 10)).is_err());
    }
}
