"""Nothing a model sends crashes a turn (SPEC §20): tool-call arguments nested thousands deep
(past the JSON parser's recursion limit) become an error `ToolMessage` and the loop goes on, on
both runners, both backends (the test command runs this file under each) and every store, which
keeps the AI message that carried them exactly as the model sent it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentctx_fast import (
    Agent,
    AgentRunner,
    AiMessage,
    AsyncAgentRunner,
    AsyncScriptedChatModel,
    ScriptedChatModel,
    Tool,
    ToolCall,
    ToolMessage,
    TurnStatus,
    validate_tool_protocol,
)
from runner_helpers import Recorder, check_memory
from store_fixtures import ASYNC_STORE_KINDS, make_async_store, new_conversation_id, store_url

DEPTH = 5000
NESTED = {
    "array": "[" * DEPTH + "]" * DEPTH,
    "object": '{"a":' * DEPTH + "1" + "}" * DEPTH,
    "inner": '{"a":' + "[" * DEPTH + "]" * DEPTH + "}",
}


def _script(arguments: str) -> list[AiMessage]:
    return [
        AiMessage(None, (ToolCall("call-1", "lookup", arguments),)),
        AiMessage(None, (ToolCall("call-2", "lookup", '{"order": "ORD-1"}'),)),
        AiMessage("done"),
    ]


def _check_turn(turn: Any, recorder: Recorder, arguments: str) -> None:
    """The bad call got an error result, the good call after it ran, the turn completed."""
    assert turn.status is TurnStatus.COMPLETED, turn.error
    results = [m for m in turn.messages if isinstance(m, ToolMessage)]
    assert [r.tool_call_id for r in results] == ["call-1", "call-2"]
    assert results[0].is_error
    assert "invalid arguments for tool lookup" in results[0].text
    assert not results[1].is_error
    assert recorder.calls == [{"order": "ORD-1"}]
    ai = turn.messages[1]
    assert isinstance(ai, AiMessage) and ai.tool_calls[0].arguments == arguments


@pytest.mark.parametrize("arguments", list(NESTED.values()), ids=list(NESTED))
def test_blocking_runner_answers_hostile_arguments(store: Any, arguments: str) -> None:
    conversation = new_conversation_id()
    recorder = Recorder()
    agent = Agent("shop", ScriptedChatModel(_script(arguments)), tools=[Tool("lookup", recorder)])
    turn = AgentRunner(store).run(agent, conversation, "where is my order?")
    _check_turn(turn, recorder, arguments)
    check_memory(store.chat_memory(conversation), [turn])


@pytest.mark.parametrize("arguments", list(NESTED.values()), ids=list(NESTED))
def test_blocking_runner_without_store_answers_nested_arguments(arguments: str) -> None:
    recorder = Recorder()
    agent = Agent("shop", ScriptedChatModel(_script(arguments)), tools=[Tool("lookup", recorder)])
    turn = AgentRunner().run_history(agent, [], "where is my order?")
    _check_turn(turn, recorder, arguments)


@pytest.fixture(params=ASYNC_STORE_KINDS)
def async_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.parametrize("arguments", list(NESTED.values()), ids=list(NESTED))
def test_async_runner_answers_hostile_arguments(
    async_kind: str, request: pytest.FixtureRequest, arguments: str
) -> None:
    kind = async_kind.removeprefix("async-")
    url = store_url(kind, request)

    async def body() -> None:
        store = await make_async_store(kind, url)
        try:
            conversation = new_conversation_id()
            recorder = Recorder()
            model = AsyncScriptedChatModel(_script(arguments))
            agent = Agent("shop", model, tools=[Tool("lookup", recorder)])
            turn = await AsyncAgentRunner(store).run(agent, conversation, "where is my order?")
            _check_turn(turn, recorder, arguments)
            stored = await store.chat_memory(conversation).get_messages()
            assert stored == list(turn.messages)
            assert validate_tool_protocol(stored) == []
        finally:
            await store.aclose()

    asyncio.run(body())


@pytest.mark.parametrize("arguments", list(NESTED.values()), ids=list(NESTED))
def test_async_tool_answers_nested_arguments(arguments: str) -> None:
    async def lookup(**kwargs: Any) -> str:
        return "ok"

    async def body() -> None:
        model = AsyncScriptedChatModel(_script(arguments))
        agent = Agent("shop", model, tools=[Tool("lookup", lookup)])
        turn = await AsyncAgentRunner().run_history(agent, [], "where is my order?")
        assert turn.status is TurnStatus.COMPLETED, turn.error
        first = next(m for m in turn.messages if isinstance(m, ToolMessage))
        assert first.is_error and "invalid arguments for tool lookup" in first.text

    asyncio.run(body())
