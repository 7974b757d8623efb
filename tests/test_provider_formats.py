"""The Responses and Anthropic wire formats (SPEC §23): each checked against the provider SDK's
request types (pydantic, and the strict TypedDict walker of ``openai_schema``), round trips on
generated message lists, and lossless storage of what they read in every store."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from anthropic.types import MessageParam, TextBlockParam
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.responses import ResponseInputItemParam, ResponseInputParam
from pydantic import TypeAdapter

from agentctx_fast import (
    RESPONSES_METADATA_KEY,
    AgentActionMessage,
    AiMessage,
    AnthropicFormatError,
    AudioPart,
    FilePart,
    ImagePart,
    InvalidArgumentError,
    InvalidMessageTypeError,
    Message,
    ResponsesFormatError,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    UserMessage,
    build_window,
    from_anthropic,
    from_responses,
    to_anthropic,
    to_openai,
    to_responses,
    validate_tool_protocol,
)
from agentctx_fast.memory import ChatMemory
from openai_schema import type_errors
from store_fixtures import (
    every_store_kind,  # noqa: F401  (store_kind: every store)
    new_conversation_id,
)

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16
RESPONSES_INPUT: TypeAdapter[Any] = TypeAdapter(ResponseInputParam)
ANTHROPIC_MESSAGE: TypeAdapter[Any] = TypeAdapter(MessageParam)
ANTHROPIC_SYSTEM: TypeAdapter[Any] = TypeAdapter(str | list[TextBlockParam])

REASONING = {
    "type": "reasoning",
    "id": "rs_1",
    "summary": [{"type": "summary_text", "text": "Check the order first."}],
    "encrypted_content": "gAAAAABo" + "x" * 64,
}
WEB_SEARCH = {
    "type": "web_search_call",
    "id": "ws_1",
    "status": "completed",
    "action": {"type": "search", "query": "ORD-1 carrier"},
}
THINKING = {"type": "thinking", "thinking": "Look up ORD-1.", "signature": "EqQBCkYIBxgC"}
REDACTED = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"}


def check_responses(items: list[Any]) -> None:
    """Accepted by the SDK's request types: pydantic, and strictly item by item."""
    RESPONSES_INPUT.validate_python(items)
    for index, item in enumerate(items):
        assert type_errors(item, ResponseInputItemParam, f"$[{index}]") == []


def check_anthropic(system: Any, messages: list[Any]) -> None:
    if system is not None:
        ANTHROPIC_SYSTEM.validate_python(system)
    for index, message in enumerate(messages):
        ANTHROPIC_MESSAGE.validate_python(message)
        assert type_errors(message, MessageParam, f"$[{index}]") == []


def tool_turn(*, reasoning: bool = True, thinking: bool = False) -> list[Message]:
    items: tuple[dict[str, Any], ...] = ()
    if reasoning:
        items += (REASONING, WEB_SEARCH)
    if thinking:
        items += (THINKING, REDACTED)
    return [
        SystemMessage("You are a support agent.", message_id="s1"),
        UserMessage("Where is ORD-1? Here is the label.", message_id="u1"),
        UserMessage(
            (
                TextPart("And the box:"),
                ImagePart(uri="https://img.example/box.jpg", detail="high"),
                ImagePart(data=PNG, mime_type="image/png"),
                FilePart(uri="file-abc123", name="receipt.pdf"),
                FilePart(data=b"%PDF-1.4 tiny", mime_type="application/pdf", name="label.pdf"),
            ),
            message_id="u2",
        ),
        AiMessage(
            "Let me look.",
            (
                ToolCall("call_1", "get_order", '{"id": "ORD-1"}'),
                ToolCall("call_2", "get_carrier", '{"id": "ORD-1"}'),
            ),
            message_id="msg_a1",
            provider_items=items,
        ),
        ToolMessage("call_1", '{"status": "shipped"}', tool_name="get_order", message_id="t1"),
        AgentActionMessage(payload={"button": "track"}, message_id="ui1"),
        ToolMessage("call_2", "carrier down", is_error=True, message_id="t2"),
        AiMessage("It shipped.", message_id="msg_f1"),
    ]


# -- Responses -----------------------------------------------------------------------------------


