"""`OpenAIChatModel` / `AsyncOpenAIChatModel` with the real SDK against a local strict server."""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from agentctx_fast import (
    Agent,
    AgentRunner,
    AiMessage,
    AsyncChatModel,
    AsyncOpenAIChatModel,
    ChatModel,
    InMemoryAgentStore,
    InvalidArgumentError,
    MissingDependencyError,
    ModelCallError,
    OpenAIChatModel,
    Tool,
    ToolCall,
    Usage,
    build_window,
    openai_tools,
    to_openai,
)
from openai_server import ChatServer, Completion, Failure, Stream, serve, usage
from test_openai_format import conversation


def get_order(order_id: str) -> str:
    """Look an order up by its id."""
    return f'{{"id": "{order_id}", "status": "shipped"}}'


TOOLS = [Tool("get_order", get_order)]
CALL = {
    "id": "call_9",
    "type": "function",
    "function": {"name": "get_order", "arguments": '{"order_id": "ORD-1"}'},
}


@pytest.fixture
def server() -> Iterator[ChatServer]:
    yield from serve()


def _client(server: ChatServer, max_retries: int = 0) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="test-key", max_retries=max_retries)


def _async_client(server: ChatServer) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)


def _window() -> list[Any]:
    return build_window(conversation()).messages


def test_chat_sends_the_window_and_tools_and_maps_text_and_usage(server: ChatServer) -> None:
    server.script.append(Completion({"content": "Escalated."}, usage(812, 4)))
    model = OpenAIChatModel(_client(server), "gpt-4o-mini", temperature=0)
    reply = model.chat(_window(), TOOLS)
    assert server.rejected == []
    (request,) = server.requests
    assert request["model"] == "gpt-4o-mini"
    assert request["temperature"] == 0
    assert request["messages"] == to_openai(_window())
    assert request["tools"] == openai_tools(TOOLS)
    assert isinstance(reply, AiMessage)
    assert (reply.text, reply.tool_calls, reply.refusal) == ("Escalated.", (), None)
    assert reply.usage == Usage(812, 4, 816)


def test_no_tools_means_no_tools_key(server: ChatServer) -> None:
    server.script.append(Completion({"content": "hi"}))
    reply = OpenAIChatModel(_client(server), "m").chat(_window(), ())
    assert "tools" not in server.requests[0]
    assert reply.usage is None


def test_tool_calls_and_refusals_are_mapped(server: ChatServer) -> None:
    second = {**CALL, "id": "call_10", "function": {"name": "get_order", "arguments": "{}"}}
    server.script += [
        Completion({"tool_calls": [CALL, second]}, usage(10, 5), "tool_calls"),
        Completion({"refusal": "I can't help with that."}, usage(10, 3)),
    ]
    model = OpenAIChatModel(_client(server), "m")
    calls = model.chat(_window(), TOOLS)
    assert calls.text is None
    assert calls.tool_calls == (
        ToolCall("call_9", "get_order", '{"order_id": "ORD-1"}'),
        ToolCall("call_10", "get_order", "{}"),
    )
    refusal = model.chat(_window(), TOOLS)
    assert (refusal.text, refusal.refusal, refusal.usage) == (
        None,
        "I can't help with that.",
        Usage(10, 3, 13),
    )
    assert server.rejected == []


@pytest.mark.parametrize("status", [400, 401, 429, 500, 503])
def test_api_errors_carry_the_http_status(server: ChatServer, status: int) -> None:
    server.script.append(Failure(status, "scripted trouble"))
    with pytest.raises(ModelCallError) as raised:
        OpenAIChatModel(_client(server), "m").chat(_window(), TOOLS)
    assert raised.value.status_code == status
    assert "scripted trouble" in str(raised.value)
    assert len(server.requests) == 1  # max_retries=0: the client does not retry


def test_a_request_the_api_rejects_is_a_400_model_call_error(server: ChatServer) -> None:
    model = OpenAIChatModel(_client(server), "m", extra_body={"not_an_api_option": 1})
    with pytest.raises(ModelCallError) as raised:
        model.chat(_window(), TOOLS)
    assert raised.value.status_code == 400
    assert server.rejected == [
        "body.not_an_api_option: Unrecognized request argument supplied: not_an_api_option"
    ]


def test_retries_are_the_clients(server: ChatServer) -> None:
    server.script += [Failure(500), Failure(429), Completion({"content": "third time"})]
    model = OpenAIChatModel(_client(server, max_retries=2), "m")
    assert model.chat(_window(), TOOLS).text == "third time"
    assert len(server.requests) == 3


def test_an_unreachable_server_has_no_status() -> None:
    with socket.socket() as probe:  # a port nothing listens on once the probe is closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="k", max_retries=0)
    with pytest.raises(ModelCallError) as raised:
        OpenAIChatModel(client, "m").chat(_window(), ())
    assert raised.value.status_code is None


def test_options_are_checked_when_the_model_is_made() -> None:
    client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="k")
    for option in ("messages", "tools", "stream", "model"):
        with pytest.raises(InvalidArgumentError, match=option):
            OpenAIChatModel(client, "m", **{option: 1})
    with pytest.raises(InvalidArgumentError, match="model"):
        AsyncOpenAIChatModel(client, "")
    with pytest.raises(InvalidArgumentError, match=r"\['temprature'\].*extra_body"):
        OpenAIChatModel(client, "m", temprature=0)
    with pytest.raises(InvalidArgumentError, match=r"chat\.completions\.create"):
        OpenAIChatModel(object(), "m")


