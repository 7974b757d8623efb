"""The reference core's entry points, with the signatures of the Rust module `_native`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentctx_fast.core._reference.protocol import validate, validate_segment
from agentctx_fast.core._reference.reach import window_reach
from agentctx_fast.core._reference.read import KINDS, read, tokens
from agentctx_fast.core._reference.tokens import count_text
from agentctx_fast.core._reference.turns import (
    Turn,
    check_sequence,
    inferred_completed,
    stream,
    turn_starts,
)
from agentctx_fast.core._reference.window import _COMPLETED, CoreOptions, count_turns, select
from agentctx_fast.core.messages import Message, TextPart, ToolCall
from agentctx_fast.errors import InvalidArgumentError, InvalidMessageTypeError

__all__ = [
    "LIBRARY",
    "CoreOptions",
    "count_text",
    "count_turns",
    "message_tokens",
    "segment",
    "select",
    "validate",
    "window_reach",
]


def segment(messages: Sequence[object]) -> tuple[list[int], list[int], list[bool]]:
    """Turn starts, ends and inferred completion."""
    views = list(stream(messages))
    starts = turn_starts(views)
    ends = [*starts[1:], len(views)] if starts else []
    completed = []
    for start, end in zip(starts, ends, strict=True):
        turn: Turn = [(i, None, views[i]) for i in range(start, end) if views[i].visible]
        violations = validate_segment([view for _, _, view in turn])
        missing = any(v[0] == "missing_result" for _, _, v in violations)
        completed.append(inferred_completed(turn, missing))
    return starts, ends, completed


def message_tokens(messages: Sequence[object]) -> list[int]:
    """Heuristic tokens of every message."""
    seq = check_sequence(messages)
    counts = []
    for index in range(len(seq)):
        message, view = read(seq, index)
        counts.append(tokens(message, view, f"messages[{index}]", count_text))
    return counts


LIBRARY: tuple[Any, ...] = (
    Message,
    KINDS,
    TextPart,
    ToolCall,
    InvalidArgumentError,
    InvalidMessageTypeError,
    _COMPLETED,
)
"""The classes and values the Rust binding relies on, as the reference imported them (the
backend switch hands them over: `_native.capture_library(*LIBRARY)`), so both cores know the
same ones."""