def test_to_responses_is_accepted_by_the_sdk_types_and_places_items_first() -> None:
    items = to_responses(tool_turn(thinking=True))
    check_responses(items)
    kinds = [item.get("type", item.get("role")) for item in items]  # type: ignore[union-attr]
    assert kinds == [
        "system",
        "user",
        "user",
        "reasoning",
        "web_search_call",
        "message",
        "function_call",
        "function_call",
        "function_call_output",
        "function_call_output",
        "message",
    ]  # thinking blocks are Anthropic's: left out of a Responses request
    assert items[3] == REASONING
    assert items[5] == {
        "type": "message",
        "role": "assistant",
        "id": "msg_a1",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Let me look.", "annotations": []}],
    }
    assert items[8] == {
        "type": "function_call_output",
        "call_id": "call_1",
        "output": '{"status": "shipped"}',
        "name": "get_order",
    }


def test_an_assistant_id_is_sent_only_when_it_is_an_api_id() -> None:
    items = to_responses([AiMessage("hi", message_id="3fa85f64"), AiMessage("ok", refusal="no")])
    check_responses(items)
    assert items == [
        {"role": "assistant", "content": "hi"},
        {"role": "assistant", "content": "ok"},
    ]


def test_api_items_round_trip_exactly_with_ids_and_statuses() -> None:
    """What the Agents SDK keeps in a session comes back item for item."""
    items: list[dict[str, Any]] = [
        {"role": "developer", "content": [{"type": "input_text", "text": "Be brief."}]},
        {"role": "user", "content": "Where is ORD-1?"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Now."}]},
        REASONING,
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": "get_order",
            "arguments": '{"id":"ORD-1"}',
            "status": "completed",
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "shipped"},
        {**REASONING, "id": "rs_2"},
        WEB_SEARCH,
        {
            "type": "message",
            "role": "assistant",
            "id": "msg_1",
            "status": "completed",
            "content": [
                {
                    "type": "output_text",
                    "text": "It shipped.",
                    "annotations": [
                        {
                            "type": "url_citation",
                            "url": "https://carrier.example/ORD-1",
                            "title": "Tracking",
                            "start_index": 0,
                            "end_index": 10,
                        }
                    ],
                }
            ],
        },
        {
            "type": "message",
            "role": "assistant",
            "id": "msg_2",
            "status": "incomplete",
            "phase": "final_answer",
            "content": [{"type": "output_text", "text": "Cut sh", "annotations": []}],
        },
        {
            "type": "function_call_output",
            "call_id": "call_1",
            "output": "late",
            "status": "completed",
        },
    ]
    check_responses(items)
    messages = from_responses(items)
    assert [type(m).__name__ for m in messages] == [
        "SystemMessage",
        "UserMessage",
        "UserMessage",
        "AiMessage",
        "ToolMessage",
        "AiMessage",
        "ToolMessage",
    ]
    assert messages[0].text == "Be brief."  # type: ignore[attr-defined]
    first, answer = messages[3], messages[5]
    assert isinstance(first, AiMessage) and isinstance(answer, AiMessage)
    assert first.provider_items == (REASONING,)
    assert first.tool_calls == (ToolCall("call_1", "get_order", '{"id":"ORD-1"}'),)
    # two assistant messages of one model turn: one AI message, their texts as paragraphs
    assert answer.message_id == "msg_1" and answer.text == "It shipped.\n\nCut sh"
    assert answer.provider_items == ({**REASONING, "id": "rs_2"}, WEB_SEARCH)
    assert answer.metadata == {RESPONSES_METADATA_KEY: {"messages": items[8:10]}}
    assert to_responses(messages) == items


def call(n: int) -> dict[str, Any]:
    return {"type": "function_call", "call_id": f"c{n}", "name": "f", "arguments": "{}"}


def output(n: int) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": f"c{n}", "output": str(n)}


