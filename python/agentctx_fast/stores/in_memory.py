"""`InMemoryAgentStore` and `AsyncInMemoryAgentStore`: every store facility in process memory,
for tests and single processes."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import replace

from agentctx_fast._ids import check_conversation_id
from agentctx_fast.compression.coordinator import (
    AwaitableCompressionStateStore,
    CompressionState,
    InMemoryCompressionStateStore,
    check_expected_version,
)
from agentctx_fast.core.messages import Message
from agentctx_fast.core.turns import TurnStatus
from agentctx_fast.errors import VersionConflictError
from agentctx_fast.memory import (
    AsyncChatMemory,
    AwaitableChatMemory,
    ChatMemory,
    InMemoryChatMemory,
)
from agentctx_fast.stores._front import AsyncStoreFront, StoreFront
from agentctx_fast.stores.lifecycle import check_delete, check_listing, page_of
from agentctx_fast.stores.turn_store import (
    AwaitableAgentTurnStore,
    Fence,
    InMemoryAgentTurnStore,
    busy_error,
)


class StoreChatMemory(InMemoryChatMemory):
    """A conversation's memory in an `InMemoryAgentStore`: it can fence its writes with the
    store's leases."""

    def __init__(
        self,
        turns: InMemoryAgentTurnStore,
        states: InMemoryCompressionStateStore,
        conversation_id: str,
    ) -> None:
        super().__init__()
        self._turns = turns
        self._states = states
        self.conversation_id = conversation_id

    def clear(self) -> None:
        """The messages and the compression state built from them."""
        with self._lock:
            super()._clear()
            self._states.discard(self.conversation_id)

    def fenced(self, fence: Fence) -> ChatMemory:
        return _FencedChatMemory(self, fence)


class _FencedChatMemory(ChatMemory):
    """A `StoreChatMemory` whose writes hold the turn store's lock and check the lease first
    (the lock order is always turn store, then memory)."""

    def __init__(self, memory: StoreChatMemory, fence: Fence) -> None:
        self._memory = memory
        self._fence = fence
        self.conversation_id = memory.conversation_id

    def add_message_if_absent(self, message: Message) -> bool:
        return self.add_messages_if_absent([message])[0]

    def add_messages_if_absent(self, messages: Sequence[Message]) -> list[bool]:
        """A message found stored as it is counts as appended: a re-sent fenced append finds
        its own (the lease is its own)."""
        with self._memory._turns.fenced(self.conversation_id, self._fence):
            added = self._memory.add_messages_if_absent(messages)
            return [
                appended or self._memory.get_message(message.message_id) == message
                for appended, message in zip(added, messages, strict=True)
            ]

    def update_message(self, message: Message, expected_version: int) -> Message:
        with self._memory._turns.fenced(self.conversation_id, self._fence):
            try:
                return self._memory.update_message(message, expected_version)
            except VersionConflictError:
                # a re-sent update (the lease its own: no other writer) found applied
                updated = replace(message, version=expected_version + 1)
                if self._memory.get_message(message.message_id) == updated:
                    return updated
                raise

    def delete_message(self, message_id: str, expected_version: int) -> None:
        with self._memory._turns.fenced(self.conversation_id, self._fence):
            self._memory.delete_message(message_id, expected_version)

    def get_messages(self, count: int | None = None, *, offset: int = 0) -> list[Message]:
        return self._memory.get_messages(count, offset=offset)

    def get_model_messages(self, count: int | None = None) -> list[Message]:
        return self._memory.get_model_messages(count)

    def get_message(self, message_id: str) -> Message | None:
        return self._memory.get_message(message_id)

    def get_first_messages(self, count: int) -> list[Message]:
        return self._memory.get_first_messages(count)

    def message_count(self) -> int:
        return self._memory.message_count()

    def clear(self) -> None:
        self._memory.clear()

    def fenced(self, fence: Fence) -> ChatMemory:
        return _FencedChatMemory(self._memory, fence)


class StoreCompressionStates(InMemoryCompressionStateStore):
    """The compression states of an in-memory store: its saves can be fenced with the store's
    leases."""

    def __init__(self, turns: InMemoryAgentTurnStore) -> None:
        super().__init__()
        self._turns = turns

    def fenced(self, fence: Fence) -> _FencedCompressionStates:
        """These states with saves accepted only while ``fence`` holds the lease."""
        return _FencedCompressionStates(self, fence)


