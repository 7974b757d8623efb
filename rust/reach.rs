//! How far back a window reaches (SPEC §5): where `window::select`'s backward scan stops
//! reading, proved from a tail of a history. A reader that pages a history from its newest
//! message back (the runner, a memory's window) stops once the tail it holds proves the reach,
//! and builds the window of the tail from there: the window the whole history gives.
//! The same algorithm, step for step, as `_reference/reach.py::window_reach`.

use crate::model::{Kind, MessageInfo, Source};
use crate::protocol::{OpenCalls, Violation, ViolationKind};
use crate::turns::{has_tool_calls, TurnsBackward};
use crate::window::{view_violations, WindowOptions};
use std::borrow::Borrow;

/// The index in `source` (the newest messages of a history) where the window's reach starts,
/// or None when the window may read further back than `source` holds.
///
/// The window reads turns newest first, the current turn and then history turns, until a
/// history turn is cut (SPEC §5): the `max_attached_turns + 1`-th, or the first whose view does
/// not fit `max_attached_messages` beside the views before it. The reach is the start of the
/// oldest turn the window may attach when the cut is by `max_attached_turns` (once `source`
/// shows an older turn), and the start of the turn that does not fit when it is by
/// `max_attached_messages`. So a window of `source[reach..]` attaches the same turns as the
/// window of any history `source` is the tail of, with any turn statuses and any token budget
/// or estimator (a budget only cuts sooner); its `cut_by` is the same but for a cut by
/// `max_attached_turns`, which it does not see (a reader that needs it asks for one turn more).
/// The views count the least the window may attach:
/// - the current turn (`has_current_turn`): its messages with orphan results left out and
///   missing results closed, as the window keeps it;
/// - a history turn: the same, or 0 messages if the window leaves it out (a repeated call id),
///   or at most 2 if it can be compacted (its recorded status, which `source` does not hold,
///   may say completed).
///
/// A turn's view counts only once `source` proves that the turn starts where it seems to (see
/// `starts_here`): the oldest turn of `source` may begin earlier. `max_attached_tokens` and
/// `has_system` are not read.
pub fn reach<S: Source>(
    source: &mut S,
    options: &WindowOptions,
) -> Result<Option<usize>, S::Error> {
    let mut turns = TurnsBackward::new(source.len());
    let mut turn: Vec<(usize, S::Message)> = Vec::new();
    let mut open = OpenCalls::new();
    let mut violations = Vec::new();
    let mut total = 0usize; // the least number of messages of the views read
    let mut attachable = source.len(); // the start of the oldest turn the window may attach
    if options.has_current_turn {
        // (The turn may begin earlier only if it is the oldest: then no history turn follows.)
        let Some((start, _)) = turns.next_turn(source, &mut turn)? else {
            return Ok(None);
        };
        attachable = start;
        view_violations(&turn, true, &mut open, &mut violations);
        total = view_len(turn.len(), &violations);
    }
    let mut seen = 0usize;
    while let Some((start, _)) = turns.next_turn(source, &mut turn)? {
        seen += 1;
        if seen > options.max_attached_turns {
            return Ok(Some(attachable));
        }
        if !starts_here(source, start)? {
            return Ok(None);
        }
        view_violations(&turn, false, &mut open, &mut violations);
        let left_out = violations
            .iter()
            .any(|v| v.kind == ViolationKind::DuplicateCallId);
        let mut least = if left_out {
            0
        } else {
            view_len(turn.len(), &violations)
        };
        let ends_with_answer = turn.first().is_some_and(|(_, last)| {
            let last: &MessageInfo = last.borrow();
            last.kind == Kind::Ai && last.final_text
        });
        if options.compact_completed_tool_turns
            && seen > options.compression_keep_recent_turns
            && has_tool_calls(&turn)
            && ends_with_answer
        {
            least = least.min(2);
        }
        if total.saturating_add(least) > options.max_attached_messages {
            return Ok(Some(start));
        }
        total += least;
        attachable = start;
    }
    Ok(None)
}

/// Whether the turn whose user message is at `start` starts there in any history `source` is
/// the tail of: the model-visible message before it is in `source` and does not continue it
/// (SPEC §4: a user message continues the turn of the previous model-visible message when
/// both carry the same turn id).
fn starts_here<S: Source>(source: &mut S, start: usize) -> Result<bool, S::Error> {
    let user = source.get(start)?;
    let turn_id = &user.borrow().turn_id;
    for index in (0..start).rev() {
        let previous = source.get(index)?;
        let previous: &MessageInfo = previous.borrow();
        if previous.visible {
            return Ok(turn_id.is_none() || previous.turn_id != *turn_id);
        }
    }
    Ok(false)
}

