"""The per-message token formula every estimator shares (SPEC §7)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from agentctx_fast._reference.tokens import count_text
from agentctx_fast.messages import (
    KIND_AI,
    KIND_SYSTEM,
    KIND_TOOL,
    KIND_USER,
    AiMessage,
    Message,
    TextPart,
    ToolMessage,
    UserMessage,
)

MESSAGE_OVERHEAD = 4
TOOL_CALL_OVERHEAD = 3
MEDIA_PART_TOKENS = 85


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


def heuristic_tokens(messages: Sequence[Message]) -> int:
    """Heuristic tokens of a list of messages."""
    return sum(message_tokens_one(m) for m in messages)
