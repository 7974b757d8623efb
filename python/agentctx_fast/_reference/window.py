"""Window selection (SPEC §5 rules 1-7 and the repairs of §6), scanning backwards.

The compressor step (rule 8) runs in the shared layer above both backends
(`agentctx_fast.window`), on the ``older`` messages this core marks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

from agentctx_fast._reference.message_tokens import heuristic_tokens
from agentctx_fast._reference.protocol import Violation, validate_segment
from agentctx_fast._reference.turns import (
    check_message,
    check_sequence,
    has_tool_calls,
    inferred_completed,
    turn_starts,
    turns_backward,
    visible_messages,
)
from agentctx_fast.errors import InvalidArgumentError
from agentctx_fast.messages import AiMessage, Message, SystemMessage, ToolMessage, UserMessage

CountTokens = Callable[[Sequence[Message]], int]


class WindowCore(NamedTuple):
    """What the core hands the shared layer; both backends return exactly this."""

    messages: list[Message]  # system (if any) first, then the window
    has_system: bool
    older_count: int  # messages right after the system message that a compressor may replace
    older_tokens: int
    estimated_tokens: int
    attached_turns: int
    compacted_turns: int
    cut_by: str | None
    repairs: list[Violation]
    seen_history_turns: int  # history turns read by the scan, the one it stopped at included
    unread_end: int  # messages[:unread_end] were not read; their turns are counted on demand


def leading_system(messages: Sequence[object]) -> SystemMessage | None:
    """The first SystemMessage before the first UserMessage, if any."""
    for index in range(len(messages)):
        message = check_message(messages, index)
        if isinstance(message, UserMessage):
            return None
        if isinstance(message, SystemMessage):
            return message
    return None


def count_turns(messages: Sequence[object], end: int) -> int:
    """Number of turns that start in ``messages[:end]``."""
    check_sequence(messages)
    return len(turn_starts(messages[:end]))


def _status_completed(
    turn: Sequence[Message], statuses: Mapping[str, object] | None, completed: object
) -> bool | None:
    """The recorded status (True when COMPLETED), or None when there is no record."""
    if statuses is None:
        return None
    turn_id = turn[0].turn_id
    if turn_id is None or turn_id not in statuses:
        return None
    return bool(statuses[turn_id] == completed)


def _repaired(turn: list[Message], violations: list[tuple[int, Violation]]) -> list[Message]:
    """The turn with orphan results left out and missing results closed synthetically."""
    orphans = {position for position, (kind, _, _) in violations if kind == "orphan_result"}
    missing: dict[int, list[str]] = {}
    for position, (kind, _, call_id) in violations:
        if kind == "missing_result":
            missing.setdefault(position, []).append(call_id)
    # A synthetic result goes right after the run of results that follows its call.
    insert_after: dict[int, list[ToolMessage]] = {}
    for position, call_ids in missing.items():
        caller = turn[position]
        assert isinstance(caller, AiMessage)
        last = position
        while last + 1 < len(turn) and isinstance(turn[last + 1], ToolMessage):
            last += 1
        names = {call.id: call.name for call in caller.tool_calls}
        insert_after.setdefault(last, []).extend(
            ToolMessage(
                call_id,
                "tool result missing",
                tool_name=names.get(call_id),
                is_error=True,
                message_id=f"{call_id}:missing",
                turn_id=caller.turn_id,
            )
            for call_id in call_ids
        )
    view: list[Message] = []
    for position, message in enumerate(turn):
        if position not in orphans:
            view.append(message)
        view.extend(insert_after.get(position, ()))
    return view


def select(
    messages: Sequence[object],
    system: SystemMessage | None,
    use_leading_system: bool,
    max_attached_turns: int,
    max_attached_messages: int,
    compact_completed_tool_turns: bool,
    compression_keep_recent_turns: int,
    max_attached_tokens: int | None,
    count_tokens: CountTokens | None,
    turn_statuses: Mapping[str, object] | None,
    completed: object,
) -> WindowCore:
    """Apply rules 1-7 of SPEC §5; see `agentctx_fast.window.build_window`."""
    check_sequence(messages)
    if count_tokens is None:
        count_tokens = heuristic_tokens
    if use_leading_system:
        system = leading_system(messages)
    turns = turns_backward(messages)
    current_bounds = next(turns, None)
    if current_bounds is None:
        raise InvalidArgumentError(
            "messages holds no UserMessage: a window must start with a user message"
        )
    current = visible_messages(messages, *current_bounds)
    system_tokens = count_tokens([system]) if system is not None else 0
    total_messages = len(current)
    total_tokens = system_tokens + count_tokens(current)
    kept: list[
        tuple[int, list[Message], int]
    ] = []  # newest first: (history position, view, tokens)
    repairs_by_turn: list[list[Violation]] = []  # newest turn first
    attached = compacted = seen = 0
    cut_by: str | None = None
    unread_end = current_bounds[0]
    for start, end in turns:
        seen += 1
        unread_end = start
        if seen > max_attached_turns:
            cut_by = "max_attached_turns"
            break
        turn = visible_messages(messages, start, end)
        violations = validate_segment(turn)
        last = turn[-1]
        recorded = _status_completed(turn, turn_statuses, completed)
        is_completed = (
            recorded
            if recorded is not None
            else inferred_completed(turn, any(v[0] == "missing_result" for _, v in violations))
        )
        is_compacted = (
            compact_completed_tool_turns
            and seen > compression_keep_recent_turns
            and is_completed
            and has_tool_calls(turn)
            and isinstance(last, AiMessage)
            and last.has_final_text
        )
        left_out = False
        if is_compacted:
            view = [turn[0], last]
            turn_repairs: list[Violation] = []
        else:
            turn_repairs = [v for _, v in violations]
            if any(v[0] == "duplicate_call_id" for v in turn_repairs):
                view, left_out = [], True
            else:
                view = _repaired(turn, violations) if violations else turn
        view_tokens = count_tokens(view) if view else 0
        over_tokens = max_attached_tokens is not None and (
            total_tokens + view_tokens > max_attached_tokens
        )
        if over_tokens:
            cut_by = "max_attached_tokens"
            break
        if total_messages + len(view) > max_attached_messages:
            cut_by = "max_attached_messages"
            break
        total_messages += len(view)
        total_tokens += view_tokens
        repairs_by_turn.append(turn_repairs)
        if not left_out:
            attached += 1
            compacted += is_compacted
            kept.append((seen, view, view_tokens))
    window: list[Message] = [system] if system is not None else []
    older_count = older_tokens = 0
    for position, view, view_tokens in reversed(kept):
        window.extend(view)
        if position > compression_keep_recent_turns:
            older_count += len(view)
            older_tokens += view_tokens
    window.extend(current)
    return WindowCore(
        messages=window,
        has_system=system is not None,
        older_count=older_count,
        older_tokens=older_tokens,
        estimated_tokens=total_tokens,
        attached_turns=attached,
        compacted_turns=compacted,
        cut_by=cut_by,
        repairs=[v for turn_repairs in reversed(repairs_by_turn) for v in turn_repairs],
        seen_history_turns=seen,
        unread_end=unread_end,
    )
