"""Blocking and awaitable views of the turn stores (and, re-exported, of the compression-state
stores, which live beside their protocols in `agentctx_fast.coordinator`).

A database store implements each of them once, as coroutines over its I/O port; its blocking
API is that implementation driven by `run_sync` over a blocking port (`Blocking…`), and the
in-process stores, which never wait, are offered to asyncio code as they are (`Awaitable…`).
"""

from __future__ import annotations

from agentctx_fast._sync import run_sync
from agentctx_fast.coordinator import (
    AwaitableCompressionStateStore,
    BlockingCompressionStateStore,
)
from agentctx_fast.stores.turns import (
    AgentTurnSnapshot,
    AgentTurnStore,
    AsyncAgentTurnStore,
    ConversationLease,
    Fence,
    LeaseRenewal,
)


class BlockingAgentTurnStore:
    """The blocking `AgentTurnStore` over a store's one implementation."""

    def __init__(self, inner: AsyncAgentTurnStore) -> None:
        self._inner = inner

    def load_turn(self, conversation_id: str, turn_id: str) -> AgentTurnSnapshot | None:
        return run_sync(self._inner.load_turn(conversation_id, turn_id))

    def save_turn(
        self, snapshot: AgentTurnSnapshot, expected_version: int, fence: Fence | None = None
    ) -> bool:
        return run_sync(self._inner.save_turn(snapshot, expected_version, fence))

    def open_turn(self, conversation_id: str) -> ConversationLease | None:
        return run_sync(self._inner.open_turn(conversation_id))

    def acquire_conversation(
        self, conversation_id: str, turn_id: str, owner: str, lease_seconds: float, now: float
    ) -> str | None:
        return run_sync(
            self._inner.acquire_conversation(conversation_id, turn_id, owner, lease_seconds, now)
        )

    def renew_lease(
        self, conversation_id: str, turn_id: str, owner: str, lease_seconds: float, now: float
    ) -> LeaseRenewal:
        return run_sync(
            self._inner.renew_lease(conversation_id, turn_id, owner, lease_seconds, now)
        )

    def suspend_conversation(self, conversation_id: str, turn_id: str, owner: str) -> bool:
        return run_sync(self._inner.suspend_conversation(conversation_id, turn_id, owner))

    def reacquire_conversation(
        self,
        conversation_id: str,
        turn_id: str,
        owner: str,
        lease_seconds: float,
        now: float,
        expected_version: int | None = None,
    ) -> bool:
        return run_sync(
            self._inner.reacquire_conversation(
                conversation_id, turn_id, owner, lease_seconds, now, expected_version
            )
        )

    def request_cancel(self, conversation_id: str, turn_id: str, now: float) -> bool:
        return run_sync(self._inner.request_cancel(conversation_id, turn_id, now))

    def release_conversation(
        self, conversation_id: str, turn_id: str, owner: str | None, now: float
    ) -> bool:
        return run_sync(self._inner.release_conversation(conversation_id, turn_id, owner, now))


class AwaitableAgentTurnStore:
    """An `AgentTurnStore` offered to asyncio code (in-process, or any blocking one the
    caller accepts to block on)."""

    def __init__(self, inner: AgentTurnStore) -> None:
        self._inner = inner

    async def load_turn(self, conversation_id: str, turn_id: str) -> AgentTurnSnapshot | None:
        return self._inner.load_turn(conversation_id, turn_id)

    async def save_turn(
        self, snapshot: AgentTurnSnapshot, expected_version: int, fence: Fence | None = None
    ) -> bool:
        return self._inner.save_turn(snapshot, expected_version, fence)

    async def open_turn(self, conversation_id: str) -> ConversationLease | None:
        return self._inner.open_turn(conversation_id)

    async def acquire_conversation(
        self, conversation_id: str, turn_id: str, owner: str, lease_seconds: float, now: float
    ) -> str | None:
        return self._inner.acquire_conversation(conversation_id, turn_id, owner, lease_seconds, now)

    async def renew_lease(
        self, conversation_id: str, turn_id: str, owner: str, lease_seconds: float, now: float
    ) -> LeaseRenewal:
        return self._inner.renew_lease(conversation_id, turn_id, owner, lease_seconds, now)

    async def suspend_conversation(self, conversation_id: str, turn_id: str, owner: str) -> bool:
        return self._inner.suspend_conversation(conversation_id, turn_id, owner)

    async def reacquire_conversation(
        self,
        conversation_id: str,
        turn_id: str,
        owner: str,
        lease_seconds: float,
        now: float,
        expected_version: int | None = None,
    ) -> bool:
        return self._inner.reacquire_conversation(
            conversation_id, turn_id, owner, lease_seconds, now, expected_version
        )

    async def request_cancel(self, conversation_id: str, turn_id: str, now: float) -> bool:
        return self._inner.request_cancel(conversation_id, turn_id, now)

    async def release_conversation(
        self, conversation_id: str, turn_id: str, owner: str | None, now: float
    ) -> bool:
        return self._inner.release_conversation(conversation_id, turn_id, owner, now)


def awaitable_turn_store(store: AgentTurnStore) -> AsyncAgentTurnStore:
    """``store`` for the library's one implementation of the turn loop."""
    if isinstance(store, BlockingAgentTurnStore):
        return store._inner
    return AwaitableAgentTurnStore(store)


__all__ = [
    "AwaitableAgentTurnStore",
    "AwaitableCompressionStateStore",
    "BlockingAgentTurnStore",
    "BlockingCompressionStateStore",
    "awaitable_turn_store",
]
