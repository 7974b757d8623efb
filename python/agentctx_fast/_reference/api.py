"""The reference core's entry points, with the signatures of the Rust module `_native`."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from agentctx_fast._reference.message_tokens import message_tokens_one
from agentctx_fast._reference.protocol import validate, validate_segment
from agentctx_fast._reference.tokens import count_text
from agentctx_fast._reference.turns import (
    check_message,
    check_sequence,
    inferred_completed,
    turn_starts,
)
from agentctx_fast._reference.window import count_turns, select

__all__ = ["count_text", "count_turns", "message_tokens", "segment", "select", "validate"]


def segment(
    messages: Sequence[object],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """Turn starts, ends and inferred completion as arrays."""
    check_sequence(messages)
    checked = [check_message(messages, index) for index in range(len(messages))]
    starts = turn_starts(checked)
    ends = [*starts[1:], len(checked)] if starts else []
    completed = []
    for start, end in zip(starts, ends, strict=True):
        turn = [m for m in checked[start:end] if m.model_visible]
        missing = any(v[0] == "missing_result" for _, v in validate_segment(turn))
        completed.append(inferred_completed(turn, missing))
    return (
        np.array(starts, dtype=np.int64),
        np.array(ends, dtype=np.int64),
        np.array(completed, dtype=np.bool_),
    )


def message_tokens(messages: Sequence[object]) -> npt.NDArray[np.int64]:
    """Heuristic tokens of every message."""
    check_sequence(messages)
    return np.array(
        [message_tokens_one(check_message(messages, i)) for i in range(len(messages))],
        dtype=np.int64,
    )
