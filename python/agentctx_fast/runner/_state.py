"""The state of a turn while a runner drives it, and the checks every runner operation shares."""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar

from agentctx_fast._ids import check_identifier
from agentctx_fast._tasks import Cancelled
from agentctx_fast._units import shared_port
from agentctx_fast.compression.compressors import IncrementalCompressor
from agentctx_fast.compression.coordinator import AsyncCompressionStateStore
from agentctx_fast.core.messages import AiMessage, Message, UserMessage
from agentctx_fast.core.turns import TurnStatus
from agentctx_fast.core.window import Compressor
from agentctx_fast.errors import InvalidArgumentError, InvalidMessageTypeError, TurnStateError
from agentctx_fast.memory import AsyncChatMemory, check_messages
from agentctx_fast.observability import metrics as m
from agentctx_fast.observability.metrics import AgentMetrics
from agentctx_fast.runner._io import AsyncTurnIO, BlockingTurnIO
from agentctx_fast.runner._leases import HeldLease, LeaseKeeper
from agentctx_fast.runner.agent import Agent, AgentTurn
from agentctx_fast.stores.turn_store import (
    OPEN_STATUSES,
    AgentTurnSnapshot,
    AsyncAgentTurnStore,
    Fence,
)

if TYPE_CHECKING:
    from agentctx_fast.observability.otel import OtelTracing

log = logging.getLogger("agentctx_fast.runner")
REFUSED_TEXT = "refused by the user"
MAY_HAVE_RUN_TEXT = "interrupted: the tool may have run; its outcome is unknown"
NOT_STARTED_TEXT = "not run: the turn was interrupted before the tool started"

TurnIO = BlockingTurnIO | AsyncTurnIO
T = TypeVar("T")
Observation = tuple[str, float, Mapping[str, str]]
"""A metric observed: its name, value and labels."""


class LeaseLost(Exception):
    """Another process took this turn's expired lease over: stop writing."""


@dataclass(slots=True)
class TurnRun:
    """The mutable state of a turn while this process drives it."""

    io: TurnIO
    agent: Agent
    conversation_id: str | None
    turn_id: str
    memory: AsyncChatMemory | None
    history: list[Message]
    messages: list[Message]
    snapshot: AgentTurnSnapshot | None = None
    lease: HeldLease | None = None
    steps: int = 0
    decisions: dict[str, bool] = field(default_factory=dict)
    # The lease this run's writes are made under (SPEC §20): set with `fence`.
    fence: Fence | None = None
    # Calls this process recorded as started (`record_started`) but has not invoked yet.
    not_started: set[str] = field(default_factory=set)
    # During a unit of store I/O (`together`): the clock's reading taken before it, and the
    # metrics observed in it, recorded once it is over.
    now: float | None = None
    observed: list[Observation] | None = None


_REMEMBERED_REACHES = 65_536
_CACHED_STATUSES = 65_536


@dataclass(slots=True, eq=False)
class Engine:
    """What every turn function reads besides its turn: the runner's stores, its lease keeper
    and options, and the bounded caches its turns share (a runner has one)."""

    provider: Callable[[str], AsyncChatMemory] | None
    turn_store: AsyncAgentTurnStore
    states: AsyncCompressionStateStore
    keeper: LeaseKeeper
    lease_seconds: float
    clock: Callable[[], float]
    metrics: AgentMetrics | None
    tracing: OtelTracing | None = None
    store_name: str = "none"  # the ``store`` label of `m.STORE_OPERATION_SECONDS`
    # per conversation: messages its next history read needs
    reach: OrderedDict[str, int] = field(default_factory=OrderedDict)
    # per (conversation, turn): a recorded status that never changes again (None: no record)
    status_cache: OrderedDict[tuple[str, str], TurnStatus | None] = field(
        default_factory=OrderedDict
    )
    # per (compressor, conversation): this process's running summary (`_windows`)
    summaries: OrderedDict[tuple[IncrementalCompressor, str], IncrementalCompressor] = field(
        default_factory=OrderedDict
    )
    caches_lock: threading.Lock = field(default_factory=threading.Lock)  # guards the caches


