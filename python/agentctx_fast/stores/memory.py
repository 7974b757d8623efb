"""`InMemoryAgentStore` and `AsyncInMemoryAgentStore`: every store facility in process memory,
for tests and single processes."""

from __future__ import annotations

import threading

from agentctx_fast.coordinator import InMemoryCompressionStateStore
from agentctx_fast.memory import (
    AsyncChatMemory,
    AsyncChatMemoryProvider,
    AwaitableChatMemory,
    ChatMemoryProvider,
    InMemoryChatMemory,
)
from agentctx_fast.stores._bridge import AwaitableAgentTurnStore, AwaitableCompressionStateStore
from agentctx_fast.stores._common import check_conversation_id
from agentctx_fast.stores.turns import InMemoryAgentTurnStore


class InMemoryAgentStore:
    """Chat memories, compression states, turns and leases held in this process; thread-safe.

    >>> store = InMemoryAgentStore()
    >>> store.chat_memory("c1") is store.chat_memory("c1")
    True
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._memories: dict[str, InMemoryChatMemory] = {}
        self._states = InMemoryCompressionStateStore()
        self._turns = InMemoryAgentTurnStore()

    def chat_memory(self, conversation_id: str) -> InMemoryChatMemory:
        """The memory of ``conversation_id`` (the same object on every call)."""
        check_conversation_id(conversation_id)
        with self._lock:
            memory = self._memories.get(conversation_id)
            if memory is None:
                memory = self._memories[conversation_id] = InMemoryChatMemory()
            return memory

    def chat_memory_provider(self) -> ChatMemoryProvider:
        """A provider that locates each conversation's memory in this store."""
        return self.chat_memory

    def compression_state_store(self) -> InMemoryCompressionStateStore:
        """The compression states of every conversation in this store."""
        return self._states

    def turn_store(self) -> InMemoryAgentTurnStore:
        """Turn snapshots and conversation leases (protects the threads of this process)."""
        return self._turns

    def close(self) -> None:
        """Nothing to release; present so every store closes the same way."""


class AsyncInMemoryAgentStore:
    """`InMemoryAgentStore` for asyncio programs: the same in-process data behind coroutines
    (nothing in it waits, so nothing blocks the event loop).

    >>> import asyncio
    >>> from agentctx_fast import UserMessage
    >>> async def main() -> list[str]:
    ...     memory = AsyncInMemoryAgentStore().chat_memory("c1")
    ...     await memory.add_message_if_absent(UserMessage("hi", message_id="u1"))
    ...     return [m.text for m in await memory.get_messages()]
    >>> asyncio.run(main())
    ['hi']
    """

    def __init__(self) -> None:
        self._store = InMemoryAgentStore()
        self._states = AwaitableCompressionStateStore(self._store.compression_state_store())
        self._turns = AwaitableAgentTurnStore(self._store.turn_store())

    def chat_memory(self, conversation_id: str) -> AsyncChatMemory:
        """The memory of ``conversation_id``."""
        return AwaitableChatMemory(self._store.chat_memory(conversation_id))

    def chat_memory_provider(self) -> AsyncChatMemoryProvider:
        """A provider that locates each conversation's memory in this store."""
        return self.chat_memory

    def compression_state_store(self) -> AwaitableCompressionStateStore:
        """The compression states of every conversation in this store."""
        return self._states

    def turn_store(self) -> AwaitableAgentTurnStore:
        """Turn snapshots and conversation leases (protects the tasks of this process)."""
        return self._turns

    async def aclose(self) -> None:
        """Nothing to release; present so every async store closes the same way."""