def said(text: str, n: int) -> dict[str, Any]:
    return {
        "type": "message",
        "role": "assistant",
        "id": f"msg_{n}",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def test_one_model_turn_interleaved_is_one_ai_message_in_its_order() -> None:
    """Reasoning between calls: one AI message (its calls' outputs follow it), and the API's
    order comes back, a reasoning item right before the call it produced."""
    items: list[dict[str, Any]] = [
        {"role": "user", "content": "go"},
        REASONING,
        call(1),
        {**REASONING, "id": "rs_2"},
        call(2),
        output(1),
        output(2),
    ]
    messages = from_responses(items)
    assert [type(m).__name__ for m in messages] == [
        "UserMessage",
        "AiMessage",
        "ToolMessage",
        "ToolMessage",
    ]
    reply = messages[1]
    assert isinstance(reply, AiMessage) and len(reply.provider_items) == 2
    assert reply.metadata == {RESPONSES_METADATA_KEY: {"order": "pcpc"}}
    assert validate_tool_protocol(messages) == []
    assert to_responses(messages) == items
    check_responses(to_responses(messages))
    assert from_responses(to_responses(messages, include_ids=True)) == messages


def test_an_assistant_message_between_calls_stays_there() -> None:
    """Text ("let me check"), a call, more text, another call: one AI message whose text is the
    paragraphs; the messages come back whole and in place."""
    items: list[dict[str, Any]] = [
        {"role": "user", "content": "go"},
        said("Let me check.", 1),
        call(1),
        REASONING,
        said("And the carrier.", 2),
        call(2),
        output(1),
        output(2),
    ]
    messages = from_responses(items)
    assert len(messages) == 4
    reply = messages[1]
    assert isinstance(reply, AiMessage) and reply.message_id == "msg_1"
    assert reply.text == "Let me check.\n\nAnd the carrier."
    assert reply.metadata == {
        RESPONSES_METADATA_KEY: {"messages": [items[1], items[4]], "order": "mcpmc"}
    }
    assert to_responses(messages) == items
    check_responses(to_responses(messages))
    assert from_responses(to_responses(messages, include_ids=True)) == messages
    # the text edited: one assistant message with the new text, in the first one's place
    edited = dataclasses.replace(reply, text="Checked.")
    assert [i.get("type") for i in to_responses([edited])] == [
        "message",
        "function_call",
        "reasoning",
        "function_call",
    ]


def test_the_default_order_records_nothing() -> None:
    """Items in the order `to_responses` writes record no order: one assistant message keeps
    the metadata it had (none), several only themselves."""
    items = [REASONING, WEB_SEARCH, said("Looking.", 1), call(1), call(2)]
    [reply] = from_responses(items)
    assert reply.metadata == {}
    assert to_responses([reply]) == items
    assert from_responses([said("Done.", 2)])[0].metadata == {}
    items = [REASONING, said("Looking.", 1), said("Still looking.", 2), call(1)]
    [reply] = from_responses(items)
    assert reply.metadata == {RESPONSES_METADATA_KEY: {"messages": items[1:3]}}
    assert to_responses([reply]) == items


ASSISTANT_SIDE = st.sampled_from(["p", "w", "m", "c"])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(ASSISTANT_SIDE, min_size=1, max_size=6), min_size=1, max_size=3))
def test_interleaved_orders_round_trip(turns: list[list[str]]) -> None:
    """Any order of one turn's assistant-side items: one AI message, the items back in their
    order, the request accepted by the SDK's types, the storage form lossless."""
    items: list[dict[str, Any]] = []
    n = 0
    for letters in turns:
        items.append({"role": "user", "content": "go"})
        called = []
        for letter in letters:
            n += 1
            if letter == "p":
                items.append({**REASONING, "id": f"rs_{n}"})
            elif letter == "w":
                items.append({**WEB_SEARCH, "id": f"ws_{n}"})
            elif letter == "m":
                items.append(said(f"text {n}", n))
            else:
                items.append(call(n))
                called.append(n)
        items.extend(output(c) for c in called)
    messages = from_responses(items)
    assert sum(isinstance(m, AiMessage) for m in messages) == len(turns)
    assert validate_tool_protocol(messages) == []
    assert to_responses(messages) == items
    check_responses(to_responses(messages))
    assert from_responses(to_responses(messages, include_ids=True)) == messages