def test_missing_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)
    with pytest.raises(MissingDependencyError, match=r"agentctx-fast\[openai\]"):
        OpenAIChatModel(object(), "m")
    with pytest.raises(ImportError):  # a MissingDependencyError is an ImportError too
        AsyncOpenAIChatModel(object(), "m")


def test_models_satisfy_the_protocols(server: ChatServer) -> None:
    assert isinstance(OpenAIChatModel(_client(server), "m"), ChatModel)
    assert isinstance(AsyncOpenAIChatModel(_async_client(server), "m"), AsyncChatModel)


def test_the_runner_drives_a_tool_turn_through_the_server(server: ChatServer) -> None:
    server.script += [
        Completion({"tool_calls": [CALL]}, usage(40, 8), "tool_calls"),
        Completion({"content": "ORD-1 has shipped."}, usage(70, 6)),
    ]
    agent = Agent(
        "support", OpenAIChatModel(_client(server), "m"), instructions="Be kind.", tools=TOOLS
    )
    turn = AgentRunner(InMemoryAgentStore()).run(agent, "c1", "Where is ORD-1?")
    assert turn.final_message is not None and turn.final_message.text == "ORD-1 has shipped."
    assert server.rejected == []
    second = server.requests[1]["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "tool"]
    assert second[3]["tool_call_id"] == "call_9" and "shipped" in second[3]["content"]
    stored = [m for m in turn.messages if isinstance(m, AiMessage)]
    assert [m.usage for m in stored] == [Usage(40, 8, 48), Usage(70, 6, 76)]


# --- async ------------------------------------------------------------------------------------


def test_async_chat(server: ChatServer) -> None:
    server.script.append(Completion({"tool_calls": [CALL]}, usage(5, 5), "tool_calls"))
    model = AsyncOpenAIChatModel(_async_client(server), "m", temperature=0.2)
    reply = asyncio.run(model.chat(_window(), TOOLS))
    assert reply.tool_calls == (ToolCall("call_9", "get_order", '{"order_id": "ORD-1"}'),)
    assert reply.usage == Usage(5, 5, 10)
    assert server.requests[0]["temperature"] == 0.2 and server.rejected == []


async def _collect(model: AsyncOpenAIChatModel, tools: list[Tool]) -> list[Any]:
    return [item async for item in model.stream(_window(), tools)]


def test_stream_yields_text_deltas_then_the_message(server: ChatServer) -> None:
    server.script.append(
        Stream([{"content": "ORD-1 "}, {"content": "has "}, {"content": "shipped."}], usage(30, 3))
    )
    items = asyncio.run(_collect(AsyncOpenAIChatModel(_async_client(server), "m"), TOOLS))
    assert items[:-1] == ["ORD-1 ", "has ", "shipped."]
    final = items[-1]
    assert isinstance(final, AiMessage)
    assert (final.text, final.tool_calls, final.usage) == (
        "ORD-1 has shipped.",
        (),
        Usage(30, 3, 33),
    )
    request = server.requests[0]
    assert request["stream"] is True and request["stream_options"] == {"include_usage": True}
    assert server.rejected == []


def test_stream_assembles_parallel_tool_call_pieces(server: ChatServer) -> None:
    def piece(index: int, **fields: Any) -> dict[str, Any]:
        return {"tool_calls": [{"index": index, **fields}]}

    server.script.append(
        Stream(
            [
                piece(
                    0, id="call_a", type="function", function={"name": "get_order", "arguments": ""}
                ),
                piece(0, function={"arguments": '{"order_'}),
                piece(
                    1,
                    id="call_b",
                    type="function",
                    function={"name": "get_order", "arguments": "{"},
                ),
                piece(0, function={"arguments": 'id": "A"}'}),
                piece(1, function={"arguments": '"order_id": "B"}'}),
            ],
            usage(12, 20),
            "tool_calls",
        )
    )
    items = asyncio.run(_collect(AsyncOpenAIChatModel(_async_client(server), "m"), TOOLS))
    assert len(items) == 1  # no text: only the message
    assert items[0].text is None
    assert items[0].tool_calls == (
        ToolCall("call_a", "get_order", '{"order_id": "A"}'),
        ToolCall("call_b", "get_order", '{"order_id": "B"}'),
    )
    assert items[0].usage == Usage(12, 20, 32)


def test_stream_of_a_refusal(server: ChatServer) -> None:
    server.script.append(Stream([{"refusal": "I can't "}, {"refusal": "do that."}]))
    items = asyncio.run(_collect(AsyncOpenAIChatModel(_async_client(server), "m"), []))
    assert items[-1].refusal == "I can't do that." and items[-1].text is None
    assert items[-1].usage is None


def test_stream_errors_carry_the_status(server: ChatServer) -> None:
    server.script.append(Failure(429, "slow down"))
    with pytest.raises(ModelCallError) as raised:
        asyncio.run(_collect(AsyncOpenAIChatModel(_async_client(server), "m"), TOOLS))
    assert raised.value.status_code == 429


def test_stream_without_usage_when_the_options_say_so(server: ChatServer) -> None:
    server.script.append(Stream([{"content": "hi"}], usage(1, 1)))
    model = AsyncOpenAIChatModel(
        _async_client(server), "m", stream_options={"include_usage": False}
    )
    items = asyncio.run(_collect(model, []))
    assert items == ["hi", AiMessage("hi", message_id=items[-1].message_id)]
