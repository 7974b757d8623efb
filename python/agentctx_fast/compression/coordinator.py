"""The trigger-based compression coordinator.

It separates *when* to compress (a trigger) from *how* (a compressor), and persists the running
summary per conversation with compare-and-set, so two requests never overwrite each other's
summary and a threshold reached once does not call the summary model on every later request.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol, TypeVar, runtime_checkable

from agentctx_fast import _blocking as _sync
from agentctx_fast._blocking import run_sync
from agentctx_fast._ids import check_conversation_id, check_identifier, check_version
from agentctx_fast._ids import check_expected_version as check_expected_version_number
from agentctx_fast.compression.compressors import IncrementalCompressor
from agentctx_fast.core.messages import Message, ToolMessage
from agentctx_fast.core.tokens import DEFAULT_ESTIMATOR, TokenEstimator
from agentctx_fast.core.turns import segment_turns
from agentctx_fast.core.window import Compressor, run_compressor
from agentctx_fast.errors import (
    CompressionStateConflictError,
    CoveredMessageNotFoundError,
    InvalidArgumentError,
    InvalidMessageTypeError,
)
from agentctx_fast.memory import check_messages

if TYPE_CHECKING:
    from agentctx_fast.stores.turn_types import Fence


_StoreT = TypeVar("_StoreT")


@dataclass(frozen=True, slots=True)
class CompressionState:
    """The persisted compression state of one conversation; ``version`` 0 means never saved."""

    conversation_id: str
    version: int = 0
    compression_version: int = 0
    covered_until_message_id: str | None = None
    summary: tuple[Message, ...] = ()
    covered_tokens: int = 0
    covered_turns: int = 0
    updated_at: datetime | None = None

    def __post_init__(self) -> None:
        # Both ids are keys in the state stores: the identifier rules of messages apply.
        check_conversation_id(self.conversation_id)
        check_version(self.version, "version")
        for name in ("compression_version", "covered_tokens", "covered_turns"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidArgumentError(f"{name} must be an int >= 0, got {value!r}")
        if self.covered_until_message_id is not None and not isinstance(
            self.covered_until_message_id, str
        ):
            raise InvalidArgumentError("covered_until_message_id must be a str or None")
        if self.covered_until_message_id is not None:
            check_identifier(self.covered_until_message_id, "covered_until_message_id")
        if isinstance(self.summary, list):
            object.__setattr__(self, "summary", tuple(self.summary))
        if not isinstance(self.summary, tuple) or not all(
            isinstance(m, Message) for m in self.summary
        ):
            raise InvalidMessageTypeError("summary must be a tuple of messages")
        if self.updated_at is not None and not isinstance(self.updated_at, datetime):
            raise InvalidArgumentError("updated_at must be a datetime or None")


@runtime_checkable
class CompressionStateStore(Protocol):
    """Where coordinators keep compression states: a load and a compare-and-set save."""

    def load(self, conversation_id: str) -> CompressionState | None:
        """The saved state, or None when the conversation has none."""
        ...

    def save(self, state: CompressionState, expected_version: int) -> bool:
        """Store ``state`` as version ``expected_version + 1`` if the stored version is
        ``expected_version`` (0: none stored); False on conflict."""
        ...


@runtime_checkable
class AsyncCompressionStateStore(Protocol):
    """`CompressionStateStore` for asyncio programs: ``load`` and ``save`` awaited."""

    async def load(self, conversation_id: str) -> CompressionState | None:
        """The saved state, or None when the conversation has none."""
        ...

    async def save(self, state: CompressionState, expected_version: int) -> bool:
        """Compare-and-set save, as `CompressionStateStore.save`."""
        ...


class BlockingCompressionStateStore(
    _sync.BlockingAdapter[AsyncCompressionStateStore], CompressionStateStore
):
    """The blocking compression-state store over a store's one implementation."""

    load = _sync.blocking(AsyncCompressionStateStore.load)
    save = _sync.blocking(AsyncCompressionStateStore.save)

    def fenced(self, fence: Fence) -> CompressionStateStore:
        """The implementation's fenced view (see `fenced_state_store`), blocking."""
        return type(self)(fenced_state_store(self._inner, fence))


