"""The LangChain integration (SPEC §18), with langchain-core's own fake chat models."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import json
import sys
from collections.abc import Sequence
from typing import Any

import pytest
from langchain_core import messages as lc
from langchain_core.language_models.fake_chat_models import (
    FakeMessagesListChatModel,
    GenericFakeChatModel,
)

from agentctx_fast import (
    Agent,
    AgentRunner,
    AiMessage,
    AsyncChatModel,
    ChatModel,
    ImagePart,
    InMemoryAgentStore,
    InvalidArgumentError,
    InvalidMessageTypeError,
    Message,
    MissingDependencyError,
    ModelCallError,
    SystemMessage,
    Tool,
    ToolCall,
    ToolMessage,
    Usage,
    UserMessage,
    build_window,
)
from agentctx_fast.integrations.langchain import (
    AsyncLangChainChatModel,
    LangChainChatModel,
    from_langchain,
    to_langchain,
    window_messages,
)
from test_openai_format import conversation


def _carried(message: Message) -> Message:
    """What survives LangChain: no turn_id, metadata or version; "" and no text are one."""
    changes: dict[str, Any] = {"metadata": {}, "version": 0, "turn_id": None}
    if isinstance(message, AiMessage):
        changes["tool_calls"] = tuple(
            dataclasses.replace(
                c, arguments=json.dumps(json.loads(c.arguments), ensure_ascii=False)
            )
            for c in message.tool_calls
        )
        if message.text is None and not message.tool_calls and message.refusal is None:
            changes["text"] = ""
    return dataclasses.replace(message, **changes)


def test_round_trip_keeps_ids_arguments_status_and_everything_else() -> None:
    history = conversation()
    converted = to_langchain(history)
    assert [m.id for m in converted] == [m.message_id for m in history if m.model_visible]
    back = from_langchain(converted)
    assert back == [_carried(m) for m in history if m.model_visible]
    by_id = {m.message_id: m for m in back}
    error = by_id["t2b"]
    assert isinstance(error, ToolMessage) and error.is_error
    assert by_id["a1"].usage == Usage(50, 10, 60)  # type: ignore[attr-defined]
    assert by_id["a2f"].refusal == "I can't issue refunds over the limit."  # type: ignore[attr-defined]
    assert by_id["sys"].role == "developer"  # type: ignore[attr-defined]


def test_the_langchain_side_has_the_langchain_shapes() -> None:
    converted = {m.id: m for m in to_langchain(conversation())}
    call = converted["a1"]
    assert isinstance(call, lc.AIMessage)
    assert call.tool_calls == [
        {"name": "get_order", "args": {"id": "ORD-1"}, "id": "call_0", "type": "tool_call"}
    ]
    assert call.usage_metadata == {"input_tokens": 50, "output_tokens": 10, "total_tokens": 60}
    failed = converted["t2b"]
    assert isinstance(failed, lc.ToolMessage) and failed.status == "error"
    named = converted["t1"]
    assert isinstance(named, lc.ToolMessage)
    assert (named.status, named.name, named.tool_call_id) == ("success", "get_order", "call_0")
    human = converted["u2"]
    assert isinstance(human, lc.HumanMessage) and isinstance(human.content, list)
    assert human.content[1] == {
        "type": "image",
        "url": "https://img.example/box.jpg",
        "extras": {"detail": "high"},
    }
    assert human.content[4] == {
        "type": "file",
        "file_id": "file-abc123",
        "extras": {"filename": "receipt.pdf"},
    }


def test_arguments_that_are_not_an_object_survive_as_invalid_calls() -> None:
    message = AiMessage(
        tool_calls=(ToolCall("c1", "f", "not json"), ToolCall("c2", "g", "[1]")), message_id="a1"
    )
    (converted,) = to_langchain([message])
    assert isinstance(converted, lc.AIMessage) and converted.tool_calls == []
    assert [c["args"] for c in converted.invalid_tool_calls] == ["not json", "[1]"]
    assert from_langchain([converted]) == [message]


@pytest.mark.parametrize("args", ['{"q": 1}', "{bad"], ids=["object-arguments", "not-json"])
@pytest.mark.parametrize("error", ["f is not a tool", None])
def test_an_invalid_call_comes_back_invalid_with_its_error(args: str, error: str | None) -> None:
    """LangChain's invalid call (a call the model's parser or validation refused) stays one,
    with its error, even when its arguments are a JSON object."""
    invalid = lc.InvalidToolCall(
        type="invalid_tool_call", name="f", args=args, id="c1", error=error
    )
    message = lc.AIMessage("", invalid_tool_calls=[invalid], id="a1")
    (back,) = to_langchain(from_langchain([message]))
    assert isinstance(back, lc.AIMessage) and back.tool_calls == []
    assert back.invalid_tool_calls == [invalid]


def test_arguments_nested_thousands_deep_are_an_invalid_call() -> None:
    """SPEC §20: a model's arguments nested past the parser's depth are carried, not a crash."""
    deep = "[" * 5000 + "]" * 5000
    message = AiMessage(tool_calls=(ToolCall("c1", "f", deep),), message_id="a1")
    (converted,) = to_langchain([message])
    assert isinstance(converted, lc.AIMessage) and converted.tool_calls == []
    assert [c["args"] for c in converted.invalid_tool_calls] == [deep]
    assert from_langchain([converted]) == [message]


def test_from_langchain_reads_what_langchain_users_write() -> None:
    messages = from_langchain(
        [
            lc.SystemMessage("rules"),
            lc.HumanMessage(
                [
                    {"type": "text", "text": "look"},
                    {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}},
                ],
                id="u1",
            ),
            lc.AIMessage(
                "", tool_calls=[{"name": "get", "args": {"q": "订单"}, "id": "c1"}], id="a1"
            ),
            lc.ToolMessage("boom", tool_call_id="c1", status="error", id="t1"),
            lc.AIMessage(
                [{"type": "reasoning", "reasoning": "hmm"}, {"type": "text", "text": "ok"}]
            ),
            lc.ChatMessage("be terse", role="developer", id="d1"),
        ]
    )
    system, user, ai, tool, final, developer = messages
    assert developer == SystemMessage("be terse", role="developer", message_id="d1")
    assert isinstance(system, SystemMessage) and system.text == "rules" and system.message_id
    assert isinstance(user, UserMessage)
    assert user.content[1] == ImagePart(uri="https://x/y.png", detail="low")  # type: ignore[index]
    assert isinstance(ai, AiMessage) and ai.text is None
    assert ai.tool_calls == (ToolCall("c1", "get", '{"q": "订单"}'),)
    assert isinstance(tool, ToolMessage) and tool.is_error and tool.text == "boom"
    assert isinstance(final, AiMessage) and final.text == "ok"


@pytest.mark.parametrize(
    ("message", "error", "problem"),
    [
        (lc.FunctionMessage("x", name="f"), InvalidArgumentError, "FunctionMessage cannot"),
        (lc.ChatMessage("x", role="critic"), InvalidArgumentError, "ChatMessage cannot"),
        (
            lc.AIMessage.model_construct(content=[7], tool_calls=[], invalid_tool_calls=[]),
            InvalidArgumentError,
            "content[0] must be a str or an object",
        ),
        (
            lc.AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": None}]),
            InvalidArgumentError,
            "a tool call has no id",
        ),
        ("hello", InvalidMessageTypeError, "not a LangChain message"),
        (
            lc.HumanMessage([{"type": "image", "url": "https://x/y.png", "extras": "low"}]),
            InvalidArgumentError,
            "content[0]: 'extras' must be an object",
        ),
    ],
)
def test_what_cannot_be_carried_names_the_index(message: Any, error: type, problem: str) -> None:
    with pytest.raises(error) as raised:
        from_langchain([lc.HumanMessage("first"), message])
    assert str(raised.value).startswith("messages[1]")
    assert problem in str(raised.value)


@pytest.mark.parametrize("messages", [None, 7, "hello", lc.HumanMessage("hi")])
def test_messages_that_are_not_a_list_are_refused(messages: Any) -> None:
    for convert_or_window in (from_langchain, window_messages):
        with pytest.raises(InvalidArgumentError, match=r"^messages must be a list"):
            convert_or_window(messages)


def test_window_messages_returns_the_callers_own_objects() -> None:
    history = to_langchain(conversation())
    window = window_messages(
        history, compact_completed_tool_turns=True, compression_keep_recent_turns=0
    )
    expected = build_window(
        from_langchain(history), compact_completed_tool_turns=True, compression_keep_recent_turns=0
    )
    assert [m.id for m in window] == [m.message_id for m in expected.messages]
    originals = {id(m) for m in history}
    assert all(id(m) in originals for m in window)


def test_window_messages_converts_what_the_window_adds() -> None:
    history = [
        lc.HumanMessage("q1", id="u1"),
        lc.AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": "c1"}], id="a1"),
        lc.AIMessage("answer", id="a1f"),
        lc.HumanMessage("q2", id="u2"),
    ]
    window = window_messages(history, system="Be brief.")
    assert [m.id for m in window] == ["system", "u1", "a1", "c1:missing", "a1f", "u2"]
    system, repair = window[0], window[3]
    assert isinstance(system, lc.SystemMessage) and system.content == "Be brief."
    assert isinstance(repair, lc.ToolMessage) and repair.status == "error"
    assert repair.tool_call_id == "c1"


class _ToolModel(FakeMessagesListChatModel):
    """langchain-core's fake list model, with bind_tools recording what it was given."""

    bound: list[Any] = []  # noqa: RUF012 (pydantic field)
    seen: list[list[lc.BaseMessage]] = []  # noqa: RUF012

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        self.bound.append(list(tools))
        return self

    def _generate(self, messages: list[lc.BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self.seen.append(list(messages))
        return super()._generate(messages, *args, **kwargs)


def get_order(order_id: str) -> str:
    """Look an order up."""
    return f"{order_id} shipped"


TOOLS = [Tool("get_order", get_order)]


def test_chat_model_binds_tools_and_maps_the_reply() -> None:
    fake = _ToolModel(
        responses=[
            lc.AIMessage(
                "",
                tool_calls=[{"name": "get_order", "args": {"order_id": "A"}, "id": "c1"}],
                usage_metadata={"input_tokens": 9, "output_tokens": 2, "total_tokens": 11},
            ),
        ],
        bound=[],
        seen=[],
    )
    model = LangChainChatModel(fake)
    assert isinstance(model, ChatModel)
    reply = model.chat(build_window(conversation()).messages, TOOLS)
    assert reply.tool_calls == (ToolCall("c1", "get_order", '{"order_id": "A"}'),)
    assert reply.usage == Usage(9, 2, 11)
    assert fake.bound[0][0]["function"]["name"] == "get_order"
    assert [m.id for m in fake.seen[0]] == [
        m.message_id for m in build_window(conversation()).messages
    ]


def test_the_runner_drives_a_langchain_model() -> None:
    fake = _ToolModel(
        responses=[
            lc.AIMessage(
                "", tool_calls=[{"name": "get_order", "args": {"order_id": "A"}, "id": "c1"}]
            ),
            lc.AIMessage("A has shipped."),
        ],
        bound=[],
        seen=[],
    )
    agent = Agent("support", LangChainChatModel(fake), instructions="Be kind.", tools=TOOLS)
    turn = AgentRunner(InMemoryAgentStore()).run(agent, "c1", "Where is A?")
    assert turn.final_message is not None and turn.final_message.text == "A has shipped."
    second = fake.seen[1]
    assert [type(m).__name__ for m in second] == [
        "SystemMessage",
        "HumanMessage",
        "AIMessage",
        "ToolMessage",
    ]
    assert second[3].content == "A shipped"


def test_a_model_without_bind_tools_is_refused_only_when_there_are_tools() -> None:
    fake = FakeMessagesListChatModel(responses=[lc.AIMessage("hi")])
    model = LangChainChatModel(fake)
    assert model.chat([UserMessage("x")], ()).text == "hi"
    with pytest.raises(InvalidArgumentError, match="cannot bind tools"):
        model.chat([UserMessage("x")], TOOLS)


class _Failing(FakeMessagesListChatModel):
    def _generate(self, *args: Any, **kwargs: Any) -> Any:
        error = RuntimeError("rate limited")
        error.status_code = 429  # type: ignore[attr-defined]  # as provider SDK errors carry it
        raise error


def test_model_failures_are_model_call_errors() -> None:
    model = LangChainChatModel(_Failing(responses=[]))
    with pytest.raises(ModelCallError, match="rate limited") as raised:
        model.chat([UserMessage("x")], ())
    assert raised.value.status_code == 429
    with pytest.raises(ModelCallError) as raised_async:
        asyncio.run(AsyncLangChainChatModel(_Failing(responses=[])).chat([UserMessage("x")], ()))
    assert raised_async.value.status_code == 429
    with pytest.raises(InvalidArgumentError, match="BaseChatModel"):
        LangChainChatModel(object())  # type: ignore[arg-type]


def test_async_chat_and_stream() -> None:
    reply = lc.AIMessage("ORD-1 has shipped.", id="r1")
    model = AsyncLangChainChatModel(GenericFakeChatModel(messages=iter([reply, reply])))
    assert isinstance(model, AsyncChatModel)
    answer = asyncio.run(model.chat([UserMessage("where?")], ()))
    assert (answer.text, answer.message_id) == ("ORD-1 has shipped.", "r1")

    async def collect() -> list[Any]:
        return [item async for item in model.stream([UserMessage("where?")], ())]

    items = asyncio.run(collect())
    assert len(items) > 2 and all(isinstance(i, str) for i in items[:-1])
    assert "".join(items[:-1]) == "ORD-1 has shipped."
    assert isinstance(items[-1], AiMessage) and items[-1].text == "ORD-1 has shipped."


def test_missing_langchain_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "langchain_core", None)
    monkeypatch.delitem(sys.modules, "agentctx_fast.integrations.langchain")
    with pytest.raises(MissingDependencyError, match=r"agentctx-fast\[langchain\]"):
        importlib.import_module("agentctx_fast.integrations.langchain")


def test_the_adapters_name_the_wrapped_model_for_exact_counts() -> None:
    """SPEC §20: an agent of a wrapped model that names itself counts in its encoding."""

    class Named(GenericFakeChatModel):
        model_name: str = "gpt-4o"

    named = LangChainChatModel(Named(messages=iter([])))
    assert named.model_name == "gpt-4o"
    assert AsyncLangChainChatModel(Named(messages=iter([]))).model_name == "gpt-4o"
    assert LangChainChatModel(GenericFakeChatModel(messages=iter([]))).model_name is None
    estimator = Agent("a", named).window_options.token_estimator
    assert getattr(estimator, "encoding", None) == "o200k_base"