@pytest.mark.parametrize(
    ("items", "problem"),
    [
        ([{"type": "function_call", "name": "f", "arguments": "{}"}], "item 0: a function call"),
        (
            [{"role": "user", "content": "x"}, {"role": "wizard", "content": "x"}],
            "item 1: unknown role 'wizard'",
        ),
        (["not an item"], "item 0 is not an object"),
        (
            [{"type": "function_call", "call_id": "c", "name": "f", "arguments": {"a": 1}}],
            "arguments must be a JSON string",
        ),
        ([{"type": "function_call_output", "output": "x"}], "item 0: a function call output"),
        (
            [{"role": "user", "content": [{"type": "input_image", "detail": "low"}]}],
            "item 0 content[0]: 'image_url' is missing",
        ),
        ([{"content": "x"}], "item 0 has no type or role"),
        (
            [
                {"role": "user", "content": "x"},
                {"type": "function_call", "call_id": "c", "name": "a\x00b", "arguments": "{}"},
            ],
            "item 1",
        ),
    ],
)
def test_malformed_items_name_their_index(items: list[Any], problem: str) -> None:
    with pytest.raises(ResponsesFormatError) as caught:
        from_responses(items)
    assert problem in str(caught.value)


# -- Anthropic -----------------------------------------------------------------------------------


def test_to_anthropic_is_accepted_by_the_sdk_types_and_groups_tool_results() -> None:
    system, messages = to_anthropic(tool_turn(thinking=True))
    check_anthropic(system, messages)
    assert system == "You are a support agent."
    assert [m["role"] for m in messages] == ["user", "user", "assistant", "user", "assistant"]
    assert messages[2]["content"] == [
        THINKING,
        REDACTED,  # thinking first, as the API requires; Responses items left out
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "call_1", "name": "get_order", "input": {"id": "ORD-1"}},
        {"type": "tool_use", "id": "call_2", "name": "get_carrier", "input": {"id": "ORD-1"}},
    ]
    assert messages[3]["content"] == [  # both results in one user message, the UI left out
        {"type": "tool_result", "tool_use_id": "call_1", "content": '{"status": "shipped"}'},
        {
            "type": "tool_result",
            "tool_use_id": "call_2",
            "content": "carrier down",
            "is_error": True,
        },
    ]
    assert [block["type"] for block in messages[1]["content"]] == [  # type: ignore[index]
        "text",
        "image",
        "image",
        "document",
        "document",
    ]


def test_several_system_messages_are_text_blocks() -> None:
    system, _ = to_anthropic([SystemMessage("a"), SystemMessage("b"), UserMessage("hi")])
    assert system == [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    check_anthropic(system, [])
    assert [m.text for m in from_anthropic([], system) if isinstance(m, SystemMessage)] == [
        "a",
        "b",
    ]


def test_from_anthropic_reads_tool_results_before_the_user_text() -> None:
    messages = from_anthropic(
        [
            {"role": "user", "content": "Where is ORD-1?"},
            {
                "role": "assistant",
                "content": [
                    THINKING,
                    {"type": "tool_use", "id": "toolu_1", "name": "get_order", "input": {"id": 1}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "shipped"},
                    {"type": "text", "text": "thanks, and ORD-2?"},
                ],
            },
        ],
        system="Be brief.",
    )
    assert [type(m).__name__ for m in messages] == [
        "SystemMessage",
        "UserMessage",
        "AiMessage",
        "ToolMessage",
        "UserMessage",
    ]
    reply = messages[2]
    assert isinstance(reply, AiMessage)
    assert reply.provider_items == (THINKING,)
    assert reply.tool_calls == (ToolCall("toolu_1", "get_order", '{"id": 1}'),)


@pytest.mark.parametrize(
    ("messages", "problem"),
    [
        ([{"role": "system", "content": "x"}], "message 0: unknown role 'system'"),
        ([{"role": "user"}], "message 0: 'content' must be"),
        (
            [{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f"}]}],
            "message 0 content[0]: 'input' is missing",
        ),
        (
            [{"role": "user", "content": [{"type": "video", "source": {}}]}],
            "unknown content block type 'video'",
        ),
        (
            [
                {"role": "user", "content": "x"},
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": "!"},
                        }
                    ],
                },
            ],
            "message 1 content[0]: data is not base64",
        ),
    ],
)
def test_malformed_anthropic_messages_name_their_index(messages: list[Any], problem: str) -> None:
    with pytest.raises(AnthropicFormatError) as caught:
        from_anthropic(messages)
    assert problem in str(caught.value)


