"""`AsyncAgentRunner`: the asyncio driver of the turn loop, with streaming.

>>> import asyncio
>>> from agentctx_fast import Agent, AiMessage, AsyncInMemoryAgentStore, AsyncScriptedChatModel
>>> agent = Agent("support", AsyncScriptedChatModel([AiMessage("Hello there!")]))
>>> async def main() -> list[str]:
...     runner = AsyncAgentRunner(AsyncInMemoryAgentStore())
...     return [type(e).__name__ async for e in runner.stream(agent, "conversation-1", "hi")]
>>> asyncio.run(main())
['TextDelta', 'TextDelta', 'TurnEnded']
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Generator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from agentctx_fast._tasks import wait_uncut
from agentctx_fast.agent import Agent, AgentTurn
from agentctx_fast.coordinator import InMemoryCompressionStateStore, awaitable_state_store
from agentctx_fast.errors import InvalidArgumentError
from agentctx_fast.memory import AsyncChatMemory, AsyncChatMemoryProvider
from agentctx_fast.messages import Message, UserMessage
from agentctx_fast.metrics import AgentMetrics
from agentctx_fast.runner._drivers import (
    DEFAULT_CLOCK,
    Clock,
    new_keeper,
    store_label,
    store_parts,
)
from agentctx_fast.runner._engine import TurnEngine
from agentctx_fast.runner._io import AsyncTurnIO
from agentctx_fast.runner._leases import TaskLeaseKeeper
from agentctx_fast.runner._state import check_agent, check_history
from agentctx_fast.runner.events import StreamEvent, TurnEnded
from agentctx_fast.stores._bridge import AwaitableAgentTurnStore
from agentctx_fast.stores.base import AsyncAgentStore
from agentctx_fast.stores.turns import AsyncAgentTurnStore, InMemoryAgentTurnStore

if TYPE_CHECKING:
    from agentctx_fast.otel import OtelTracing

try:  # asyncio's own (private) switch of the current task, which an eager task needs
    from asyncio.tasks import _enter_task, _leave_task
except ImportError:  # pragma: no cover - a Python without them: the turn's task starts plainly
    _EMULABLE = False
else:
    _EMULABLE = True

# How `_started` starts the turn's task: "native" (Python 3.12's eager start), "emulated"
# (its first step run in `_started`, as that task) or "plain" (it first runs at the event
# loop's next round, as any new task).
_START = "native" if sys.version_info >= (3, 12) else "emulated" if _EMULABLE else "plain"


class AsyncAgentRunner:
    """`AgentRunner` for asyncio programs: the same turns, leases and busy protection (also
    against blocking runners in other processes on the same store), over an async store.

    Async models and tools are awaited; plain ones run in a worker thread, so a slow model or
    tool never blocks the event loop. Cancelling the task that awaits a turn (or consumes
    `stream`) cancels the turn: its open calls are answered, its lease freed.
    """

    def __init__(
        self,
        store: AsyncAgentStore | None = None,
        chat_memory_provider: AsyncChatMemoryProvider | None = None,
        *,
        metrics: AgentMetrics | None = None,
        tracing: OtelTracing | None = None,
        lease_seconds: float = 30.0,
        clock: Clock = DEFAULT_CLOCK,
    ) -> None:
        provider, turn_store = store_parts(store, chat_memory_provider, want_async=True)
        self.turn_store: AsyncAgentTurnStore = turn_store or AwaitableAgentTurnStore(
            InMemoryAgentTurnStore()
        )
        self._keeper, seconds = new_keeper(TaskLeaseKeeper, self.turn_store, lease_seconds, clock)
        memories = None if provider is None else _memories(provider)
        states = awaitable_state_store(
            store.compression_state_store()
            if store is not None and callable(getattr(store, "compression_state_store", None))
            else InMemoryCompressionStateStore()
        )
        self._engine = TurnEngine(
            memories, self.turn_store, states, self._keeper, seconds, clock, metrics,
            tracing, store_label(store),
        )  # fmt: skip

    async def aclose(self) -> None:
        """Stop the lease-renewing task (turns still running stop renewing)."""
        self._keeper.close()

    async def run(
        self,
        agent: Agent,
        conversation_id: str,
        message: UserMessage | str,
        *,
        turn_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> AgentTurn:
        """Run one turn on ``conversation_id``'s memory (see `AgentRunner.run`)."""
        agent = check_agent(agent)
        io = AsyncTurnIO()
        return await _ended(
            io, self._engine.run(io, agent, conversation_id, message, turn_id, metadata)
        )

    async def run_history(
        self, agent: Agent, history: Sequence[Message], message: UserMessage | str
    ) -> AgentTurn:
        """Run one turn over an explicit ``history`` (see `AgentRunner.run_history`)."""
        agent = check_agent(agent)
        copied = check_history(history)
        io = AsyncTurnIO()
        return await _ended(io, self._engine.run_history(io, agent, copied, message))

    async def resume(
        self,
        agent: Agent,
        conversation_id: str,
        turn_id: str,
        approvals: Mapping[str, bool] | None = None,
    ) -> AgentTurn:
        """Record the user's decisions on a suspended turn and continue it."""
        agent = check_agent(agent)
        io = AsyncTurnIO()
        return await _ended(io, self._engine.resume(io, agent, conversation_id, turn_id, approvals))

    async def cancel(self, conversation_id: str, turn_id: str) -> AgentTurn:
        """Cancel an open turn (see `AgentRunner.cancel`)."""
        io = AsyncTurnIO()
        return await _ended(io, self._engine.cancel(io, conversation_id, turn_id))

    async def turn(self, conversation_id: str, turn_id: str) -> AgentTurn:
        """The stored state of a turn (its messages are in chat memory)."""
        return await self._engine.turn(conversation_id, turn_id)

    async def stream(
        self,
        agent: Agent,
        conversation_id: str,
        message: UserMessage | str,
        *,
        turn_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> AsyncIterator[StreamEvent]:
        """Run one turn and yield its events as they happen: `TextDelta` while the model
        streams, `ToolCallEvent`, `ToolResultEvent`, `ApprovalRequired`, and last `TurnEnded`.

        Stopping early (cancelling the consuming task, or closing the iterator) cancels the
        turn: an awaited model call or async tool is cancelled, a plain tool already running
        finishes and keeps its result, and the turn ends `CANCELLED` with its lease freed.
        """
        agent = check_agent(agent)
        queue: asyncio.Queue[StreamEvent | None] = asyncio.Queue()
        io = AsyncTurnIO(queue.put_nowait)
        turn = self._engine.run(io, agent, conversation_id, message, turn_id, metadata)
        task = _started(io, turn)
        task.add_done_callback(lambda _: queue.put_nowait(None))
        try:
            while (event := await queue.get()) is not None:
                yield event
            yield TurnEnded(await _ended(io, task))
        finally:
            if not task.done():
                io.interrupt()
                cancelled = await wait_uncut(task)  # the turn closes itself before we go on
                if not task.cancelled():
                    task.exception()  # the consumer left: its failure is not reported
                if cancelled:
                    raise asyncio.CancelledError


def _started(io: AsyncTurnIO, turn: Coroutine[Any, Any, AgentTurn]) -> asyncio.Future[AgentTurn]:
    """The turn in a task of its own, so that a cancellation of its caller is handed to it as
    a request (`AsyncTurnIO.interrupt`) and never cuts a store write in the middle.

    The task starts eagerly, as Python 3.12's eager tasks do: its first step runs at once, as
    that task (``asyncio.current_task()``, a timeout or a cancel scope entered meanwhile are
    its own) and in its copy of the caller's context. A turn that ends in that step (one whose
    store, model and tools never wait, such as the in-memory store with async callables) is
    answered at once: its caller takes no round of the event loop to get it.

    The task is an `asyncio.Task` made here, never one from the loop's task factory: a factory
    may take no ``context`` (the older ``(loop, coro)`` form) or run the task's first step
    itself (``asyncio.eager_task_factory``), which is ours to run.
    """
    loop = asyncio.get_running_loop()
    context = contextvars.copy_context()
    if _START == "native" and sys.version_info >= (3, 12):
        # Nothing can interrupt the turn while its first step runs in `__init__` (its caller
        # is not running), so the task is bound after it.
        task: asyncio.Task[AgentTurn] = asyncio.Task.__new__(asyncio.Task)
        try:
            asyncio.Task.__init__(task, turn, loop=loop, context=context, eager_start=True)
        except BaseException:  # KeyboardInterrupt, SystemExit: the task holds it too
            if task.done() and not task.cancelled():
                task.exception()  # it goes on through the caller: the task need not report it
            raise
    elif _START == "emulated":
        return _emulated(loop, context, io, turn)
    else:
        task = asyncio.Task(turn, loop=loop, context=context)
    io.bind(task)
    return task


def _emulated(
    loop: asyncio.AbstractEventLoop,
    context: contextvars.Context,
    io: AsyncTurnIO,
    turn: Coroutine[Any, Any, AgentTurn],
) -> asyncio.Future[AgentTurn]:
    """`_started` before Python 3.12: the task's first step run here, as that task."""
    carried = _Carried(turn)
    steps = carried.run()
    steps.send(None)  # to its first line: see `_Carried.__await__`
    task = asyncio.Task(steps, loop=loop, context=context)
    io.bind(task)
    caller = asyncio.current_task(loop)
    if caller is not None:
        _leave_task(loop, caller)
    _enter_task(loop, task)
    try:
        carried.waiting = context.run(turn.send, None)
    except BaseException as outcome:  # it ended without waiting
        carried.ended = True  # the task ends at its first step, with nothing to do
        if not isinstance(outcome, (Exception, asyncio.CancelledError)):
            raise  # KeyboardInterrupt, SystemExit: on through the caller, as from any step
        ended: asyncio.Future[AgentTurn] = loop.create_future()
        if isinstance(outcome, StopIteration):
            ended.set_result(outcome.value)
        elif isinstance(outcome, asyncio.CancelledError):
            ended.cancel()
        else:
            ended.set_exception(outcome)
        return ended
    finally:
        _leave_task(loop, task)
        if caller is not None:
            _enter_task(loop, caller)
    return cast("asyncio.Task[AgentTurn]", task)  # its None is for a turn already answered


class _Carried:
    """A turn whose first step `_started` runs, carried on by its task from where it waits."""

    __slots__ = ("_turn", "ended", "waiting")

    def __init__(self, turn: Coroutine[Any, Any, AgentTurn]) -> None:
        self._turn = turn
        self.waiting: object = None  # what the turn yielded (waits for) after its first step
        self.ended = False  # the first step ended it: the task has nothing left to do

    async def run(self) -> AgentTurn | None:
        return await self

    def __await__(self) -> Generator[Any, None, AgentTurn | None]:
        turn = self._turn
        thrown: BaseException | None = None
        try:
            # `_started` runs us to here before the task gets us, so that a cancellation of
            # the task before it first runs reaches the turn (which holds its lease by then)
            # instead of ending an unstarted coroutine.
            yield
        except GeneratorExit:
            if not self.ended:
                turn.close()
            raise
        except BaseException as error:
            if self.ended:
                raise
            thrown = error
            # What the turn waits for was yielded to `_started`, never taken by the task: clear
            # the flag a task clears when it takes a future, or the turn could not await that
            # future again once the error is in (asyncio: "await wasn't used with future").
            if getattr(self.waiting, "_asyncio_future_blocking", False):
                setattr(self.waiting, "_asyncio_future_blocking", False)  # noqa: B010
        if self.ended:
            return None
        waiting = self.waiting
        while True:
            if thrown is not None:  # thrown in by the task (a cancellation): passed on
                try:
                    waiting = turn.throw(thrown)
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]
                thrown = None
            try:
                yield waiting  # the task waits for it as it would have for the turn
            except GeneratorExit:
                turn.close()
                raise
            except BaseException as error:
                thrown = error
                continue
            return (yield from turn.__await__())


async def _ended(
    io: AsyncTurnIO, turn: Coroutine[Any, Any, AgentTurn] | asyncio.Future[AgentTurn]
) -> AgentTurn:
    """The turn's result. Cancelling the caller meanwhile (once or more) interrupts the turn,
    waits for it to close itself (its calls answered, its lease freed) and then goes on to
    the caller as `asyncio.CancelledError`."""
    task = turn if isinstance(turn, asyncio.Future) else _started(io, turn)
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.done():
                raise
            io.interrupt()
    result = task.result()
    if io.cancelled:
        raise asyncio.CancelledError
    return result


def _memories(provider: AsyncChatMemoryProvider) -> Callable[[str], AsyncChatMemory]:
    def locate(conversation_id: str) -> AsyncChatMemory:
        memory = provider(conversation_id)
        if not isinstance(memory, AsyncChatMemory):
            raise InvalidArgumentError(
                f"chat_memory_provider returned {type(memory).__name__}, not an AsyncChatMemory"
            )
        return memory

    return locate
