"""What every store offers the same way, written once: `AsyncStoreFront` for the asyncio
stores and `StoreFront`, the same methods driven blocking (`agentctx_fast._blocking.driven`), for
the blocking ones. A store supplies its chat memories and the coroutines ``_delete_conversation``
and ``_list_conversations`` (which never suspend on a blocking store's port)."""

from __future__ import annotations

from typing import Protocol, Self

from agentctx_fast._blocking import driven
from agentctx_fast.memory import (
    AsyncChatMemory,
    AsyncChatMemoryProvider,
    ChatMemory,
    ChatMemoryProvider,
)


class _Core(Protocol):
    async def _delete_conversation(self, conversation_id: str, force: bool) -> bool: ...

    async def _list_conversations(
        self, prefix: str | None, limit: int, after: str | None
    ) -> list[str]: ...


class _AsyncMemories(Protocol):
    def chat_memory(self, conversation_id: str) -> AsyncChatMemory: ...


class _Memories(Protocol):
    def chat_memory(self, conversation_id: str) -> ChatMemory: ...


class _Closing(Protocol):
    def close(self) -> None: ...


class _AsyncClosing(Protocol):
    async def aclose(self) -> None: ...


class AsyncStoreFront:
    """The shared methods of the asyncio stores; ``async with store:`` closes it at the end
    (`aclose`)."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self: _AsyncClosing, *exc_info: object) -> None:
        await self.aclose()

    def chat_memory_provider(self: _AsyncMemories) -> AsyncChatMemoryProvider:
        """A provider that locates each conversation's memory in this store."""
        return self.chat_memory

    async def delete_conversation(
        self: _Core, conversation_id: str, *, force: bool = False
    ) -> bool:
        """Remove everything of the conversation (messages, turn records, lease, compression
        state, quarantined records) in one step (a transaction, a script, or under the turn
        store's lock); True when there was anything.

        Raises `AgentConversationBusyError` while a turn is running under a live lease (checked
        in that same step, so no turn starts between the check and the deletes), unless
        ``force``."""
        return await self._delete_conversation(conversation_id, force)

    async def list_conversations(
        self: _Core, prefix: str | None = None, limit: int = 100, after: str | None = None
    ) -> list[str]:
        """Up to ``limit`` ids of conversations holding anything, starting with ``prefix``,
        after ``after``, in code-point order (on Redis a ``SCAN`` of the store's keys per page:
        for tools and jobs)."""
        return await self._list_conversations(prefix, limit, after)


class StoreFront:
    """The shared methods of the blocking stores: `AsyncStoreFront`'s, driven blocking;
    ``with store:`` closes it at the end (`close`)."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self: _Closing, *exc_info: object) -> None:
        self.close()

    def chat_memory_provider(self: _Memories) -> ChatMemoryProvider:
        """A provider that locates each conversation's memory in this store."""
        return self.chat_memory

    delete_conversation = driven(AsyncStoreFront.delete_conversation)
    list_conversations = driven(AsyncStoreFront.list_conversations)