def test_what_a_format_cannot_take_names_the_message() -> None:
    audio = UserMessage((AudioPart(data=b"RIFF", mime_type="audio/wav"),), message_id="u9")
    with pytest.raises(InvalidArgumentError, match=r"'u9'.*audio"):
        to_anthropic([audio])
    with pytest.raises(InvalidArgumentError, match=r"'u9'.*audio"):
        to_responses([audio])
    call = AiMessage(tool_calls=(ToolCall("c", "f", "[1, 2]"),), message_id="a9")
    with pytest.raises(InvalidArgumentError, match=r"'a9'.*JSON object"):
        to_anthropic([call])


# -- windows -------------------------------------------------------------------------------------


def test_a_windowed_tool_turn_is_accepted_in_both_formats() -> None:
    history: list[Message] = []
    for turn in range(6):
        for message in tool_turn(thinking=True)[1:]:
            history.append(dataclasses.replace(message, message_id=f"{message.message_id}.{turn}"))
    window = build_window(history, system="Be brief.", max_attached_turns=2)
    replies = [m for m in window.messages if isinstance(m, AiMessage) and m.tool_calls]
    assert replies and all(len(m.provider_items) == 4 for m in replies)
    check_responses(to_responses(window.messages))
    check_anthropic(*to_anthropic(window.messages))


# -- generated round trips -----------------------------------------------------------------------

IDS = st.text("abcdef0123456789_", min_size=1, max_size=12)
TEXTS = st.text(max_size=20)
CALL_IDS = st.sampled_from(["call_1", "call_2", "toolu_01A", "c"])


@st.composite
def parts(draw: st.DrawFn, *, anthropic: bool) -> Any:
    choices: list[Any] = [
        st.builds(TextPart, TEXTS),
        st.builds(
            lambda uri, detail: ImagePart(uri=uri, detail=detail),
            st.sampled_from(["https://img.example/a.png", "file-img1"]),
            st.none() if anthropic else st.sampled_from([None, "low", "high"]),
        ),
        st.just(ImagePart(data=PNG, mime_type="image/png")),
        st.builds(
            lambda uri, name: FilePart(uri=uri, name=name),
            st.sampled_from(["file-abc", "https://files.example/a.pdf"]),
            st.none() if anthropic else st.sampled_from([None, "a.pdf"]),
        ),
        st.just(FilePart(data=b"%PDF-1", mime_type="application/pdf", name="label.pdf")),
    ]
    return tuple(draw(st.lists(st.one_of(choices), max_size=3)))


def _items(kind: str) -> st.SearchStrategy[tuple[dict[str, Any], ...]]:
    if kind == "responses":
        pool = [REASONING, WEB_SEARCH, {"type": "future_item", "id": "fi_1", "data": [1, "二"]}]
    else:
        pool = [THINKING, REDACTED, {"type": "future_block", "data": {"x": None}}]
    return st.lists(st.sampled_from(pool), max_size=3).map(tuple)


@st.composite
def conversations(draw: st.DrawFn, kind: str) -> list[Message]:
    """Message lists the format carries: what it has no place for is left at its default."""
    anthropic = kind == "anthropic"
    out: list[Message] = []
    if anthropic:
        out += [SystemMessage(t) for t in draw(st.lists(TEXTS, max_size=2))]
    for i in range(draw(st.integers(0, 8))):
        message_id = draw(st.one_of(IDS, IDS.map(lambda s: "msg_" + s)))
        shape = draw(st.sampled_from(["system", "user", "parts", "ai", "tool", "ui"]))
        if shape == "system" and not anthropic:
            role = draw(st.sampled_from(["system", "developer"]))
            out.append(SystemMessage(draw(TEXTS), role=role, message_id=message_id))
        elif shape == "user" or shape == "system":
            out.append(UserMessage(draw(TEXTS), message_id=message_id))
        elif shape == "parts":
            out.append(UserMessage(draw(parts(anthropic=anthropic)), message_id=message_id))
        elif shape == "ai":
            calls = tuple(
                ToolCall(call_id, draw(st.sampled_from(["f", "get_order"])), arguments)
                for call_id, arguments in zip(
                    draw(st.lists(CALL_IDS, max_size=2, unique=True)),
                    draw(st.lists(st.sampled_from(['{"id": 1}', "{}", '{"q": "二"}']), max_size=2)),
                    strict=False,
                )
            )
            text = draw(st.one_of(st.none(), TEXTS))
            if anthropic and text == "":
                text = None  # an empty text block is not sent
            refusal = None if anthropic else draw(st.one_of(st.none(), TEXTS))
            visible = [m for m in out if m.model_visible]
            if not anthropic and visible and isinstance(visible[-1], AiMessage):
                # Responses items have no edge between two AI messages: one model turn's
                # assistant-side items are read as one (see the interleaved tests).
                out.append(UserMessage(draw(TEXTS), message_id=message_id + "u"))
            out.append(
                AiMessage(
                    text,
                    calls,
                    refusal=refusal,
                    provider_items=draw(_items(kind)),
                    message_id=message_id,
                )
            )
        elif shape == "tool":
            out.append(
                ToolMessage(
                    draw(CALL_IDS),
                    draw(TEXTS),
                    tool_name=None if anthropic else draw(st.sampled_from([None, "f"])),
                    is_error=draw(st.booleans()) if anthropic else False,
                    message_id=message_id,
                )
            )
        else:
            out.append(AgentActionMessage(payload={"i": i}, message_id=message_id))
    return out


