"""The reference core's entry points, with the signatures of the Rust module `_native`."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence

from agentctx_fast._core_types import ContextWindow, ProtocolViolation, WindowLimits, new_window
from agentctx_fast._reference.protocol import validate, validate_segment
from agentctx_fast._reference.reach import window_reach
from agentctx_fast._reference.read import read, tokens
from agentctx_fast._reference.tokens import check_encoding, count_text
from agentctx_fast._reference.turns import (
    Turn,
    check_sequence,
    inferred_completed,
    stream,
    turn_starts,
)
from agentctx_fast._reference.window import count_turns, select
from agentctx_fast.errors import InvalidMessageTypeError
from agentctx_fast.messages import Message

__all__ = [
    "count_text",
    "count_texts",
    "count_turns",
    "message_tokens",
    "segment",
    "select",
    "validate",
    "window",
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


def count_texts(texts: Iterable[object], encoding: str | None = None) -> list[int]:
    """`count_text` of every text."""
    if encoding is not None:
        check_encoding(encoding)
    strings = list(texts)
    for text in strings:
        if not issubclass(type(text), str):
            raise InvalidMessageTypeError(f"count_texts needs str items, got {type(text).__name__}")
    return [count_text(text, encoding) for text in strings]  # type: ignore[arg-type]


def window(
    messages: Sequence[object],
    system: Message | None,
    limits: WindowLimits,
    turn_statuses: Mapping[str, object] | None,
) -> ContextWindow:
    """The whole window for options a core handles alone (no compressor, default estimator);
    ``system`` None takes the history's leading system message."""
    chosen = select(messages, system, system is None, limits, None, turn_statuses)
    return new_window(
        chosen.messages,
        chosen.estimated_tokens,
        chosen.attached_turns,
        chosen.compacted_turns,
        chosen.cut_by,
        [ProtocolViolation(*v) for v in chosen.repairs],  # type: ignore[arg-type]
        (messages, chosen.seen_history_turns, chosen.unread_end, sys.modules[__name__]),
    )
