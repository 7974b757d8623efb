"""Bounded waits on Redis (SPEC §20): a store made from a URL waits for a pooled connection
(bounded by its timeout) when more calls are in flight than it has connections."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest
import redis.asyncio

from agentctx_fast import (
    AiMessage,
    AsyncAgentRunner,
    AsyncRedisAgentStore,
    Message,
    RedisAgentStore,
    StoreUnavailableError,
    ToolCall,
    ToolMessage,
    TurnStatus,
    UserMessage,
    validate_tool_protocol,
)
from agentctx_fast.runner import Agent
from agentctx_fast.runner.tools import Tool
from runner_helpers import ids
from store_fixtures import new_conversation_id

CONVERSATIONS = 1_000
CONNECTIONS = 8


class LookupModel:
    """Calls ``lookup`` once per turn, then answers with its result."""

    async def chat(self, messages: Sequence[Message], tools: Sequence[Any]) -> AiMessage:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            return AiMessage(f"found: {last.text}")
        assert isinstance(last, UserMessage)
        return AiMessage(None, (ToolCall(f"call-{last.message_id}", "lookup", "{}"),))


async def lookup() -> str:
    await asyncio.sleep(0)  # let the other turns in
    return "shipped"


def test_a_url_made_async_store_waits_for_a_pooled_connection(
    request: pytest.FixtureRequest,
) -> None:
    url = f"{request.getfixturevalue('redis_server').url}?max_connections={CONNECTIONS}"
    conversations = [new_conversation_id() for _ in range(CONVERSATIONS)]

    async def main() -> tuple[list[Any], list[list[Message]], int]:
        store = AsyncRedisAgentStore(url)
        runner = AsyncAgentRunner(store)
        agent = Agent("support", LookupModel(), tools=[Tool("lookup", lookup)])
        try:
            turns = await asyncio.gather(
                *(runner.run(agent, cid, "where is my order?") for cid in conversations),
                return_exceptions=True,
            )
            histories = [await store.chat_memory(cid).get_messages() for cid in conversations]
            return turns, histories, store.client.connection_pool.max_connections
        finally:
            await runner.aclose()
            await store.aclose()

    turns, histories, connections = asyncio.run(main())
    assert connections == CONNECTIONS  # the URL's pool size is kept
    failed = [turn for turn in turns if isinstance(turn, BaseException)]
    assert failed == [], f"{len(failed)} turns failed, first: {failed[:1]!r}"
    assert all(turn.status is TurnStatus.COMPLETED for turn in turns)
    for turn, history in zip(turns, histories, strict=True):
        assert ids(history) == ids(turn.messages)
        assert len(history) == 4  # question, call, result, answer
        assert validate_tool_protocol(history) == []


def test_a_url_made_blocking_store_waits_for_a_pooled_connection(
    request: pytest.FixtureRequest,
) -> None:
    """More threads than connections: each waits for one instead of failing."""
    threads = 4
    store = RedisAgentStore(f"{request.getfixturevalue('redis_server').url}?max_connections=1")
    start = threading.Barrier(threads)
    errors: list[BaseException] = []
    cid = new_conversation_id()

    def append(i: int) -> None:
        start.wait(10)
        try:
            for j in range(50):
                store.chat_memory(cid).add_message(UserMessage("x", message_id=f"m{i}-{j}"))
        except BaseException as error:  # reported below
            errors.append(error)

    workers = [threading.Thread(target=append, args=(i,)) for i in range(threads)]
    try:
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(60)
        assert errors == []
        assert store.chat_memory(cid).message_count() == threads * 50
    finally:
        store.close()


def test_a_call_waits_for_the_busy_connection_then_for_no_longer_than_the_timeout(
    request: pytest.FixtureRequest,
) -> None:
    """One connection, taken by a blocking read: the next call waits for it and goes through
    once it is freed; with a short pool timeout and nothing freed, it fails after that."""
    server_url = str(request.getfixturevalue("redis_server").url)
    cid = new_conversation_id()
    wake = f"wake-{cid}"

    async def hold_then(
        url: str, call: Callable[[Any], Awaitable[Any]], *, refused: bool = False
    ) -> tuple[Any, Any]:
        """``call(store)`` while a blocking read holds the store's one connection (taken in
        the read's first step), which a push from another client frees once ``call`` waits
        (or, when it is to be ``refused``, once it gave up)."""
        store = AsyncRedisAgentStore(url)
        waker = redis.asyncio.Redis.from_url(server_url)
        try:
            held = asyncio.ensure_future(store._port.command("holding", "blpop", wake, 0))
            await asyncio.sleep(0)
            waiting = asyncio.ensure_future(call(store))
            await asyncio.sleep(0)
            assert not waiting.done()
            outcome: Any = None
            if refused:  # nothing frees the connection until the call gave up
                with pytest.raises(StoreUnavailableError) as caught:
                    await waiting
                outcome = caught.value
            await waker.rpush(wake, "1")
            return await held, outcome or await waiting
        finally:
            await waker.aclose()
            await store.aclose()

    def add(store: Any) -> Awaitable[Any]:
        return store.chat_memory(cid).add_message_if_absent(UserMessage("x", message_id="m1"))

    freed, added = asyncio.run(hold_then(f"{server_url}?max_connections=1", add))
    assert freed is not None and added is True
    short = f"{server_url}?max_connections=1&timeout=0.3"
    freed, error = asyncio.run(hold_then(short, add, refused=True))
    assert freed is not None
    assert isinstance(error, StoreUnavailableError)
    assert "no free connection within 0.3 s (1 in use)" in str(error)
