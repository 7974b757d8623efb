"""Window selection (SPEC §5 rules 1-7 and the repairs of §6), scanning backwards.

The compressor step (rule 8) runs in the shared layer above both backends
(`agentctx_fast.core.window`), on the ``older`` messages this core marks.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple, cast

from agentctx_fast.core._reference.protocol import Violation, validate_segment
from agentctx_fast.core._reference.read import MESSAGE_OVERHEAD, MessageView, tokens, view
from agentctx_fast.core._reference.tokens import count_text
from agentctx_fast.core._reference.turns import (
    History,
    Turn,
    has_tool_calls,
    inferred_completed,
    stream,
    turn_starts,
    turns_backward,
    visible_turn,
)
from agentctx_fast.core.messages import (
    KIND_AI,
    KIND_SYSTEM,
    KIND_TOOL,
    KIND_USER,
    Message,
    ToolMessage,
)
from agentctx_fast.core.types import TurnStatus
from agentctx_fast.errors import InvalidArgumentError

CountTokens = Callable[[Sequence[Message]], int]
MISSING_RESULT_TEXT = "tool result missing"
MISSING_RESULT_TOKENS = MESSAGE_OVERHEAD + count_text(MISSING_RESULT_TEXT)
_COMPLETED = TurnStatus.COMPLETED

# One message of a window view: (message, where it came from, its view or None if synthetic).
Item = tuple[Message, str, MessageView | None]


UNCHECKED = "options were not checked: make them with WindowOptions(...)"


class CoreOptions(tuple[int, int, bool, int, int | None, str]):
    """The window limits of a `WindowOptions` in this core's form, made once when the options
    are (`WindowOptions.__post_init__`) and immutable (a tuple); `select` takes nothing else.
    The arguments are `WindowOptions`' checked values; anything else is an
    `InvalidArgumentError`, as in the Rust core's `CoreOptions`."""

    __slots__ = ()

    def __new__(
        cls,
        max_attached_turns: object,
        max_attached_messages: object,
        compact_completed_tool_turns: object,
        compression_keep_recent_turns: object,
        max_attached_tokens: object,
        current_turn: object,
    ) -> CoreOptions:
        limits = (max_attached_turns, max_attached_messages, compression_keep_recent_turns)
        budget = 0 if max_attached_tokens is None else max_attached_tokens
        for value in (*limits, budget):
            if type(value) is not int or value < 0:
                raise InvalidArgumentError(UNCHECKED)
        compact = compact_completed_tool_turns
        if compact is not True and compact is not False:
            raise InvalidArgumentError(UNCHECKED)
        if type(current_turn) is not str or current_turn not in ("last", "none"):
            raise InvalidArgumentError(UNCHECKED)
        return tuple.__new__(
            cls,
            (
                max_attached_turns,
                max_attached_messages,
                compact,
                compression_keep_recent_turns,
                max_attached_tokens,
                current_turn,
            ),
        )

    def __getnewargs__(self) -> tuple[int, int, bool, int, int | None, str]:
        return tuple(self)  # type: ignore[return-value]


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


def leading_system(history: History) -> Message | None:
    """The first SystemMessage before the first UserMessage, if any."""
    for index in range(history.len):
        message, message_view = history.get(index)
        if message_view.kind == KIND_USER:
            return None
        if message_view.kind == KIND_SYSTEM:
            return message  # type: ignore[return-value]
    return None


def count_turns(messages: Sequence[object], end: object) -> int:
    """Number of turns that start in ``messages[:end]``."""
    # The int's own value: an int subclass's comparisons and __index__ never run.
    is_int = issubclass(type(end), int) and type(end) is not bool
    plain = operator.index(cast(int, end)) if is_int else -1
    if plain < 0:
        raise InvalidArgumentError(f"count_turns end must be an int >= 0, got {end!r}")
    return len(turn_starts(stream(messages, plain)))


def _status_completed(turn: Turn, statuses: Mapping[str, object] | None) -> bool | None:
    """The recorded status (True when COMPLETED), or None when there is no record."""
    if statuses is None:
        return None
    turn_id = turn[0][2].turn_id
    if turn_id is None or turn_id not in statuses:
        return None
    return bool(statuses[turn_id] == _COMPLETED)


def _missing_result(caller: MessageView, call_index: int) -> ToolMessage:
    """The synthetic result closing call ``call_index`` of ``caller``, from what was read."""
    call_id = caller.call_ids[call_index]
    return ToolMessage(
        call_id,
        MISSING_RESULT_TEXT,
        tool_name=caller.call_names[call_index],
        is_error=True,
        message_id=f"{call_id}:missing",
        turn_id=caller.turn_id,
    )


def _repaired(turn: Turn, violations: list[tuple[int, int, Violation]]) -> list[Item]:
    """The turn with orphan results left out and missing results closed synthetically."""
    orphans = {position for position, _, (kind, _, _) in violations if kind == "orphan_result"}
    # A synthetic result goes right after the run of results that follows its call (the run
    # is found once per calling message: a message's missing results are listed together).
    insert_after: dict[int, list[Item]] = {}
    caller_position = last = -1
    for position, call_index, (kind, _, _) in violations:
        if kind != "missing_result":
            continue
        if position != caller_position:
            caller_position = last = position
            while last + 1 < len(turn) and turn[last + 1][2].kind == KIND_TOOL:
                last += 1
        synthetic = _missing_result(turn[position][2], call_index)
        insert_after.setdefault(last, []).append((synthetic, "", None))
    view_items: list[Item] = []
    for position, (index, message, message_view) in enumerate(turn):
        if position not in orphans:
            view_items.append((message, f"messages[{index}]", message_view))  # type: ignore[arg-type]
        view_items.extend(insert_after.get(position, ()))
    return view_items


