"""Tool-call protocol validation (SPEC §6), pairing checked inside each turn."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from agentctx_fast.core._reference.read import MessageView
from agentctx_fast.core._reference.turns import stream, turn_starts
from agentctx_fast.core.messages import KIND_AI, KIND_TOOL

# (kind, message_id, tool_call_id)
Violation = tuple[str, str, str]


def validate_segment(
    segment: Sequence[MessageView], adjacent: bool = False
) -> list[tuple[int, int, Violation]]:
    """Violations of one turn as ``(position in segment, call index, violation)``, in message
    order (a missing result's call index says which call of its message it is).

    ``adjacent`` is how the window reads a turn (SPEC §20): a call is answered only by the run
    of tool messages right after its AI message, so calls still open when any other message
    comes are missing there, and a result after that message is an orphan."""
    found: list[tuple[int, int, Violation]] = []
    open_calls: dict[str, tuple[int, int, str]] = {}  # id -> (position, call index, message_id)
    for position, message in enumerate(segment):
        if message.kind == KIND_TOOL:
            if open_calls.pop(message.tool_call_id, None) is None:
                found.append(
                    (position, 0, ("orphan_result", message.message_id, message.tool_call_id))
                )
            continue
        if adjacent and open_calls:
            _close_missing(open_calls, found)
        if message.kind == KIND_AI:
            for call_index, call_id in enumerate(message.call_ids):
                if call_id in open_calls:
                    found.append(
                        (position, call_index, ("duplicate_call_id", message.message_id, call_id))
                    )
                else:
                    open_calls[call_id] = (position, call_index, message.message_id)
    _close_missing(open_calls, found)
    found.sort(key=lambda item: (item[0], item[1]))
    return found


def _close_missing(
    open_calls: dict[str, tuple[int, int, str]], found: list[tuple[int, int, Violation]]
) -> None:
    """Every open call is a missing result; none is open after."""
    for call_id, (position, call_index, message_id) in open_calls.items():
        found.append((position, call_index, ("missing_result", message_id, call_id)))
    open_calls.clear()


def validate(messages: Sequence[object]) -> list[Violation]:
    """Every violation of the list, turn by turn (messages before the first turn form one)."""
    views = list(stream(messages))
    bounds = [0, *turn_starts(views), len(views)]
    violations: list[Violation] = []
    for start, end in pairwise(bounds):
        if start < end:
            violations.extend(v for _, _, v in validate_segment(views[start:end]))
    return violations
