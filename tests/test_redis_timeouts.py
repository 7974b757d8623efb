"""The socket timeout of the async Redis store's own client (made from a URL): its port bounds
each call, redis.asyncio keeps no timeout machinery of its own per command."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from agentctx_fast import StoreUnavailableError, UserMessage
from agentctx_fast.stores.redis import AsyncRedisAgentStore
from servers import RedisServer
from store_fixtures import new_conversation_id

redis = pytest.importorskip("redis")


def _paused(url: str, milliseconds: int) -> None:
    """Every client of the server waits ``milliseconds`` before its next command is run."""
    client = redis.Redis.from_url(url)
    try:
        client.client_pause(milliseconds, all=True)
    finally:
        client.close()


def test_a_command_of_the_own_client_starts_no_task(redis_server: RedisServer) -> None:
    async def main() -> list[Any]:
        store = AsyncRedisAgentStore(redis_server.url)
        memory = store.chat_memory(new_conversation_id())
        await memory.message_count()  # connected
        loop = asyncio.get_running_loop()
        started: list[Any] = []

        def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
            started.append(coro)
            return asyncio.Task(coro, loop=loop, **kwargs)

        loop.set_task_factory(factory)
        try:
            await memory.add_message_if_absent(UserMessage("hi", message_id="m1"))
            assert [m.message_id for m in await memory.get_messages()] == ["m1"]
        finally:
            loop.set_task_factory(None)
            await store.aclose()
        return started

    assert asyncio.run(main()) == []


def test_the_url_socket_timeout_bounds_a_call_and_the_store_recovers(
    redis_server: RedisServer,
) -> None:
    async def main() -> None:
        store = AsyncRedisAgentStore(redis_server.url + "?socket_timeout=0.3")
        memory = store.chat_memory(new_conversation_id())
        try:
            await memory.add_message_if_absent(UserMessage("one", message_id="m1"))
            _paused(redis_server.url, 1500)
            start = time.monotonic()
            with pytest.raises(StoreUnavailableError, match=r"no reply within 0\.3 s"):
                await memory.add_message_if_absent(UserMessage("two", message_id="m2"))
            assert time.monotonic() - start < 1.4  # the call gave up before the pause ended
            task = asyncio.current_task()
            assert task is not None and task.cancelling() == 0  # the cancellation was taken back
            await asyncio.sleep(1.5)
            # The timed-out call's connection was closed: its late reply is read by no one.
            assert await memory.message_count() in (1, 2)  # the paused script may have run
            assert await memory.add_message_if_absent(UserMessage("three", message_id="m3"))
            ids = [m.message_id for m in await memory.get_messages()]
            assert ids[0] == "m1" and ids[-1] == "m3"
        finally:
            await store.aclose()

    asyncio.run(main())


def test_a_url_socket_timeout_of_zero_means_no_limit_and_the_store_connects(
    redis_server: RedisServer,
) -> None:
    async def main() -> int:
        store = AsyncRedisAgentStore(redis_server.url + "?socket_timeout=0")
        memory = store.chat_memory(new_conversation_id())
        try:
            await memory.add_message_if_absent(UserMessage("one", message_id="m1"))
            return await memory.message_count()
        finally:
            await store.aclose()

    assert asyncio.run(main()) == 1


def test_a_call_cancelled_by_its_caller_stays_cancelled(redis_server: RedisServer) -> None:
    async def main() -> None:
        # The cancel comes 0.1 s in; the call's limit (2 s) and the pause (2.5 s) are far
        # beyond it, so a loaded machine's slow loop does not let the limit fire first.
        store = AsyncRedisAgentStore(redis_server.url + "?socket_timeout=2")
        memory = store.chat_memory(new_conversation_id())
        try:
            await memory.message_count()
            _paused(redis_server.url, 2500)
            call = asyncio.ensure_future(memory.message_count())
            await asyncio.sleep(0.1)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            await asyncio.sleep(2.6)  # the pause is over
            assert await memory.message_count() == 0
        finally:
            await store.aclose()

    asyncio.run(main())


def test_each_call_in_flight_keeps_its_own_deadline(redis_server: RedisServer) -> None:
    async def call(memory: Any) -> float:
        start = time.monotonic()
        with pytest.raises(StoreUnavailableError, match="no reply within"):
            await memory.message_count()
        return time.monotonic() - start

    async def main() -> list[float]:
        store = AsyncRedisAgentStore(redis_server.url + "?socket_timeout=0.3")
        memory = store.chat_memory(new_conversation_id())
        try:
            await memory.message_count()
            _paused(redis_server.url, 2000)
            first = asyncio.ensure_future(call(memory))
            await asyncio.sleep(0.2)
            second = asyncio.ensure_future(call(memory))
            await asyncio.sleep(0.2)
            third = asyncio.ensure_future(call(memory))  # started after the first timed out
            waited = await asyncio.gather(first, second, third)
            await asyncio.sleep(2.0)
            assert await memory.message_count() == 0
            return waited
        finally:
            await store.aclose()

    waited = asyncio.run(main())
    assert all(0.3 <= w < 1.5 for w in waited), waited  # none cut short, none left waiting


def test_a_store_used_from_one_loop_then_another_keeps_its_timeout(
    redis_server: RedisServer,
) -> None:
    store = AsyncRedisAgentStore(redis_server.url + "?socket_timeout=0.3")
    memory = store.chat_memory(new_conversation_id())

    async def count() -> int:
        return await memory.message_count()

    async def timed_out() -> None:
        _paused(redis_server.url, 1000)
        with pytest.raises(StoreUnavailableError, match="no reply within"):
            await memory.message_count()
        await asyncio.sleep(1.0)
        await store.aclose()

    assert asyncio.run(count()) == 0
    store.client.connection_pool.reset()  # the first loop's connection goes with it
    asyncio.run(timed_out())


def test_a_callers_cancel_at_the_very_deadline_stays_a_cancellation() -> None:
    """The caller's ``cancel()`` lands in the same round of the loop as the port's timer, at
    the deadline the port registered for the call (a server that never answers): the caller's
    cancellation wins, it is never turned into a timeout."""

    async def main() -> list[str]:
        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read(1 << 20)  # accepts, reads, never answers

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        store = AsyncRedisAgentStore(f"redis://127.0.0.1:{port}/0?socket_timeout=0.3")
        memory = store.chat_memory(new_conversation_id())
        loop = asyncio.get_running_loop()
        outcomes = []
        try:
            for _ in range(5):
                call = asyncio.ensure_future(memory.message_count())
                await asyncio.sleep(0.05)
                loop.call_at(store._port._deadlines._calls[call], call.cancel)
                try:
                    await call
                    outcomes.append("returned")
                except asyncio.CancelledError:
                    outcomes.append("cancelled")
                except StoreUnavailableError:
                    outcomes.append("timed out")
        finally:
            await store.aclose()
            server.close()
        return outcomes

    assert asyncio.run(main()) == ["cancelled"] * 5


def test_listing_conversations_keeps_the_time_limit_of_a_call() -> None:
    """`list_conversations` scans with the port's own calls: a server that stops answering
    is a `StoreUnavailableError` after the socket timeout, never a wait without end (the
    store's own async client keeps no socket timeout of its own)."""

    async def main() -> None:
        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read(1 << 20)  # accepts, reads, never answers

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        store = AsyncRedisAgentStore(f"redis://127.0.0.1:{port}/0?socket_timeout=0.3")
        try:
            with pytest.raises(StoreUnavailableError, match=r"no reply within 0\.3 s"):
                # the bound only turns a hang into a failure of this test
                await asyncio.wait_for(store.list_conversations(), 20)
        finally:
            await store.aclose()
            server.close()

    asyncio.run(main())


def test_the_doctor_keeps_the_time_limit_of_a_call() -> None:
    """The doctor's scans for conversations and turn records are the port's calls too."""
    from agentctx_fast.stores.doctor import diagnose

    async def main() -> None:
        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read(1 << 20)  # accepts, reads, never answers

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        store = AsyncRedisAgentStore(f"redis://127.0.0.1:{port}/0?socket_timeout=0.3")
        try:
            with pytest.raises(StoreUnavailableError, match=r"no reply within 0\.3 s"):
                # the bound only turns a hang into a failure of this test
                await asyncio.wait_for(diagnose(store), 20)
        finally:
            await store.aclose()
            server.close()

    asyncio.run(main())