/// Messages of the view of a turn of `len` model-visible messages that the window repairs
/// (`window::push_repaired`): each orphan result left out, a synthetic result per missing one.
fn view_len(len: usize, violations: &[Violation]) -> usize {
    violations.iter().fold(len, |count, v| match v.kind {
        ViolationKind::OrphanResult => count.saturating_sub(1),
        ViolationKind::MissingResult => count + 1,
        ViolationKind::DuplicateCallId => count,
    })
}

#[cfg(test)]
mod tests {
    use super::reach;
    use crate::model::{walk, Kind, MessageInfo, VecSource};
    use crate::window::{select, WindowOptions};
    use std::sync::Arc;

    fn message(kind: Kind, id: &str, turn_id: Option<&str>) -> Arc<MessageInfo> {
        let mut info = MessageInfo::new(kind, id);
        info.turn_id = turn_id.map(str::to_owned);
        if kind == Kind::Ai && !id.contains("call") {
            info.final_text = true;
        }
        if id.contains("call") {
            // "...twice": one AI message calling the same id twice (a duplicate call id)
            let calls = if id.contains("twice") { 2 } else { 1 };
            info.call_ids = vec![format!("c{}", &id[id.len() - 1..]); calls];
            info.call_names = vec!["look".into(); calls];
        }
        if kind == Kind::Tool {
            info.tool_call_id = format!("c{}", &id[id.len() - 1..]);
        }
        Arc::new(info)
    }

    fn source(messages: Vec<Arc<MessageInfo>>, statuses: Vec<(String, bool)>) -> VecSource {
        let token_counts = vec![5; messages.len()];
        VecSource {
            messages,
            token_counts,
            statuses,
            system_tokens: 0,
        }
    }

    fn options(turns: usize, messages: usize, compact: bool, current: bool) -> WindowOptions {
        WindowOptions {
            max_attached_turns: turns,
            max_attached_messages: messages,
            compact_completed_tool_turns: compact,
            compression_keep_recent_turns: 1,
            max_attached_tokens: None,
            has_current_turn: current,
            has_system: false,
        }
    }

    /// `turns` turns of a user message, a call, its result and an answer.
    fn tool_turns(turns: usize) -> Vec<Arc<MessageInfo>> {
        (0..turns)
            .flat_map(|t| {
                let id = format!("t{t}");
                [
                    message(Kind::User, &format!("u{t}"), Some(&id)),
                    message(Kind::Ai, &format!("a{t}call{}", t % 10), Some(&id)),
                    message(Kind::Tool, &format!("r{t}.{}", t % 10), Some(&id)),
                    message(Kind::Ai, &format!("f{t}"), Some(&id)),
                ]
            })
            .collect()
    }

    #[test]
    fn the_reach_is_the_start_of_the_turn_the_window_is_cut_at() {
        let messages = tool_turns(6);
        // Two history turns: the third back is cut, the second starts at 4 * (6 - 3).
        let got = reach(
            &mut source(messages.clone(), vec![]),
            &options(2, 99, false, true),
        );
        assert_eq!(got.ok(), Some(Some(12)));
        // 4 + 4 + 4 > 10: the second history turn does not fit.
        let got = reach(
            &mut source(messages.clone(), vec![]),
            &options(9, 10, false, true),
        );
        assert_eq!(got.ok(), Some(Some(12)));
        // Compactable turns past the first count 2 each: 4 + 4 + 2 + 2 fits 12, 4 + 4 + 2 + 2
        // + 2 does not.
        let got = reach(
            &mut source(messages.clone(), vec![]),
            &options(9, 12, true, true),
        );
        assert_eq!(got.ok(), Some(Some(4)));
        // Without a current turn the newest turn is history.
        let got = reach(
            &mut source(messages.clone(), vec![]),
            &options(2, 99, false, false),
        );
        assert_eq!(got.ok(), Some(Some(16)));
        // No history turn: the current turn, or nothing.
        let got = reach(
            &mut source(messages.clone(), vec![]),
            &options(0, 99, false, true),
        );
        assert_eq!(got.ok(), Some(Some(20)));
        let got = reach(&mut source(messages, vec![]), &options(0, 99, false, false));
        assert_eq!(got.ok(), Some(Some(24)));
    }

