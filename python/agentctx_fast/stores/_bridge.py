"""Blocking and awaitable views of the turn stores (and, re-exported, of the compression-state
stores, which live beside their protocols in `agentctx_fast.compression.coordinator`).

A database store implements each of them once, as coroutines over its I/O port; its blocking
API is that implementation driven by `run_sync` over a blocking port (`Blocking…`), and the
in-process stores, which never wait, are offered to asyncio code as they are (`Awaitable…`).
Each adapter lists the protocol's methods once (see `agentctx_fast._blocking.blocking`).
"""

from __future__ import annotations

from agentctx_fast._blocking import (
    AwaitableAdapter,
    BlockingAdapter,
    awaitable,
    blocking,
    implementation,
)
from agentctx_fast.compression.coordinator import (
    AwaitableCompressionStateStore,
    BlockingCompressionStateStore,
)
from agentctx_fast.stores.turn_store import AgentTurnStore, AsyncAgentTurnStore

_Async = AsyncAgentTurnStore
_Blocking = AgentTurnStore


class BlockingAgentTurnStore(BlockingAdapter[AsyncAgentTurnStore], AgentTurnStore):
    """The blocking `AgentTurnStore` over a store's one implementation."""

    load_turn = blocking(_Async.load_turn)
    save_turn = blocking(_Async.save_turn)
    open_turn = blocking(_Async.open_turn)
    acquire_conversation = blocking(_Async.acquire_conversation)
    renew_lease = blocking(_Async.renew_lease)
    suspend_conversation = blocking(_Async.suspend_conversation)
    reacquire_conversation = blocking(_Async.reacquire_conversation)
    request_cancel = blocking(_Async.request_cancel)
    release_conversation = blocking(_Async.release_conversation)


class AwaitableAgentTurnStore(AwaitableAdapter[AgentTurnStore], AsyncAgentTurnStore):
    """An `AgentTurnStore` offered to asyncio code (in-process, or any blocking one the
    caller accepts to block on)."""

    load_turn = awaitable(_Blocking.load_turn)
    save_turn = awaitable(_Blocking.save_turn)
    open_turn = awaitable(_Blocking.open_turn)
    acquire_conversation = awaitable(_Blocking.acquire_conversation)
    renew_lease = awaitable(_Blocking.renew_lease)
    suspend_conversation = awaitable(_Blocking.suspend_conversation)
    reacquire_conversation = awaitable(_Blocking.reacquire_conversation)
    request_cancel = awaitable(_Blocking.request_cancel)
    release_conversation = awaitable(_Blocking.release_conversation)


def awaitable_turn_store(store: AgentTurnStore) -> AsyncAgentTurnStore:
    """``store`` for the library's one implementation of the turn loop."""
    return implementation(store, AwaitableAgentTurnStore)


__all__ = [
    "AwaitableAgentTurnStore",
    "AwaitableCompressionStateStore",
    "BlockingAgentTurnStore",
    "BlockingCompressionStateStore",
    "awaitable_turn_store",
]