async def together(
    eng: Engine, run: TurnRun, action: str, work: Callable[[], Coroutine[Any, Any, T]]
) -> T:
    """``work()``, whose awaits are calls of this turn's turn store and chat memory only
    (no model, tool, event or task), as one unit of I/O when both are handles of one
    database store that can: on the async SQLite store, one worker-thread hop instead of
    one per call. Each call is still the store's own (its statement, its
    transaction); a unit is not a transaction.

    A unit may run on another thread, outside the caller's context, so no callable of the
    user's runs in it, whatever the store (one behaviour): the clock is read once before
    it (`current_time`), and the metrics it observes (`observe`) are recorded after it, on the
    caller's side, in order. A serializer of the user's makes the store offer no unit
    (`shared_port`). (SQLAlchemy event listeners on the store's engine are the engine's,
    not the runner's: on the async SQLite store they see its statements on the connection's
    thread, as a blocking engine's do, in a copy of the caller's context.) A turn without
    a chat memory (``run_history``) has no store work:
    its ``work()`` runs as it is, with no unit and no clock reading."""
    if run.memory is None:
        return await work()
    port = shared_port(eng.turn_store, run.memory)
    run.now = eng.clock()
    observed: list[Observation] = []
    run.observed = observed
    try:
        if port is None:
            result = await work()
        else:
            result = await port.together(action, work)
    except BaseException:
        _recorded(eng, observed, quiet=True)  # the unit's own failure goes on
        raise
    finally:
        run.now = run.observed = None
    _recorded(eng, observed)
    return result


async def timed(eng: Engine, run: TurnRun, operation: str, call: Awaitable[T]) -> T:
    """``await call``, a store call of ``run``, timed as `m.STORE_OPERATION_SECONDS` when
    a metrics hook is set (inside a unit of store I/O, recorded once it is over)."""
    if eng.metrics is None:
        return await call
    labels = {"operation": operation, "store": eng.store_name}
    started = time.perf_counter()
    try:
        result = await call
    except BaseException:
        try:  # the store's error goes on, whatever the sink does
            observe(eng, run, m.STORE_OPERATION_SECONDS, time.perf_counter() - started, labels)
        except Exception:
            pass
        raise
    observe(eng, run, m.STORE_OPERATION_SECONDS, time.perf_counter() - started, labels)
    return result


def current_time(eng: Engine, run: TurnRun) -> float:
    """The clock's reading: inside a unit of store I/O, the one taken before it."""
    return eng.clock() if run.now is None else run.now


def observe(
    eng: Engine, run: TurnRun, metric: str, value: float, labels: Mapping[str, str]
) -> None:
    """Record a metric of ``run``; inside a unit of store I/O, once the unit is over."""
    if eng.metrics is None:
        return
    if run.observed is not None:
        run.observed.append((metric, value, labels))
    else:
        eng.metrics.record(metric, value, labels)


def _recorded(eng: Engine, observed: list[Observation], *, quiet: bool = False) -> None:
    """The metrics a unit observed, recorded in order; with ``quiet`` (the unit failed),
    a failing metrics sink does not replace the unit's error."""
    if eng.metrics is None:
        return
    for metric, value, labels in observed:
        if not quiet:
            eng.metrics.record(metric, value, labels)
            continue
        try:
            eng.metrics.record(metric, value, labels)
        except Exception:
            pass


def remember_status(
    eng: Engine, conversation_id: str, turn_id: str, status: TurnStatus | None
) -> None:
    """Remember a turn's recorded status once it can no longer change (a final status, or
    no record at all); an open one is asked again next time."""
    if status in OPEN_STATUSES:
        return
    with eng.caches_lock:
        eng.status_cache[(conversation_id, turn_id)] = status
        if len(eng.status_cache) > _CACHED_STATUSES:
            eng.status_cache.popitem(last=False)


def remember_reach(eng: Engine, conversation_id: str, size: int) -> None:
    """Remember that a window over ``conversation_id`` reaches about ``size`` messages
    back: what its last history read kept, or that plus the turn this runner just stored
    (the next turn's history holds it)."""
    with eng.caches_lock:  # the blocking runner serves many threads
        eng.reach[conversation_id] = size
        eng.reach.move_to_end(conversation_id)
        if len(eng.reach) > _REMEMBERED_REACHES:
            eng.reach.popitem(last=False)


async def check_lease(eng: Engine, run: TurnRun, *, ask: bool = False) -> None:
    """`LeaseLost` if another process took this turn's lease over: this runner then
    writes nothing more. The server is asked (a renewal, which also brings a cancel
    requested from another process) when ``ask``, or once a tenth of the lease has gone
    by since the last renewal, so a slow model, tool or compressor is always followed by
    a check."""
    lease = run.lease
    if lease is None:
        return
    if ask or current_time(eng, run) - lease.renewed_at >= eng.lease_seconds / 10:
        await eng.keeper.renew(lease, run.now)  # in a unit: the reading taken before it
    if lease.lost.is_set():
        raise LeaseLost


