"""The per-message token formula every estimator shares (SPEC §7)."""

from __future__ import annotations

from collections.abc import Callable

from agentctx_fast.core._reference.read import count_message, kind_of
from agentctx_fast.core._reference.tokens import count_text
from agentctx_fast.core.messages import Message


def message_tokens_one(message: Message, count: Callable[[str], int] = count_text) -> int:
    """Tokens of one message: overhead, texts, tool-call names and arguments, read from its
    properties as both cores read them."""
    return count_message(message, kind_of(message, "message"), "message", count)
