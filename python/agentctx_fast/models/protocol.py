"""The chat-model protocol: what the runner and the summary compressors call."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any, Protocol, runtime_checkable

from agentctx_fast.core.messages import AiMessage, Message


@runtime_checkable
class ChatModel(Protocol):
    """Any object with ``chat(messages, tools) -> AiMessage``.

    ``tools`` is the sequence of the agent's tools; summary models are always called with none.
    """

    def chat(self, messages: Sequence[Message], tools: Sequence[Any]) -> AiMessage: ...


@runtime_checkable
class AsyncChatModel(Protocol):
    """Any object with ``async chat(messages, tools) -> AiMessage``.

    A model may also offer ``stream(messages, tools)``: an async iterator of ``str`` text deltas
    whose last item is the finished `AiMessage`; the async runner uses it when present.
    """

    async def chat(self, messages: Sequence[Message], tools: Sequence[Any]) -> AiMessage: ...


class StreamingChatModel(AsyncChatModel, Protocol):
    """An `AsyncChatModel` that also streams: text deltas, then the finished `AiMessage`."""

    def stream(
        self, messages: Sequence[Message], tools: Sequence[Any]
    ) -> AsyncIterator[str | AiMessage]: ...
