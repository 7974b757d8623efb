"""`InMemoryAgentStore`: every store facility in process memory, for tests and single processes."""

from __future__ import annotations

import threading

from agentctx_fast.coordinator import InMemoryCompressionStateStore
from agentctx_fast.memory import ChatMemoryProvider, InMemoryChatMemory
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
