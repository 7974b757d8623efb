"""The reference core's entry points, with the signatures of the Rust module `_native`."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from agentctx_fast._reference.protocol import validate, validate_segment
from agentctx_fast._reference.tokens import count_text
from agentctx_fast._reference.turns import check_message, inferred_completed, turn_starts
from agentctx_fast._reference.window import count_turns, select
from agentctx_fast.messages import (
    KIND_AI,
    KIND_SYSTEM,
    KIND_TOOL,
    KIND_USER,
    AiMessage,
    Message,
    ToolMessage,
    UserMessage,
    TextPart,
)

__all__ = ["count_text", "count_turns", "message_tokens", "segment", "select", "validate"]

MESSAGE_OVERHEAD = 4
TOOL_CALL_OVERHEAD = 3
MEDIA_PART_TOKENS = 85


def segment(
    messages: Sequence[object],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """Turn starts, ends and inferred completion as arrays."""
    checked = [check_message(messages, index) for index in range(len(messages))]
    starts = turn_starts(checked)
    ends = [*starts[1:], len(checked)]
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


def message_tokens_one(message: Message, count: Callable[[str], int] = count_text) -> int:
    """Heuristic tokens of one message: overhead, texts, tool-call names and arguments."""
    kind = message._kind
    if kind == KIND_USER:
        assert isinstance(message, UserMessage)
        if isinstance(message.content, str):
            return MESSAGE_OVERHEAD + count(message.content)
        return MESSAGE_OVERHEAD + sum(
            count(part.text) if isinstance(part, TextPart) else MEDIA_PART_TOKENS
            for part in message.content
        )
    if kind == KIND_AI:
        assert isinstance(message, AiMessage)
        tokens = MESSAGE_OVERHEAD + count(message.text or "")
        for call in message.tool_calls:
            tokens += TOOL_CALL_OVERHEAD + count(call.name) + count(call.arguments)
        return tokens
    if kind == KIND_TOOL:
        assert isinstance(message, ToolMessage)
        return MESSAGE_OVERHEAD + count(message.text)
    if kind == KIND_SYSTEM:
        return MESSAGE_OVERHEAD + count(message.text)  # type: ignore[attr-defined]
    return 0  # UI messages are never sent


def message_tokens(messages: Sequence[object]) -> npt.NDArray[np.int64]:
    """Heuristic tokens of every message."""
    return np.array(
        [message_tokens_one(check_message(messages, i)) for i in range(len(messages))],
        dtype=np.int64,
    )