    #[test]
    fn a_tail_that_does_not_prove_the_reach_gives_none() {
        let messages = tool_turns(3);
        assert_eq!(
            reach(
                &mut source(messages.clone(), vec![]),
                &options(9, 99, false, true)
            )
            .ok(),
            Some(None)
        );
        // The oldest turn is cut by the turn limit: it exists, wherever it starts.
        let got = reach(
            &mut source(messages.clone(), vec![]),
            &options(1, 99, false, true),
        );
        assert_eq!(got.ok(), Some(Some(4)));
        // The oldest turn would overflow the message limit, but it may begin earlier (its user
        // message is the first message), so its view is unknown.
        assert_eq!(
            reach(&mut source(messages, vec![]), &options(9, 9, false, true)).ok(),
            Some(None)
        );
        // A user message whose previous visible message has its turn id may continue that
        // turn; one with another turn id starts its own.
        for (before, expected) in [("t", None), ("s", Some(1))] {
            let tail = vec![
                message(Kind::Ai, "f0", Some(before)),
                message(Kind::User, "u1", Some("t")),
                message(Kind::Ai, "f1", Some("t")),
            ];
            let got = reach(&mut source(tail, vec![]), &options(9, 0, false, false));
            assert_eq!(got.ok(), Some(expected));
        }
    }

    /// The property the readers rely on, over random histories and tails of them: the window
    /// from where a tail's reach starts is the window of the whole history, whatever its
    /// statuses and token budget.
    #[test]
    fn the_window_of_the_tail_from_the_reach_is_the_window_of_the_history() {
        let mut next = walk(0x9e37_79b9_7f4a_7c15_u64);
        let mut proved = 0;
        for _ in 0..4000 {
            let len = usize::try_from(next(40)).unwrap_or(0);
            let messages: Vec<Arc<MessageInfo>> = (0..len)
                .map(|position| {
                    let turn = format!("t{}", next(3));
                    let turn_id = (next(3) > 0).then_some(turn.as_str());
                    let call = next(3);
                    match next(8) {
                        0 | 1 => message(Kind::User, &format!("u{position}"), turn_id),
                        2 => message(Kind::Ai, &format!("a{position}"), turn_id),
                        3 => message(Kind::Ai, &format!("a{position}call{call}"), turn_id),
                        4 => message(Kind::Ai, &format!("a{position}twicecall{call}"), turn_id),
                        5 | 6 => message(Kind::Tool, &format!("r{position}.{call}"), turn_id),
                        _ => message(Kind::Action, &format!("n{position}"), turn_id),
                    }
                })
                .collect();
            let statuses = vec![("t0".to_owned(), true), ("t1".to_owned(), next(2) == 0)];
            let mut limits = options(
                usize::try_from(next(5)).unwrap_or(0),
                usize::try_from(next(14)).unwrap_or(0),
                next(2) == 0,
                next(4) > 0,
            );
            limits.compression_keep_recent_turns = usize::try_from(next(3)).unwrap_or(0);
            if next(3) == 0 {
                limits.max_attached_tokens = Some(u128::from(next(60)));
            }
            // The reader holds the newest messages, from `cut` on.
            let cut = usize::try_from(next(u64::try_from(len).unwrap_or(0) + 1)).unwrap_or(0);
            let held = messages.get(cut..).unwrap_or_default().to_vec();
            let Ok(Some(start)) = reach(&mut source(held, vec![]), &limits) else {
                continue;
            };
            let start = cut + start;
            proved += 1;
            let whole = select(&mut source(messages.clone(), statuses.clone()), &limits);
            let mut tail = source(messages.get(start..).unwrap_or_default().to_vec(), statuses);
            let from_reach = select(&mut tail, &limits);
            let (Ok(whole), Ok(from_reach)) = (whole, from_reach) else {
                panic!("a window of {messages:?} from {start} failed");
            };
            let shifted: Vec<_> = from_reach
                .items
                .iter()
                .map(|item| match item {
                    crate::model::Item::Original(index) => {
                        crate::model::Item::Original(index + start)
                    }
                    crate::model::Item::MissingResult { caller, call } => {
                        crate::model::Item::MissingResult {
                            caller: caller + start,
                            call: *call,
                        }
                    }
                })
                .collect();
            assert_eq!(shifted, whole.items, "{messages:?} from {start}");
            assert_eq!(from_reach.estimated_tokens, whole.estimated_tokens);
            if whole.cut_by != Some(crate::window::CutBy::Turns) {
                assert_eq!(from_reach.cut_by, whole.cut_by);
            }
            assert!(from_reach.unread_end + start >= whole.unread_end);
        }
        assert!(proved > 1000, "only {proved} tails proved their reach");
    }
}
