"""The turn loop's I/O ports: how a model and a tool are called, and where events go.

The loop (`agentctx_fast.runner._engine`) is written once and awaits these. The blocking port
calls the model and tools directly (its coroutines never suspend); the async port awaits async
models and tools, runs plain ones in a worker thread so the event loop never blocks, and streams
the model's text when someone listens.

A cancellation of the caller of an async turn reaches the turn as a request (`interrupt`), not
as an exception thrown wherever the turn happens to wait: an awaited model call or async tool
is cut off, a plain tool finishes and keeps its result, and a store read or write always runs
to its end, so what the store holds is what the turn knows (no reply stored but not recorded,
no lease taken but not held). The turn then stops at its next check and ends cancelled.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from agentctx_fast._tasks import Cancelled, in_thread
from agentctx_fast.core.messages import AiMessage, Message
from agentctx_fast.runner.events import StreamEvent, TextDelta
from agentctx_fast.runner.tools import Tool, ToolOutcome, is_async_callable

T = TypeVar("T")


class BlockingTurnIO:
    """The port of `AgentRunner`."""

    cancelled = False
    span: Any = None  # the turn's span, when the runner traces (`OtelTracing`)

    async def chat(self, model: Any, messages: Sequence[Message], tools: Sequence[Tool]) -> object:
        return model.chat(messages, tools)

    async def invoke(self, tool: Tool, arguments: str) -> ToolOutcome:
        return tool.invoke(arguments)

    async def offload(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)``, which may take long (a compressor's summary model call)."""
        return fn(*args)

    async def emit(self, event: StreamEvent) -> None:
        """Nobody listens to a blocking turn."""


class AsyncTurnIO:
    """The port of `AsyncAgentRunner`; ``sink`` receives the events of a streamed turn."""

    def __init__(self, sink: Callable[[StreamEvent], None] | None = None) -> None:
        self._sink = sink
        self.cancelled = False
        self.span: Any = None  # the turn's span, when the runner traces (`OtelTracing`)
        self._task: asyncio.Task[Any] | None = None  # the task driving the turn
        self._cuttable = False  # it awaits a model call or an async tool
        self._cut = False  # `interrupt` cancelled that await

    def bind(self, task: asyncio.Task[Any]) -> None:
        """``task`` drives the turn (before it first runs)."""
        self._task = task

    def interrupt(self) -> None:
        """The caller was cancelled: cut off the model call or async tool being awaited, if
        any; otherwise the turn stops at its next check. Idempotent."""
        self.cancelled = True
        if self._cuttable and not self._cut and self._task is not None:
            self._cut = True
            self._task.cancel()

    async def _cuttable_call(self, call: Awaitable[T]) -> T:
        """``await call``, which `interrupt` may cut off: then `Cancelled`."""
        if self.cancelled:
            close = getattr(call, "close", None)
            if callable(close):
                close()  # a coroutine never started: no "never awaited" warning
            raise Cancelled
        self._cuttable = True
        try:
            return await call
        except asyncio.CancelledError:
            if not self._cut:
                raise  # not ours: the loop is shutting down, or the model cancelled itself
            raise Cancelled from None
        finally:
            if self._cut and self._task is not None:
                self._task.uncancel()  # our cancellation is spent (even if the call ignored it)
            self._cuttable = False
            self._cut = False

    async def chat(self, model: Any, messages: Sequence[Message], tools: Sequence[Tool]) -> object:
        stream = getattr(model, "stream", None)
        asynchronous = is_async_callable(model.chat)
        if (
            self._sink is not None
            and callable(stream)
            and (asynchronous or inspect.isasyncgenfunction(stream))
        ):  # a blocking model's own ``stream`` (a plain generator, say) is not ours to use
            return await self._cuttable_call(self._streamed(stream, messages, tools))
        if asynchronous:
            reply = await self._cuttable_call(model.chat(messages, tools))
        else:
            reply = await self._in_thread(model.chat, messages, tools)
        if isinstance(reply, AiMessage) and reply.text:
            await self.emit(TextDelta(reply.text))  # a model that does not stream: one delta
        return reply

    async def _streamed(
        self, stream: Callable[..., Any], messages: Sequence[Message], tools: Sequence[Tool]
    ) -> object:
        reply: object = None
        async for item in stream(messages, tools):
            if isinstance(item, str):
                if item:
                    await self.emit(TextDelta(item))
            else:
                reply = item
        return reply

    async def invoke(self, tool: Tool, arguments: str) -> ToolOutcome:
        if tool.is_async:
            return await self._cuttable_call(tool.ainvoke(arguments))
        outcome: ToolOutcome = await self._in_thread(tool.invoke, arguments)
        return outcome

    async def offload(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in a worker thread, so a slow compressor never blocks the loop."""
        return await asyncio.to_thread(fn, *args)

    async def emit(self, event: StreamEvent) -> None:
        if self._sink is not None:
            self._sink(event)

    async def _in_thread(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` in a worker thread, which is never cut off (its side effect happens
        either way): even a cancellation of the turn's own task (the loop shutting down) lets
        it finish and is remembered, so the turn keeps the result and ends (`in_thread`)."""
        future = in_thread(fn, *args)
        while not future.done():
            try:
                await asyncio.shield(future)
            except asyncio.CancelledError:
                self.cancelled = True
        return future.result()