class _FencedCompressionStates:
    """A `StoreCompressionStates` whose saves hold the turn store's lock and check the lease
    first (the lock order is always turn store, then states)."""

    def __init__(self, states: StoreCompressionStates, fence: Fence) -> None:
        self._states = states
        self._fence = fence

    def load(self, conversation_id: str) -> CompressionState | None:
        return self._states.load(conversation_id)

    def save(self, state: CompressionState, expected_version: int) -> bool:
        check_expected_version(state, expected_version)
        with self._states._turns.fenced(state.conversation_id, self._fence):
            return self._states.save(state, expected_version)


class _InMemoryData:
    """What both in-memory stores hold: the memories, compression states, turns and leases."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._memories: dict[str, StoreChatMemory] = {}
        self._turns = InMemoryAgentTurnStore()
        self._states = StoreCompressionStates(self._turns)

    def _memory(self, conversation_id: str) -> StoreChatMemory:
        """The memory of ``conversation_id`` (the same object on every call)."""
        check_conversation_id(conversation_id)
        with self._lock:
            memory = self._memories.get(conversation_id)
            if memory is None:
                memory = StoreChatMemory(self._turns, self._states, conversation_id)
                self._memories[conversation_id] = memory
            return memory

    async def _delete_conversation(self, conversation_id: str, force: bool) -> bool:
        """Checked and done under the turn store's lock, so no turn starts in between."""
        conversation_id, force = check_delete(conversation_id, force)
        with self._turns.fenced(conversation_id, None):
            lease = self._turns._leases.get(conversation_id)
            if (
                not force
                and lease is not None
                and lease.status is TurnStatus.RUNNING
                and not lease.expired(time.time())
            ):
                raise busy_error(conversation_id, lease)
            found = self._turns.discard(conversation_id)
            found = self._states.discard(conversation_id) or found
            with self._lock:
                memory = self._memories.get(conversation_id)
            if memory is not None:
                with memory._lock:
                    found = bool(memory._messages) or found
                    memory._clear()
            return found

    async def _list_conversations(
        self, prefix: str | None, limit: int, after: str | None
    ) -> list[str]:
        prefix, limit, after = check_listing(prefix, limit, after)
        with self._lock:
            memories = list(self._memories.items())
        ids = {cid for cid, memory in memories if memory.message_count()}
        ids |= self._turns.conversations() | self._states.conversations()
        return page_of(ids, prefix, limit, after)


class InMemoryAgentStore(_InMemoryData, StoreFront):
    """Chat memories, compression states, turns and leases held in this process; thread-safe.

    >>> store = InMemoryAgentStore()
    >>> store.chat_memory("c1") is store.chat_memory("c1")
    True
    """

    def chat_memory(self, conversation_id: str) -> StoreChatMemory:
        """The memory of ``conversation_id`` (the same object on every call)."""
        return self._memory(conversation_id)

    def compression_state_store(self) -> InMemoryCompressionStateStore:
        """The compression states of every conversation in this store."""
        return self._states

    def turn_store(self) -> InMemoryAgentTurnStore:
        """Turn snapshots and conversation leases (protects the threads of this process)."""
        return self._turns

    def close(self) -> None:
        """Nothing to release; present so every store closes the same way."""


class AsyncInMemoryAgentStore(_InMemoryData, AsyncStoreFront):
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
        super().__init__()
        self._awaitable_states = AwaitableCompressionStateStore(self._states)
        self._awaitable_turns = AwaitableAgentTurnStore(self._turns)

    def chat_memory(self, conversation_id: str) -> AsyncChatMemory:
        """The memory of ``conversation_id``."""
        return AwaitableChatMemory(self._memory(conversation_id))

    def compression_state_store(self) -> AwaitableCompressionStateStore:
        """The compression states of every conversation in this store."""
        return self._awaitable_states

    def turn_store(self) -> AwaitableAgentTurnStore:
        """Turn snapshots and conversation leases (protects the tasks of this process)."""
        return self._awaitable_turns

    async def aclose(self) -> None:
        """Nothing to release; present so every async store closes the same way."""