def _step_in_progress(turn: Turn) -> int:
    """Position of the turn's last AI message when only tool results follow it, else -1: the
    step in progress, whose calls are left open (their results may still come)."""
    for position in range(len(turn) - 1, -1, -1):
        kind = turn[position][2].kind
        if kind != KIND_TOOL:
            return position if kind == KIND_AI else -1
    return -1


def turn_violations(turn: Turn, is_current: bool) -> list[tuple[int, int, Violation]]:
    """The turn's violations as the window reads them (SPEC §20: a result answers its call only
    in the run of results right after the call's AI message). The current turn leaves the calls
    of its step in progress open: they are not violations there."""
    found = validate_segment([v for _, _, v in turn], adjacent=True)
    if found and is_current:
        step = _step_in_progress(turn)
        found = [f for f in found if not (f[0] == step and f[2][0] == "missing_result")]
    return found


def _items(turn: Turn) -> list[Item]:
    return [(m, f"messages[{i}]", v) for i, m, v in turn]  # type: ignore[misc]


def _counter(count_tokens: CountTokens | None) -> Callable[[list[Item]], int]:
    if count_tokens is not None:
        return lambda items: count_tokens([message for message, _, _ in items])

    def heuristic(items: list[Item]) -> int:
        total = 0
        for message, where, message_view in items:
            if message_view is None:
                total += MISSING_RESULT_TOKENS
            else:
                total += tokens(message, message_view, where, count_text)
        return total

    return heuristic


def select(
    messages: Sequence[object],
    system: Message | None,
    use_leading_system: bool,
    options: CoreOptions,
    count_tokens: CountTokens | None,
    turn_statuses: Mapping[str, object] | None,
) -> WindowCore:
    """Apply rules 1-7 of SPEC §5; see `agentctx_fast.core.window.build_window`."""
    if type(options) is not CoreOptions:
        raise InvalidArgumentError(UNCHECKED)
    history = History(messages)
    max_attached_turns, max_attached_messages, compact, keep_recent, max_attached_tokens, _ = (
        options
    )
    has_current = options[5] == "last"
    count = _counter(count_tokens)
    if use_leading_system:
        system = leading_system(history)
    turns = turns_backward(history)
    current: list[Item] = []
    current_repairs: list[Violation] = []
    unread_end = 0
    if has_current:
        current_bounds = next(turns, None)
        if current_bounds is None:
            raise InvalidArgumentError(
                "messages holds no UserMessage: a window must start with a user message"
            )
        unread_end = current_bounds[0]
        # The current turn is repaired like a history turn but never left out: a call id
        # repeated inside one of its AI messages stays, unrepaired.
        current_turn = visible_turn(history, *current_bounds)
        found = turn_violations(current_turn, is_current=True)
        current = _repaired(current_turn, found) if found else _items(current_turn)
        current_repairs = [v for _, _, v in found if v[0] != "duplicate_call_id"]
    if system is None:
        system_tokens = 0
    elif count_tokens is not None:
        system_tokens = count_tokens([system])
    else:
        system_tokens = tokens(system, view(system, "system"), "system", count_text)
    total_messages = len(current)
    total_tokens = system_tokens + (count(current) if current else 0)
    kept: list[tuple[int, list[Item], int]] = []  # newest first: (history position, view, tokens)
    repairs_by_turn: list[list[Violation]] = []  # newest turn first
    attached = compacted = seen = 0
    cut_by: str | None = None
    for start, end in turns:
        seen += 1
        unread_end = start
        if seen > max_attached_turns:
            cut_by = "max_attached_turns"
            break
        turn = visible_turn(history, start, end)
        violations = turn_violations(turn, is_current=False)
        last = turn[-1][2]
        recorded = _status_completed(turn, turn_statuses)
        is_completed = (
            recorded
            if recorded is not None
            else inferred_completed(turn, any(v[0] == "missing_result" for _, _, v in violations))
        )
        is_compacted = (
            compact
            and seen > keep_recent
            and is_completed
            and has_tool_calls(turn)
            and last.kind == KIND_AI
            and last.final_text
        )
        left_out = False
        if is_compacted:
            items = _items([turn[0], turn[-1]])
            turn_repairs: list[Violation] = []
        else:
            turn_repairs = [v for _, _, v in violations]
            if any(v[0] == "duplicate_call_id" for v in turn_repairs):
                items, left_out = [], True
            else:
                items = _repaired(turn, violations) if violations else _items(turn)
        view_tokens = count(items) if items else 0
        if max_attached_tokens is not None and total_tokens + view_tokens > max_attached_tokens:
            cut_by = "max_attached_tokens"
            break
        if total_messages + len(items) > max_attached_messages:
            cut_by = "max_attached_messages"
            break
        total_messages += len(items)
        total_tokens += view_tokens
        repairs_by_turn.append(turn_repairs)
        if not left_out:
            attached += 1
            compacted += is_compacted
            kept.append((seen, items, view_tokens))
    window: list[Message] = [system] if system is not None else []
    older_count = older_tokens = 0
    for position, items, view_tokens in reversed(kept):
        window.extend(message for message, _, _ in items)
        if position > keep_recent:
            older_count += len(items)
            older_tokens += view_tokens
    window.extend(message for message, _, _ in current)
    return WindowCore(
        messages=window,
        has_system=system is not None,
        older_count=older_count,
        older_tokens=older_tokens,
        estimated_tokens=total_tokens,
        attached_turns=attached,
        compacted_turns=compacted,
        cut_by=cut_by,
        repairs=[
            *(v for turn_repairs in reversed(repairs_by_turn) for v in turn_repairs),
            *current_repairs,
        ],
        seen_history_turns=seen,
        unread_end=unread_end,
    )
