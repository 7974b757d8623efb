"""Runs the blocking store contract suite against the async stores.

An async store lives on an event loop in a background thread; the bridge hands the tests
blocking objects whose every call runs the async store's coroutine on that loop. Concurrent
test threads interleave on the loop as concurrent tasks would. Tests that poke a store's
records directly use its blocking twin on the same database (same tables, same keys).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

from agentctx_fast.core.messages import Message, SystemMessage
from agentctx_fast.core.types import ContextWindow, WindowOptions
from agentctx_fast.memory import AsyncChatMemory, ChatMemory
from agentctx_fast.stores.turn_store import Fence

T = TypeVar("T")


class LoopThread:
    """An event loop running in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=60)

    def stop(self) -> None:
        self.run(_cancel_others())  # a runner's lease-keeping task, say
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


class BridgedChatMemory(ChatMemory):
    """A blocking `ChatMemory` over an `AsyncChatMemory` on a loop thread."""

    def __init__(self, loop: LoopThread, inner: AsyncChatMemory) -> None:
        self._loop = loop
        self._inner = inner

    def add_message_if_absent(self, message: Message) -> bool:
        return self._loop.run(self._inner.add_message_if_absent(message))

    def add_messages_if_absent(self, messages: Sequence[Message]) -> list[bool]:
        return self._loop.run(self._inner.add_messages_if_absent(messages))

    def get_messages(self, count: int | None = None, *, offset: int = 0) -> list[Message]:
        return self._loop.run(self._inner.get_messages(count, offset=offset))

    def get_model_messages(self, count: int | None = None) -> list[Message]:
        return self._loop.run(self._inner.get_model_messages(count))

    def get_message(self, message_id: str) -> Message | None:
        return self._loop.run(self._inner.get_message(message_id))

    def update_message(self, message: Message, expected_version: int) -> Message:
        return self._loop.run(self._inner.update_message(message, expected_version))

    def delete_message(self, message_id: str, expected_version: int) -> None:
        self._loop.run(self._inner.delete_message(message_id, expected_version))

    def window(
        self, options: WindowOptions | None = None, system: SystemMessage | str | None = None
    ) -> ContextWindow:
        return self._loop.run(self._inner.window(options, system))

    def get_first_messages(self, count: int) -> list[Message]:
        return self._loop.run(self._inner.get_first_messages(count))

    def message_count(self) -> int:
        return self._loop.run(self._inner.message_count())

    def clear(self) -> None:
        self._loop.run(self._inner.clear())

    def add_message(self, message: Message) -> None:
        self._loop.run(self._inner.add_message(message))

    def fenced(self, fence: Fence) -> ChatMemory:
        return BridgedChatMemory(self._loop, self._inner.fenced(fence))


class _Bridged:
    """Every coroutine method of ``inner`` as a blocking call."""

    def __init__(self, loop: LoopThread, inner: Any) -> None:
        self._loop = loop
        self._inner = inner

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method: Callable[..., Awaitable[Any]] = getattr(self._inner, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            async def run() -> Any:
                return await method(*args, **kwargs)

            return self._loop.run(run())

        return call


class BridgedStore:
    """An async store (made on the loop by ``factory``) behind the blocking store interface."""

    def __init__(self, factory: Callable[[], Awaitable[Any]], twin: Any | None = None) -> None:
        self._loop = LoopThread()
        self.inner = self._loop.run(_made(factory))
        self._twin = twin

    def chat_memory(self, conversation_id: str) -> BridgedChatMemory:
        return BridgedChatMemory(self._loop, self.inner.chat_memory(conversation_id))

    def chat_memory_provider(self) -> Callable[[str], ChatMemory]:
        return self.chat_memory

    def compression_state_store(self) -> Any:
        return _Bridged(self._loop, self.inner.compression_state_store())

    def turn_store(self) -> Any:
        return _Bridged(self._loop, self.inner.turn_store())

    def delete_conversation(self, conversation_id: str, *, force: bool = False) -> bool:
        result: bool = self._loop.run(self.inner.delete_conversation(conversation_id, force=force))
        return result

    def list_conversations(
        self, prefix: str | None = None, limit: int = 100, after: str | None = None
    ) -> list[str]:
        result: list[str] = self._loop.run(self.inner.list_conversations(prefix, limit, after))
        return result

    def purge(self, older_than: Any, **options: Any) -> Any:
        return self._loop.run(self.inner.purge(older_than, **options))

    def close(self) -> None:
        try:
            self._loop.run(self.inner.aclose())
        finally:
            self._loop.stop()
            if self._twin is not None:
                self._twin.close()

    def __getattr__(self, name: str) -> Any:
        # engine, client, _tables, _key, … of the blocking twin on the same database.
        if self._twin is None:
            raise AttributeError(name)
        return getattr(self._twin, name)


async def _made(factory: Callable[[], Awaitable[Any]]) -> Any:
    return await factory()


class BridgedRunner:
    """`AsyncAgentRunner` over a bridged async store, behind `AgentRunner`'s blocking calls."""

    def __init__(self, store: BridgedStore, **options: Any) -> None:
        from agentctx_fast import AsyncAgentRunner

        self._loop = store._loop

        async def made() -> AsyncAgentRunner:
            return AsyncAgentRunner(store.inner, **options)

        self._runner = self._loop.run(made())

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._runner, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            async def run() -> Any:
                return await method(*args, **kwargs)

            return self._loop.run(run())

        return call

    def close(self) -> None:
        self._loop.run(self._runner.aclose())


def runner_for(store: Any, **options: Any) -> Any:
    """`AgentRunner` on a blocking store, `AsyncAgentRunner` (bridged) on a bridged one."""
    if isinstance(store, BridgedStore):
        return BridgedRunner(store, **options)
    from agentctx_fast import AgentRunner

    return AgentRunner(store, **options)


async def _cancel_others() -> None:
    current = asyncio.current_task()
    others = [task for task in asyncio.all_tasks() if task is not current]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)
