"""The chat-model protocol (SPEC §11): what the runner and the summary compressors call."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from agentctx_fast.messages import AiMessage, Message


@runtime_checkable
class ChatModel(Protocol):
    """Any object with ``chat(messages, tools) -> AiMessage``.

    ``tools`` is the sequence of the agent's tools; summary models are always called with none.
    """

    def chat(self, messages: Sequence[Message], tools: Sequence[Any]) -> AiMessage: ...
