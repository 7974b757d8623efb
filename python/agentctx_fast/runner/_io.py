"""The turn loop's I/O ports: how a model and a tool are called, and where events go.

The loop (`agentctx_fast.runner._engine`) is written once and awaits these. The blocking port
calls the model and tools directly (its coroutines never suspend); the async port awaits async
models and tools, runs plain ones in a worker thread so the event loop never blocks, streams
the model's text when someone listens, and remembers a cancellation that came while a plain
tool was running (the tool finishes and keeps its result; the turn then ends cancelled).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from agentctx_fast.messages import AiMessage, Message
from agentctx_fast.runner.events import StreamEvent, TextDelta
from agentctx_fast.tools import Tool, ToolOutcome, is_async_callable

T = TypeVar("T")


class BlockingTurnIO:
    """The port of `AgentRunner`."""

    cancelled = False

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

    async def chat(self, model: Any, messages: Sequence[Message], tools: Sequence[Tool]) -> object:
        stream = getattr(model, "stream", None)
        if self._sink is not None and callable(stream):
            reply: object = None
            async for item in stream(messages, tools):
                if isinstance(item, str):
                    if item:
                        await self.emit(TextDelta(item))
                else:
                    reply = item
            return reply
        if is_async_callable(model.chat):
            reply = await model.chat(messages, tools)
        else:
            reply = await self._in_thread(model.chat, messages, tools)
        if isinstance(reply, AiMessage) and reply.text:
            await self.emit(TextDelta(reply.text))  # a model that does not stream: one delta
        return reply

    async def invoke(self, tool: Tool, arguments: str) -> ToolOutcome:
        if tool.is_async:
            return await tool.ainvoke(arguments)
        outcome: ToolOutcome = await self._in_thread(tool.invoke, arguments)
        return outcome

    async def offload(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in a worker thread, so a slow compressor never blocks the loop."""
        return await asyncio.to_thread(fn, *args)

    async def emit(self, event: StreamEvent) -> None:
        if self._sink is not None:
            self._sink(event)

    async def _in_thread(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` in a worker thread. A cancellation meanwhile lets it finish (its side
        effect happens either way) and is remembered, so the turn keeps the result and ends."""
        future = asyncio.get_running_loop().run_in_executor(None, fn, *args)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            self.cancelled = True
            return await future