async def checkpoint(eng: Engine, run: TurnRun) -> None:
    """The lease is still this runner's and the turn was not cancelled (before a model or
    tool call, and before a failure is recorded)."""
    await check_lease(eng, run)
    check_cancel(run)


def check_cancel(run: TurnRun) -> None:
    """`Cancelled` once the turn was cancelled (here, through the store by another
    process as of the last renewal, or by cancelling the task that awaits it)."""
    if run.io.cancelled or (run.lease is not None and run.lease.cancel.is_set()):
        raise Cancelled


def fence(run: TurnRun, owner: str) -> None:
    """From now on ``run`` writes only while ``owner``'s lease on its turn is current: its
    memory's writes and its record's saves are fenced."""
    run.fence = Fence(run.turn_id, owner)
    if run.memory is not None:
        run.memory = run.memory.fenced(run.fence)


def may_have_run(run: TurnRun, call_id: str) -> bool:
    """Whether the call ``call_id``, left without a result, may have run (SPEC §20): its start
    was recorded (or the record predates such records) and this process did not see it stay
    unstarted."""
    if call_id in run.not_started:
        return False
    recorded = () if run.snapshot is None else run.snapshot.started_tool_calls
    return recorded is None or call_id in recorded


def log_context(run: TurnRun, tool_call_id: str | None = None) -> dict[str, str | None]:
    """The ``extra`` of a log record about ``run`` (SPEC §22): its conversation and turn, and
    the tool call when there is one."""
    extra = {"conversation_id": run.conversation_id, "turn_id": run.turn_id}
    if tool_call_id is not None:
        extra["tool_call_id"] = tool_call_id
    return extra


def check_agent(agent: object) -> Agent:
    if not isinstance(agent, Agent):
        raise InvalidArgumentError(f"agent must be an Agent, got {type(agent).__name__}")
    return agent


def check_turn_id(turn_id: object) -> str:
    if not isinstance(turn_id, str) or not turn_id:
        raise InvalidArgumentError(f"turn_id must be a non-empty str, got {turn_id!r}")
    check_identifier(turn_id, "turn_id")  # a store key: no NUL, no lone surrogate
    return turn_id


def check_lease_seconds(lease_seconds: object) -> float:
    if (
        isinstance(lease_seconds, bool)
        or not isinstance(lease_seconds, (int, float))
        or not lease_seconds > 0
    ):
        raise InvalidArgumentError(f"lease_seconds must be > 0, got {lease_seconds!r}")
    return float(lease_seconds)


def user_message(message: object, turn_id: str) -> UserMessage:
    if isinstance(message, str):
        return UserMessage(message, message_id=f"{turn_id}:user", turn_id=turn_id)
    if not isinstance(message, UserMessage):
        raise InvalidMessageTypeError(
            f"a turn starts with a UserMessage or a str, got {type(message).__name__}"
        )
    return message if message.turn_id == turn_id else replace(message, turn_id=turn_id)


def check_history(history: Sequence[Message]) -> list[Message]:
    return check_messages(history, "history")


def counted(compressor: Compressor, metrics: AgentMetrics, labels: Mapping[str, str]) -> Compressor:
    def counted_compressor(messages: list[Message]) -> list[Message]:
        metrics.record(m.COMPRESSOR_CALLS, 1, labels)
        return compressor(messages)  # a failure is counted where the window catches it

    return counted_compressor


class _NoModel:
    def chat(self, messages: Sequence[Message], tools: Sequence[Any]) -> AiMessage:
        raise TurnStateError("a closed turn makes no model calls")


def agent_stub(snapshot: AgentTurnSnapshot) -> Agent:
    """The agent of a turn closed without its definition (cancel, recovery)."""
    return Agent(snapshot.agent_name or "agent", _NoModel())


def is_stub(agent: Agent) -> bool:
    """``agent`` is an `agent_stub`: its run read no window's worth of history."""
    return isinstance(agent.chat_model, _NoModel)


def view(snapshot: AgentTurnSnapshot) -> AgentTurn:
    return AgentTurn(
        snapshot.turn_id,
        snapshot.conversation_id,
        snapshot.status,
        error=snapshot.error,
        pending_approvals=snapshot.pending_approvals,
        step_count=snapshot.step_count,
    )
