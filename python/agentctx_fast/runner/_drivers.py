"""What both runners share: their construction (checking the store or memory provider they get,
and making the turn engine's parts), written once; `AgentRunner` and `AsyncAgentRunner` differ
only in how they drive the engine's coroutines."""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from agentctx_fast.compression.coordinator import (
    InMemoryCompressionStateStore,
    awaitable_state_store,
)
from agentctx_fast.errors import InvalidArgumentError
from agentctx_fast.memory import AsyncChatMemory, ChatMemory, awaitable_memory
from agentctx_fast.observability.metrics import AgentMetrics
from agentctx_fast.runner._engine import Engine
from agentctx_fast.runner._leases import LeaseKeeper
from agentctx_fast.runner._state import check_lease_seconds
from agentctx_fast.stores.turn_store import InMemoryAgentTurnStore, awaitable_turn_store

if TYPE_CHECKING:
    from agentctx_fast.observability.otel import OtelTracing

Clock = Callable[[], float]
DEFAULT_CLOCK: Clock = time.time

StoreT = TypeVar("StoreT")
ProviderT = TypeVar("ProviderT")
TurnStoreT = TypeVar("TurnStoreT")


class Runner(Generic[StoreT, ProviderT, TurnStoreT]):
    """A runner's construction; ``blocking`` says which kind of stores it takes."""

    blocking: ClassVar[bool]
    turn_store: TurnStoreT

    def __init__(
        self,
        store: StoreT | None = None,
        chat_memory_provider: ProviderT | None = None,
        *,
        metrics: AgentMetrics | None = None,
        tracing: OtelTracing | None = None,
        lease_seconds: float = 30.0,
        clock: Clock = DEFAULT_CLOCK,
    ) -> None:
        blocking = self.blocking
        provider, turn_store = store_parts(store, chat_memory_provider, want_async=not blocking)
        # the runner's own turn store (blocking or async), and the async view the engine uses
        if blocking:
            public: Any = turn_store or InMemoryAgentTurnStore()
            turns = awaitable_turn_store(public)
        else:
            public = turns = turn_store or awaitable_turn_store(InMemoryAgentTurnStore())
        self.turn_store = public
        seconds = check_lease_seconds(lease_seconds)
        self._keeper = LeaseKeeper(turns, seconds, clock, threaded=blocking)
        states = awaitable_state_store(
            store.compression_state_store()  # type: ignore[attr-defined]
            if store is not None and callable(getattr(store, "compression_state_store", None))
            else InMemoryCompressionStateStore()
        )
        self._engine = Engine(
            None if provider is None else _memories(provider, blocking), turns, states,
            self._keeper, seconds, clock, metrics, tracing, store_label(store),
        )  # fmt: skip


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


def _memories(provider: Any, blocking: bool) -> Callable[[str], AsyncChatMemory]:
    """The engine's memory of a conversation: the provider's, checked to be the runner's
    kind (an async view of a blocking one)."""
    kind, name = (
        (ChatMemory, "a ChatMemory") if blocking else (AsyncChatMemory, "an AsyncChatMemory")
    )

    def locate(conversation_id: str) -> AsyncChatMemory:
        memory = provider(conversation_id)
        if not isinstance(memory, kind):
            raise InvalidArgumentError(
                f"chat_memory_provider returned {type(memory).__name__}, not {name}"
            )
        return awaitable_memory(memory) if blocking else memory  # type: ignore[arg-type,return-value]

    return locate


__all__ = ["DEFAULT_CLOCK", "AgentMetrics", "Clock", "Runner", "store_label", "store_parts"]
