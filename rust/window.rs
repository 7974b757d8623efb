//! Window selection (SPEC §5 rules 1-7 and the repairs of §6), scanning backwards from the end.
//! The same algorithm, step for step, as `_reference/window.py::select`.

use crate::error::CoreError;
use crate::model::{Item, Kind, MessageInfo, Source};
use crate::protocol::{validate_segment, Violation, ViolationKind};
use crate::turns::{has_tool_calls, inferred_completed, visible_indices, TurnsBackward};
use std::borrow::Borrow;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowOptions {
    pub max_attached_turns: usize,
    pub max_attached_messages: usize,
    pub compact_completed_tool_turns: bool,
    pub compression_keep_recent_turns: usize,
    pub max_attached_tokens: Option<u64>,
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
    pub older_tokens: u64,
    pub estimated_tokens: u64,
    pub attached_turns: usize,
    pub compacted_turns: usize,
    pub cut_by: Option<CutBy>,
    pub repairs: Vec<Violation>,
    pub seen_history_turns: usize,
    pub unread_end: usize,
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

fn originals<M>(turn: &Turn<M>) -> Vec<Item> {
    turn.iter()
        .map(|(index, _)| Item::Original(*index))
        .collect()
}

/// The turn with orphan results left out and missing results closed synthetically, each
/// synthetic result right after the run of results that follows its call.
fn repaired<M: Borrow<MessageInfo>>(turn: &Turn<M>, violations: &[Violation]) -> Vec<Item> {
    let mut view = Vec::with_capacity(turn.len() + violations.len());
    // (insert after position, caller position, call index), in the order Python inserts them.
    let mut inserts: Vec<(usize, usize, usize)> = Vec::new();
    for v in violations
        .iter()
        .filter(|v| v.kind == ViolationKind::MissingResult)
    {
        let mut last = v.position;
        while turn
            .get(last + 1)
            .is_some_and(|(_, m)| m.borrow().kind == Kind::Tool)
        {
            last += 1;
        }
        inserts.push((last, v.position, v.call_index));
    }
    for (position, (index, _)) in turn.iter().enumerate() {
        let orphan = violations
            .iter()
            .any(|v| v.kind == ViolationKind::OrphanResult && v.position == position);
        if !orphan {
            view.push(Item::Original(*index));
        }
        for (_, caller, call) in inserts.iter().filter(|(after, _, _)| *after == position) {
            if let Some((caller_index, _)) = turn.get(*caller) {
                view.push(Item::MissingResult {
                    caller: *caller_index,
                    call: *call,
                });
            }
        }
    }
    view
}

/// Apply rules 1-7 of SPEC §5 to `source`.
pub fn select<S: Source>(source: &mut S, options: &WindowOptions) -> Result<Window, S::Error> {
    let mut turns = TurnsBackward::new(source.len());
    let Some((current_start, current_end)) = turns.next_turn(source)? else {
        return Err(CoreError::NoUserMessage.into());
    };
    let current = visible_indices(source, current_start, current_end)?;
    let current_items = originals(&current);
    let system_tokens = if options.has_system {
        source.system_tokens()?
    } else {
        0
    };
    let mut total_messages = current_items.len();
    let mut total_tokens = system_tokens + source.tokens(&current_items)?;
    let mut kept: Vec<(usize, Vec<Item>, u64)> = Vec::new(); // newest first
    let mut repairs_by_turn: Vec<Vec<Violation>> = Vec::new();
    let (mut attached, mut compacted, mut seen) = (0usize, 0usize, 0usize);
    let mut cut_by = None;
    let mut unread_end = current_start;
    while let Some((start, end)) = turns.next_turn(source)? {
        seen += 1;
        unread_end = start;
        if seen > options.max_attached_turns {
            cut_by = Some(CutBy::Turns);
            break;
        }
        let turn = visible_indices(source, start, end)?;
        let violations = validate_segment(turn.iter().map(|(_, m)| m.borrow()));
        let Some((last_index, last)) = turn.last().cloned() else {
            continue; // unreachable: a turn starts with its user message
        };
        let first_turn_id = turn
            .first()
            .and_then(|(_, first)| first.borrow().turn_id.clone());
        let recorded = match first_turn_id {
            Some(turn_id) => source.recorded_completed(&turn_id)?,
            None => None,
        };
        let is_completed = match recorded {
            Some(done) => done,
            None => inferred_completed(
                &turn,
                violations
                    .iter()
                    .any(|v| v.kind == ViolationKind::MissingResult),
            ),
        };
        let is_compacted = options.compact_completed_tool_turns
            && seen > options.compression_keep_recent_turns
            && is_completed
            && has_tool_calls(&turn)
            && last.borrow().kind == Kind::Ai
            && last.borrow().final_text;
        let mut left_out = false;
        let (view, turn_repairs) = if is_compacted {
            (
                vec![
                    Item::Original(start_index(&turn)),
                    Item::Original(last_index),
                ],
                Vec::new(),
            )
        } else if violations
            .iter()
            .any(|v| v.kind == ViolationKind::DuplicateCallId)
        {
            left_out = true;
            (Vec::new(), violations)
        } else if violations.is_empty() {
            (originals(&turn), violations)
        } else {
            (repaired(&turn, &violations), violations)
        };
        let view_tokens = if view.is_empty() {
            0
        } else {
            source.tokens(&view)?
        };
        if options
            .max_attached_tokens
            .is_some_and(|budget| total_tokens + view_tokens > budget)
        {
            cut_by = Some(CutBy::Tokens);
            break;
        }
        if total_messages + view.len() > options.max_attached_messages {
            cut_by = Some(CutBy::Messages);
            break;
        }
        total_messages += view.len();
        total_tokens += view_tokens;
        repairs_by_turn.push(turn_repairs);
        if !left_out {
            attached += 1;
            compacted += usize::from(is_compacted);
            kept.push((seen, view, view_tokens));
        }
    }
    let mut items = Vec::with_capacity(total_messages);
    let (mut older_count, mut older_tokens) = (0usize, 0u64);
    for (position, view, view_tokens) in kept.into_iter().rev() {
        if position > options.compression_keep_recent_turns {
            older_count += view.len();
            older_tokens += view_tokens;
        }
        items.extend(view);
    }
    items.extend(current_items);
    Ok(Window {
        items,
        older_count,
        older_tokens,
        estimated_tokens: total_tokens,
        attached_turns: attached,
        compacted_turns: compacted,
        cut_by,
        repairs: repairs_by_turn.into_iter().rev().flatten().collect(),
        seen_history_turns: seen,
        unread_end,
    })
}

fn start_index<M>(turn: &Turn<M>) -> usize {
    turn.first().map_or(0, |(index, _)| *index)
}
