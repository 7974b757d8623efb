"""What both runners' constructors share: checking the store or memory provider they get."""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from typing import Any

from agentctx_fast.errors import InvalidArgumentError
from agentctx_fast.metrics import AgentMetrics
from agentctx_fast.runner._leases import LeaseKeeper
from agentctx_fast.runner._state import check_lease_seconds
from agentctx_fast.stores.turns import AsyncAgentTurnStore

Clock = Callable[[], float]
DEFAULT_CLOCK: Clock = time.time


def store_parts(store: Any, chat_memory_provider: Any, *, want_async: bool) -> tuple[Any, Any]:
    """The memory provider and the turn store of a runner's arguments (either may be None).

    A blocking runner takes blocking stores and an async runner async ones: a mix would block
    the event loop or hand a coroutine to blocking code, so it is refused here, before
    anything runs.
    """
    kind = "an async" if want_async else "a blocking"
    if chat_memory_provider is not None and not callable(chat_memory_provider):
        raise InvalidArgumentError("chat_memory_provider must be callable")
    if store is not None and not callable(getattr(store, "chat_memory_provider", None)):
        raise InvalidArgumentError(f"store must be an agent store, got {type(store).__name__}")
    turn_store = None
    factory = getattr(store, "turn_store", None)
    if callable(factory):
        turn_store = factory()
        if inspect.iscoroutinefunction(turn_store.acquire_conversation) != want_async:
            runner = "AsyncAgentRunner" if want_async else "AgentRunner"
            raise InvalidArgumentError(f"{runner} needs {kind} store, got {type(store).__name__}")
    provider = chat_memory_provider or (store.chat_memory_provider() if store is not None else None)
    return provider, turn_store


def store_label(store: object) -> str:
    """The ``store`` label of the runner's store-latency metric: the store's class."""
    return "none" if store is None else type(store).__name__


def new_keeper(
    keeper_type: type[LeaseKeeper],
    turn_store: AsyncAgentTurnStore,
    lease_seconds: object,
    clock: Clock,
) -> tuple[LeaseKeeper, float]:
    seconds = check_lease_seconds(lease_seconds)
    return keeper_type(turn_store, seconds, clock), seconds


__all__ = ["DEFAULT_CLOCK", "AgentMetrics", "Clock", "new_keeper", "store_label", "store_parts"]
