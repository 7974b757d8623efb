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
from collections.abc import AsyncIterator, Coroutine, Mapping, Sequence
from typing import Any, Self

from agentctx_fast._tasks import wait_uncut
from agentctx_fast.core.messages import Message, UserMessage
from agentctx_fast.memory import AsyncChatMemoryProvider
from agentctx_fast.runner import _engine
from agentctx_fast.runner._drivers import Runner
from agentctx_fast.runner._io import AsyncTurnIO
from agentctx_fast.runner._state import check_agent, check_history
from agentctx_fast.runner.agent import Agent, AgentTurn
from agentctx_fast.runner.events import StreamEvent, TurnEnded
from agentctx_fast.stores.base import AsyncAgentStore
from agentctx_fast.stores.turn_store import AsyncAgentTurnStore


class AsyncAgentRunner(Runner[AsyncAgentStore, AsyncChatMemoryProvider, AsyncAgentTurnStore]):
    """`AgentRunner` for asyncio programs: the same turns, leases and busy protection (also
    against blocking runners in other processes on the same store), over an async store.

    Async models and tools are awaited; plain ones run in a worker thread, so a slow model or
    tool never blocks the event loop. Cancelling the task that awaits a turn (or consumes
    `stream`) cancels the turn: its open calls are answered, its lease freed.
    """

    blocking = False

    async def aclose(self) -> None:
        """Stop the lease-renewing task (turns still running stop renewing)."""
        self._keeper.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

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
            io, _engine.run(self._engine, io, agent, conversation_id, message, turn_id, metadata)
        )

    async def run_history(
        self, agent: Agent, history: Sequence[Message], message: UserMessage | str
    ) -> AgentTurn:
        """Run one turn over an explicit ``history`` (see `AgentRunner.run_history`)."""
        agent = check_agent(agent)
        copied = check_history(history)
        io = AsyncTurnIO()
        return await _ended(io, _engine.run_history(self._engine, io, agent, copied, message))

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
        return await _ended(
            io, _engine.resume(self._engine, io, agent, conversation_id, turn_id, approvals)
        )

    async def cancel(self, conversation_id: str, turn_id: str) -> AgentTurn:
        """Cancel an open turn (see `AgentRunner.cancel`)."""
        io = AsyncTurnIO()
        return await _ended(io, _engine.cancel(self._engine, io, conversation_id, turn_id))

    async def turn(self, conversation_id: str, turn_id: str) -> AgentTurn:
        """The stored state of a turn (its messages are in chat memory)."""
        return await _engine.turn(self._engine, conversation_id, turn_id)

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
        turn = _engine.run(self._engine, io, agent, conversation_id, message, turn_id, metadata)
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


def _started(io: AsyncTurnIO, turn: Coroutine[Any, Any, AgentTurn]) -> asyncio.Task[AgentTurn]:
    """The turn in a task of its own, so that a cancellation of its caller is handed to it as
    a request (`AsyncTurnIO.interrupt`) and never cuts a store write in the middle.

    The task runs in a copy of the caller's context. It is an `asyncio.Task` made here, not
    one from the loop's task factory: a factory may take no ``context`` (the older ``(loop,
    coro)`` form) or run the task's first step before it is bound (``eager_task_factory``).
    """
    loop = asyncio.get_running_loop()
    task = asyncio.Task(turn, loop=loop, context=contextvars.copy_context())
    io.bind(task)
    return task


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