class AwaitableCompressionStateStore(
    _sync.AwaitableAdapter[CompressionStateStore],
    AsyncCompressionStateStore,
):
    """A blocking compression-state store offered to the one implementation (in-process, or
    one the caller accepts to block on)."""

    load = _sync.awaitable(CompressionStateStore.load)
    save = _sync.awaitable(CompressionStateStore.save)

    def fenced(self, fence: Fence) -> AsyncCompressionStateStore:
        """The wrapped store's fenced view (see `fenced_state_store`)."""
        return AwaitableCompressionStateStore(fenced_state_store(self._inner, fence))


def fenced_state_store(store: _StoreT, fence: Fence) -> _StoreT:
    """``store`` with its saves accepted only while ``fence`` holds the conversation's lease,
    checked in the save's own script or transaction (`LeaseLostError` otherwise, SPEC §20):
    the runner saves a turn's compression state through it. The stores' state stores have a
    ``fenced(fence)``; a store without one cannot check it on its server and is used as is."""
    fenced = getattr(store, "fenced", None)
    return store if fenced is None else fenced(fence)


def awaitable_state_store(
    store: CompressionStateStore | AsyncCompressionStateStore,
) -> AsyncCompressionStateStore:
    """Any state store as the async view the one implementation awaits."""
    if inspect.iscoroutinefunction(getattr(store, "load", None)):
        return store  # type: ignore[return-value]
    return _sync.implementation(store, AwaitableCompressionStateStore)


def check_expected_version(state: object, expected_version: object) -> None:
    """Argument checks shared by every `CompressionStateStore.save`."""
    if not isinstance(state, CompressionState):
        raise InvalidMessageTypeError(
            f"state must be an CompressionState, got {type(state).__name__}"
        )
    check_expected_version_number(expected_version)


class InMemoryCompressionStateStore:
    """The plain in-process state store; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._states: dict[str, CompressionState] = {}

    def load(self, conversation_id: str) -> CompressionState | None:
        check_conversation_id(conversation_id)
        with self._lock:
            return self._states.get(conversation_id)

    def save(self, state: CompressionState, expected_version: int) -> bool:
        check_expected_version(state, expected_version)
        with self._lock:
            stored = self._states.get(state.conversation_id)
            if (0 if stored is None else stored.version) != expected_version:
                return False
            self._states[state.conversation_id] = replace(state, version=expected_version + 1)
            return True

    def discard(self, conversation_id: str) -> bool:
        """Forget the conversation's state; True when there was one."""
        with self._lock:
            return self._states.pop(conversation_id, None) is not None

    def conversations(self) -> set[str]:
        """The conversations with a state."""
        with self._lock:
            return set(self._states)


@dataclass(frozen=True, slots=True)
class CompressionTriggerInput:
    """What a trigger sees to decide whether to compress now."""

    conversation_id: str
    state: CompressionState
    pending_messages: tuple[Message, ...]
    estimated_pending_tokens: int
    pending_turns: int
    largest_tool_result_chars: int
    seconds_since_last_compression: float | None


CompressionTrigger = Callable[[CompressionTriggerInput], bool]
CompressorCall = Callable[[Compressor, list[Message]], Awaitable[list[Message]]]


@dataclass(frozen=True, slots=True)
class CompressionResult:
    """``model_messages`` = the summary messages + the messages it does not cover yet."""

    model_messages: list[Message] = field(default_factory=list)
    state: CompressionState | None = None
    compressed: bool = False


class _NotLoaded:
    """`compress_with` reads the state itself."""


_NOT_LOADED = _NotLoaded()


