"""What a runner needs of a store, as protocols: `AgentStore` for `AgentRunner` and
`AsyncAgentStore` for `AsyncAgentRunner`. Every store of the library is one or the other, so a
service can type the store it passes around without naming a backend, and a type checker
catches a blocking store given to the async runner (which the runner also refuses at run time).
"""

from __future__ import annotations

from typing import Protocol

from agentctx_fast.compression.coordinator import (
    AsyncCompressionStateStore,
    CompressionStateStore,
)
from agentctx_fast.memory import AsyncChatMemoryProvider, ChatMemoryProvider
from agentctx_fast.stores.turn_store import AgentTurnStore, AsyncAgentTurnStore


class AgentStore(Protocol):
    """A blocking store: chat memories, turn snapshots and leases, compression states."""

    def chat_memory_provider(self) -> ChatMemoryProvider:
        """A provider that locates each conversation's memory in this store."""
        ...

    def turn_store(self) -> AgentTurnStore:
        """Turn snapshots and conversation leases (the runner's busy protection)."""
        ...

    def compression_state_store(self) -> CompressionStateStore:
        """The compression states of every conversation in this store."""
        ...


class AsyncAgentStore(Protocol):
    """An asyncio store: the same parts as `AgentStore`, each awaited."""

    def chat_memory_provider(self) -> AsyncChatMemoryProvider:
        """A provider that locates each conversation's memory in this store."""
        ...

    def turn_store(self) -> AsyncAgentTurnStore:
        """Turn snapshots and conversation leases (the runner's busy protection)."""
        ...

    def compression_state_store(self) -> AsyncCompressionStateStore:
        """The compression states of every conversation in this store."""
        ...