@settings(max_examples=300, deadline=None)
@given(conversations("responses"))
def test_responses_round_trip_on_generated_lists(messages: list[Message]) -> None:
    visible = [m for m in messages if m.model_visible]
    assert from_responses(to_responses(messages, include_ids=True)) == visible
    # An item type the SDK does not know yet is sent as it is; the rest is checked.
    check_responses([i for i in to_responses(messages) if i.get("type") != "future_item"])


def _without_ids(messages: list[Message]) -> list[Message]:
    return [dataclasses.replace(m, message_id="-") for m in messages]


@settings(max_examples=300, deadline=None)
@given(conversations("anthropic"))
def test_anthropic_round_trip_on_generated_lists(messages: list[Message]) -> None:
    """Everything but message ids, which Anthropic messages do not have."""
    visible = [m for m in messages if m.model_visible]
    system, sent = to_anthropic(messages)
    assert _without_ids(from_anthropic(sent, system)) == _without_ids(visible)
    for message in sent:
        content = message["content"]
        if isinstance(content, list):
            content = [b for b in content if b.get("type") != "future_block"]
        ANTHROPIC_MESSAGE.validate_python({**message, "content": content})


# -- stores --------------------------------------------------------------------------------------


def test_what_the_formats_read_is_stored_losslessly(store: Any) -> None:
    items: list[dict[str, Any]] = [
        {"role": "user", "content": "Where is ORD-1?"},
        REASONING,
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": "get_order",
            "arguments": "{}",
            "status": "completed",
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "shipped"},
        {
            "type": "message",
            "role": "assistant",
            "id": "msg_1",
            "status": "incomplete",
            "content": [{"type": "output_text", "text": "It ship", "annotations": []}],
        },
    ]
    claude: list[Any] = [
        {"role": "user", "content": "and ORD-2?"},
        {"role": "assistant", "content": [THINKING, REDACTED, {"type": "text", "text": "Also."}]},
    ]
    memory: ChatMemory = store.chat_memory(new_conversation_id())
    for message in from_responses(items) + from_anthropic(claude):
        memory.add_message(message)
    stored = memory.get_messages()
    assert to_responses(stored[:4]) == items
    assert to_anthropic(stored[4:]) == (None, claude)
    assert json.loads(json.dumps(stored[1].metadata)) == stored[1].metadata


@pytest.mark.parametrize("convert", [to_openai, to_responses, to_anthropic])
@pytest.mark.parametrize("stranger", [{"role": "user", "content": "hi"}, "hi", None])
def test_a_non_message_is_the_same_typed_error_in_every_format(
    convert: Any, stranger: object
) -> None:
    """Every request format refuses a value that is not a `Message` with the one error the
    spec names for it (`InvalidMessageTypeError`, a `TypeError`), at its index."""
    messages = [UserMessage("hi", message_id="u1"), stranger]
    with pytest.raises(InvalidMessageTypeError, match=r"messages\[1\] is not a Message") as caught:
        convert(messages)
    assert isinstance(caught.value, TypeError)