class CompressionCoordinator:
    """Compresses a conversation's compressible history when a trigger says so.

    ``token_estimator`` is a `TokenEstimator` or a callable ``messages -> int``; the default
    is the heuristic estimator.

    An `IncrementalCompressor` given here is never run itself: each compression runs its
    ``fork()`` restored from the stored state (another process, or another conversation, may
    have moved the summary on), so the instance keeps no summary and counts no model calls
    (read ``result.state.summary``); a subclass that changes how it summarises overrides
    ``fork`` to return its own kind.

    >>> from agentctx_fast import AiMessage, UserMessage
    >>> from agentctx_fast.compression import compressors
    >>> store = InMemoryCompressionStateStore()
    >>> coordinator = CompressionCoordinator(
    ...     store, lambda t: t.pending_turns >= 2, compressors.text_excerpt(200))
    >>> history = [UserMessage("a", message_id="u1"), AiMessage("b", message_id="a1")]
    >>> coordinator.compress("c1", history).compressed
    False
    >>> history += [UserMessage("c", message_id="u2"), AiMessage("d", message_id="a2")]
    >>> result = coordinator.compress("c1", history)
    >>> result.compressed, result.state.version, result.state.covered_until_message_id
    (True, 1, 'a2')
    """

    def __init__(
        self,
        state_store: CompressionStateStore | AsyncCompressionStateStore,
        trigger: CompressionTrigger,
        compressor: Compressor,
        token_estimator: TokenEstimator | Callable[[Sequence[Message]], int] | None = None,
        *,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        for name, value in (("trigger", trigger), ("compressor", compressor)):
            if not callable(value):
                raise InvalidArgumentError(f"{name} must be callable")
        for method in ("load", "save"):
            if not callable(getattr(state_store, method, None)):
                raise InvalidArgumentError(f"state_store must have a {method}() method")
        self._store = state_store
        self._trigger = trigger
        self._compressor = compressor
        self._estimate = _estimate_function(token_estimator)
        self._clock = clock or (lambda: datetime.now(UTC))

    def compress(
        self, conversation_id: str, compressible_history: Sequence[Message]
    ) -> CompressionResult:
        """The model view of ``compressible_history`` (complete, ascending), compressing first
        when the trigger says yes and there are messages the summary does not cover."""
        if inspect.iscoroutinefunction(getattr(self._store, "load", None)):
            raise InvalidArgumentError(
                "this coordinator's state store is async: use `await coordinator.acompress(...)`"
            )
        states = awaitable_state_store(self._store)
        return run_sync(self.compress_with(states, conversation_id, compressible_history))

    async def acompress(
        self, conversation_id: str, compressible_history: Sequence[Message]
    ) -> CompressionResult:
        """`compress` for asyncio programs (an async state store such as an async store's
        ``compression_state_store()``); a blocking compressor runs in a worker thread."""
        return await self.compress_with(
            awaitable_state_store(self._store),
            conversation_id,
            compressible_history,
            call=_in_thread,
        )

    async def compress_with(
        self,
        states: AsyncCompressionStateStore,
        conversation_id: str,
        compressible_history: Sequence[Message],
        *,
        compressor: Compressor | None = None,
        call: CompressorCall | None = None,
        allow_compression: bool = True,
        loaded: CompressionState | _NotLoaded | None = _NOT_LOADED,
    ) -> CompressionResult:
        """`compress` over an async view of a state store (the one implementation).

        ``compressor`` replaces this coordinator's for this call (the runner gives each
        conversation its own incremental compressor); ``call`` runs the compressor (the async
        runner runs a blocking one in a worker thread); ``allow_compression=False`` only reads
        the saved state (after a compare-and-set conflict, the winner's summary is used);
        ``loaded`` is the state (or None) the caller just loaded, saving a second read.
        """
        history = check_messages(compressible_history, "compressible_history")
        if isinstance(loaded, _NotLoaded):  # the caller may have loaded it (the runner does)
            loaded = await states.load(conversation_id)
        state = loaded or CompressionState(conversation_id)
        pending = _pending(history, state)
        if (
            not allow_compression
            or not pending
            or not self._triggered(conversation_id, state, pending)
        ):
            return CompressionResult([*state.summary, *pending], state, False)
        chosen = self._compressor if compressor is None else compressor
        if isinstance(chosen, IncrementalCompressor):
            chosen = resumed(chosen, state)
        inputs = [*state.summary, *pending]
        summary = run_compressor(chosen, inputs) if call is None else await call(chosen, inputs)
        candidate = replace(
            state,
            version=state.version + 1,
            compression_version=state.compression_version + 1,
            covered_until_message_id=pending[-1].message_id,
            summary=tuple(summary),
            covered_tokens=state.covered_tokens + self._estimate(pending),
            covered_turns=state.covered_turns + _count_turns(pending),
            updated_at=self._now(),
        )
        if not await states.save(candidate, state.version):
            raise CompressionStateConflictError(
                f"conversation {conversation_id!r}: the compression state moved past version "
                f"{state.version} while compressing; reload and retry"
            )
        return CompressionResult(list(summary), candidate, True)

    def _now(self) -> datetime:
        now = self._clock()
        if not isinstance(now, datetime):
            raise InvalidArgumentError(f"clock must return a datetime, got {type(now).__name__}")
        return _aware(now)

    def _triggered(
        self, conversation_id: str, state: CompressionState, pending: list[Message]
    ) -> bool:
        now = self._now()  # checked even with no saved time: before any compressor call
        since = (
            None
            if state.updated_at is None
            else max((now - _aware(state.updated_at)).total_seconds(), 0.0)
        )
        trigger_input = CompressionTriggerInput(
            conversation_id=conversation_id,
            state=state,
            pending_messages=tuple(pending),
            estimated_pending_tokens=self._estimate(pending),
            pending_turns=_count_turns(pending),
            largest_tool_result_chars=max(
                (len(m.text) for m in pending if isinstance(m, ToolMessage)), default=0
            ),
            seconds_since_last_compression=since,
        )
        decision = self._trigger(trigger_input)
        if not isinstance(decision, bool):
            raise InvalidArgumentError(
                f"compression trigger must return a bool, got {type(decision).__name__}"
            )
        return decision


def _aware(moment: datetime) -> datetime:
    """``moment`` with a time zone: a naive one (a clock without one, or a state saved with
    one) is taken as UTC, so any two times subtract."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def resumed(
    compressor: IncrementalCompressor, state: CompressionState | None
) -> IncrementalCompressor:
    """``compressor`` to run on ``state``'s summary + pending messages: it continues the saved
    summary, never its own in-process one (another instance, or another conversation, may have
    moved the state on since): a fork restored from ``state``."""
    own = compressor.fork()
    if state is not None and state.summary:
        own.restore(state.summary, state.covered_until_message_id)
    return own


async def _in_thread(compressor: Compressor, inputs: list[Message]) -> list[Message]:
    return await asyncio.to_thread(run_compressor, compressor, inputs)


def _estimate_function(
    estimator: TokenEstimator | Callable[[Sequence[Message]], int] | None,
) -> Callable[[Sequence[Message]], int]:
    if estimator is None:
        return DEFAULT_ESTIMATOR.estimate
    estimate = getattr(estimator, "estimate", None)
    if callable(estimate):
        function: Callable[[Sequence[Message]], int] = estimate
    elif callable(estimator):
        function = estimator
    else:
        raise InvalidArgumentError("token_estimator must be a TokenEstimator or a callable")

    def checked(messages: Sequence[Message]) -> int:
        tokens = function(messages)
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
            raise InvalidArgumentError(f"token_estimator must return an int >= 0, got {tokens!r}")
        return tokens

    return checked


def _pending(history: list[Message], state: CompressionState) -> list[Message]:
    covered = state.covered_until_message_id
    if covered is None:
        return history
    # Scan from the end: the covered message is usually close to it.
    for index in range(len(history) - 1, -1, -1):
        if history[index].message_id == covered:
            return history[index + 1 :]
    raise CoveredMessageNotFoundError(
        f"conversation {state.conversation_id!r}: covered message {covered!r} is not in the "
        f"compressible history ({len(history)} messages); pass the complete history"
    )


def _count_turns(messages: Sequence[Message]) -> int:
    return len(segment_turns(messages))


__all__ = [
    "CompressionCoordinator",
    "CompressionResult",
    "CompressionState",
    "CompressionStateStore",
    "CompressionTrigger",
    "CompressionTriggerInput",
    "InMemoryCompressionStateStore",
]
