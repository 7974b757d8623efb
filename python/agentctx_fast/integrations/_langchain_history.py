"""`AgentCtxChatMessageHistory`: LangChain's chat message history on any store."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from agentctx_fast._blocking import run_sync
from agentctx_fast._ids import check_identifier
from agentctx_fast.core.window import WindowOptions
from agentctx_fast.errors import InvalidArgumentError
from agentctx_fast.integrations._langchain_convert import from_langchain, to_langchain
from agentctx_fast.memory import AsyncChatMemory, ChatMemory, awaitable_memory

try:
    from langchain_core.chat_history import BaseChatMessageHistory
    from langchain_core.messages import BaseMessage
except ImportError as error:  # pragma: no cover - the package imports langchain_core first
    from agentctx_fast._extras import missing_dependency

    raise missing_dependency("langchain", error) from error


async def _read(memory: AsyncChatMemory, window: WindowOptions | None) -> list[BaseMessage]:
    if window is None:
        return to_langchain(await memory.get_model_messages())
    return to_langchain((await memory.window(window)).messages)


async def _add(memory: AsyncChatMemory, messages: Sequence[BaseMessage]) -> None:
    await memory.add_messages_if_absent(from_langchain(messages))


class AgentCtxChatMessageHistory(BaseChatMessageHistory):
    """The chat history of conversation ``session_id`` in ``store`` (any store, blocking or
    async), for ``RunnableWithMessageHistory`` and other users of ``BaseChatMessageHistory``.

    Messages are converted with `from_langchain` / `to_langchain`, so provider content blocks
    (thinking, reasoning, hosted-tool blocks, images) come back as they were added.
    ``add_messages`` is one atomic batch write, idempotent by message id (a message whose
    ``id`` is stored already is not added again). ``messages`` are the stored model-visible
    messages, or with ``window`` (a `WindowOptions`) the window of the stored history, read
    from its tail only; ``WindowOptions(current_turn="none")`` treats the last stored turn
    as history, as a read before the next input is added wants.

    A blocking store serves every method (the async ones in a worker thread); an async
    store, whose connections belong to its event loop, serves the async ones
    (``aget_messages``, ``aadd_messages``, ``aclear``) and its sync ones raise
    `InvalidArgumentError`. ``clear`` removes the conversation's messages.

    LangChain deprecates ``BaseChatMessageHistory`` and ``RunnableWithMessageHistory`` (for
    removal in 2.0) in favour of LangGraph's persistence; for agents, `AgentCtxMiddleware`
    and `agentctx_pre_model_hook` are the window on that path.
    """

    def __init__(self, session_id: str, store: Any, *, window: WindowOptions | None = None) -> None:
        check_identifier(session_id, "session_id")
        if window is not None and type(window) is not WindowOptions:
            raise InvalidArgumentError(
                f"window must be a WindowOptions or None, got {type(window).__name__}"
            )
        chat_memory = getattr(store, "chat_memory", None)
        memory = chat_memory(session_id) if callable(chat_memory) else None
        if not isinstance(memory, (ChatMemory, AsyncChatMemory)):
            raise InvalidArgumentError(
                f"store must be an agent store (with chat_memory), got {type(store).__name__}"
            )
        self.session_id = session_id
        self.window = window
        self._memory = memory

    def _blocking(self) -> AsyncChatMemory:
        """The memory's one implementation, for a blocking call."""
        if not isinstance(self._memory, ChatMemory):
            raise InvalidArgumentError(
                "this history is on an async store: use aget_messages, aadd_messages and aclear"
            )
        return awaitable_memory(self._memory)

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The stored messages (or their window) as LangChain messages."""
        return run_sync(_read(self._blocking(), self.window))

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append ``messages`` in one atomic write (those whose id is stored are skipped)."""
        run_sync(_add(self._blocking(), messages))

    def clear(self) -> None:
        """Remove every message of the conversation."""
        run_sync(self._blocking().clear())

    async def aget_messages(self) -> list[BaseMessage]:
        if isinstance(self._memory, AsyncChatMemory):
            return await _read(self._memory, self.window)
        return await asyncio.to_thread(lambda: self.messages)

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        if isinstance(self._memory, AsyncChatMemory):
            await _add(self._memory, messages)
        else:
            await asyncio.to_thread(self.add_messages, messages)

    async def aclear(self) -> None:
        if isinstance(self._memory, AsyncChatMemory):
            await self._memory.clear()
        else:
            await asyncio.to_thread(self.clear)
