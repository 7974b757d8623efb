"""``with`` and ``async with`` on every store and on both runners: the block's end closes them
(`close` / `aclose`), also when the block raises."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentctx_fast import Agent, AgentRunner, AsyncAgentRunner, ScriptedChatModel, UserMessage
from agentctx_fast.core.messages import AiMessage
from store_fixtures import STORE_KINDS, make_async_store, make_store, new_conversation_id, store_url


def _count_closing(
    monkeypatch: pytest.MonkeyPatch, cls: type, name: str, closed: list[object] | None = None
) -> list[object]:
    """The objects whose ``name`` (close or aclose) ran, the method still doing its work (a
    test's Redis Cluster store is a class of its own each time: pass the list on)."""
    closed = [] if closed is None else closed
    original = getattr(cls, name)
    if asyncio.iscoroutinefunction(original):

        async def counted_async(self: Any) -> None:
            closed.append(self)
            await original(self)

        monkeypatch.setattr(cls, name, counted_async)
    else:

        def counted(self: Any) -> None:
            closed.append(self)
            original(self)

        monkeypatch.setattr(cls, name, counted)
    return closed


@pytest.mark.parametrize("kind", STORE_KINDS)
def test_with_closes_a_blocking_store(
    kind: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_store(kind, request)
    closed = _count_closing(monkeypatch, type(store), "close")
    with store as entered:
        assert entered is store
        memory = entered.chat_memory(new_conversation_id())
        assert memory.add_message_if_absent(UserMessage("hi", message_id="u"))
    assert closed == [store]
    again = make_store(kind, request)
    if type(again) is not type(store):
        _count_closing(monkeypatch, type(again), "close", closed)
    with pytest.raises(KeyError), again:  # the block's error goes on; the store is closed
        raise KeyError("in the block")
    assert closed == [store, again]


@pytest.mark.parametrize("kind", STORE_KINDS)
def test_async_with_closes_an_asyncio_store(
    kind: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = store_url(kind, request)

    async def scenario() -> list[object]:
        store = await make_async_store(kind, url)
        closed = _count_closing(monkeypatch, type(store), "aclose")
        async with store as entered:
            assert entered is store
            memory = entered.chat_memory(new_conversation_id())
            assert await memory.add_message_if_absent(UserMessage("hi", message_id="u"))
        assert closed == [store]
        again = await make_async_store(kind, url)
        if type(again) is not type(store):
            _count_closing(monkeypatch, type(again), "aclose", closed)
        with pytest.raises(KeyError):
            async with again:
                raise KeyError("in the block")
        return [store, again] if closed == [store, again] else closed

    assert len(asyncio.run(scenario())) == 2


def test_with_closes_the_blocking_runner(monkeypatch: pytest.MonkeyPatch) -> None:
    closed = _count_closing(monkeypatch, AgentRunner, "close")
    agent = Agent("a", ScriptedChatModel([AiMessage("hello")]))
    with AgentRunner() as runner:
        assert runner.run_history(agent, [], "hi").final_message is not None
    assert closed == [runner]


def test_async_with_closes_the_async_runner(monkeypatch: pytest.MonkeyPatch) -> None:
    closed = _count_closing(monkeypatch, AsyncAgentRunner, "aclose")
    agent = Agent("a", ScriptedChatModel([AiMessage("hello")]))

    async def scenario() -> AsyncAgentRunner:
        async with AsyncAgentRunner() as runner:
            turn = await runner.run_history(agent, [], "hi")
            assert turn.final_message is not None
        return runner

    runner = asyncio.run(scenario())
    assert closed == [runner]
