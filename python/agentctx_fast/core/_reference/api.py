"""The reference core's entry points, with the signatures of the Rust module `_native`."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from agentctx_fast.core._reference.protocol import validate, validate_segment
from agentctx_fast.core._reference.reach import window_reach
from agentctx_fast.core._reference.read import read, tokens
from agentctx_fast.core._reference.tokens import check_encoding, count_text
from agentctx_fast.core._reference.turns import (
    Turn,
    check_sequence,
    inferred_completed,
    stream,
    turn_starts,
)
from agentctx_fast.core._reference.window import CoreOptions, count_turns, select
from agentctx_fast.errors import InvalidMessageTypeError

__all__ = [
    "CoreOptions",
    "count_text",
    "count_texts",
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


def count_texts(texts: Iterable[object], encoding: str | None = None) -> list[int]:
    """`count_text` of every text."""
    if encoding is not None:
        check_encoding(encoding)
    strings = list(texts)
    for text in strings:
        if not issubclass(type(text), str):
            raise InvalidMessageTypeError(f"count_texts needs str items, got {type(text).__name__}")
    return [count_text(text, encoding) for text in strings]  # type: ignore[arg-type]

