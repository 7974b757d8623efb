//! Tool-call protocol validation (SPEC §6), pairing checked inside each turn.

use crate::model::{Kind, MessageInfo, Source};
use crate::turns::turn_starts;
use std::collections::HashMap;
use std::sync::Arc;

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

/// Violations of one turn's messages, in message order.
pub fn validate_segment(segment: &[(usize, Arc<MessageInfo>)]) -> Vec<Violation> {
    let mut found = Vec::new();
    // Open calls by id; the order they were opened in decides the order of missing results.
    let mut open: HashMap<&str, (usize, usize)> = HashMap::new();
    let mut opened: Vec<&str> = Vec::new();
    for (position, (_, message)) in segment.iter().enumerate() {
        match message.kind {
            Kind::Ai => {
                for (call_index, call_id) in message.call_ids.iter().enumerate() {
                    if open.contains_key(call_id.as_str()) {
                        found.push(Violation {
                            kind: ViolationKind::DuplicateCallId,
                            message_id: message.message_id.clone(),
                            tool_call_id: call_id.clone(),
                            position,
                            call_index,
                        });
                    } else {
                        open.insert(call_id, (position, call_index));
                        opened.push(call_id);
                    }
                }
            }
            Kind::Tool => {
                if open.remove(message.tool_call_id.as_str()).is_some() {
                    continue;
                }
                found.push(Violation {
                    kind: ViolationKind::OrphanResult,
                    message_id: message.message_id.clone(),
                    tool_call_id: message.tool_call_id.clone(),
                    position,
                    call_index: 0,
                });
            }
            _ => {}
        }
    }
    for call_id in opened {
        // A closed id may be opened again later; report each still-open id once, at its opening.
        if let Some((position, call_index)) = open.remove(call_id) {
            if let Some((_, caller)) = segment.get(position) {
                found.push(Violation {
                    kind: ViolationKind::MissingResult,
                    message_id: caller.message_id.clone(),
                    tool_call_id: call_id.to_owned(),
                    position,
                    call_index,
                });
            }
        }
    }
    found.sort_by_key(|v| (v.position, v.call_index));
    found
}

/// Every violation of the history, turn by turn (messages before the first turn form one).
pub fn validate<S: Source>(source: &mut S) -> Result<Vec<Violation>, S::Error> {
    let len = source.len();
    let mut all = Vec::with_capacity(len);
    for index in 0..len {
        all.push((index, source.get(index)?));
    }
    let starts = turn_starts(source, len)?;
    let mut bounds = Vec::with_capacity(starts.len() + 2);
    bounds.push(0);
    bounds.extend(starts);
    bounds.push(len);
    let mut violations = Vec::new();
    for pair in bounds.windows(2) {
        if let [start, end] = *pair {
            if start < end {
                violations.extend(validate_segment(&all[start..end]));
            }
        }
    }
    Ok(violations)
}
