"""Tool-call protocol validation (SPEC §6), pairing checked inside each turn."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from agentctx_fast._reference.turns import check_message, check_sequence, turn_starts
from agentctx_fast.messages import AiMessage, Message, ToolMessage

# (kind, message_id, tool_call_id)
Violation = tuple[str, str, str]


def validate_segment(segment: Sequence[Message]) -> list[tuple[int, Violation]]:
    """Violations of one turn as ``(position in segment, violation)``, in message order."""
    found: list[tuple[int, int, Violation]] = []
    open_calls: dict[str, tuple[int, int, str]] = {}  # id -> (position, call index, message_id)
    for position, message in enumerate(segment):
        if isinstance(message, AiMessage):
            for call_index, call in enumerate(message.tool_calls):
                if call.id in open_calls:
                    found.append(
                        (position, call_index, ("duplicate_call_id", message.message_id, call.id))
                    )
                else:
                    open_calls[call.id] = (position, call_index, message.message_id)
        elif isinstance(message, ToolMessage):
            if open_calls.pop(message.tool_call_id, None) is None:
                found.append(
                    (position, 0, ("orphan_result", message.message_id, message.tool_call_id))
                )
    for call_id, (position, call_index, message_id) in open_calls.items():
        found.append((position, call_index, ("missing_result", message_id, call_id)))
    found.sort(key=lambda item: (item[0], item[1]))
    return [(position, violation) for position, _, violation in found]


def validate(messages: Sequence[object]) -> list[Violation]:
    """Every violation of the list, turn by turn (messages before the first turn form one)."""
    check_sequence(messages)
    checked = [check_message(messages, index) for index in range(len(messages))]
    bounds = [0, *turn_starts(checked), len(checked)]
    violations: list[Violation] = []
    for start, end in pairwise(bounds):
        if start < end:
            violations.extend(v for _, v in validate_segment(checked[start:end]))
    return violations
