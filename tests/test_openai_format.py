"""`to_openai` / `from_openai`: exactly the Chat Completions request form, both ways (SPEC §15)."""

from __future__ import annotations

import base64
import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam

from agentctx_fast import (
    AgentActionMessage,
    AgentFormMessage,
    AiMessage,
    AudioPart,
    ContentTooLargeError,
    FilePart,
    ImagePart,
    InvalidArgumentError,
    InvalidMessageTypeError,
    Message,
    SystemMessage,
    TextPart,
    Tool,
    ToolCall,
    ToolMessage,
    UserMessage,
    build_window,
    from_openai,
    openai_tools,
    to_openai,
)
from agentctx_fast.core.messages import Usage
from agentctx_fast.formats.openai import OpenAIFormatError
from openai_schema import request_errors, type_errors
from strategies import histories

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(40))
WAV = b"RIFF\x24\x00\x00\x00WAVEfmt " + bytes(20)


def conversation() -> list[Message]:
    """A realistic support conversation: tool calls, images, audio, a file, a refusal."""
    return [
        SystemMessage("You are a support agent.", role="developer", message_id="sys"),
        UserMessage("Where is ORD-1?", name="alice", message_id="u1"),
        AiMessage(
            "Let me look.",
            (ToolCall("call_0", "get_order", '{"id": "ORD-1"}'),),
            message_id="a1",
            usage=Usage(50, 10, 60),
        ),
        ToolMessage("call_0", '{"status": "shipped"}', tool_name="get_order", message_id="t1"),
        AgentActionMessage(payload={"button": "track"}, message_id="ui1"),
        AiMessage("It has shipped.", message_id="a1f", name="support_bot"),
        UserMessage(
            (
                TextPart("Here is the damaged box and my voice note."),
                ImagePart(uri="https://img.example/box.jpg", detail="high"),
                ImagePart(data=PNG, mime_type="image/png", detail="low"),
                AudioPart(data=WAV, mime_type="audio/wav"),
                FilePart(uri="file-abc123", name="receipt.pdf"),
                FilePart(data=b"%PDF-1.4 tiny", mime_type="application/pdf", name="label.pdf"),
            ),
            message_id="u2",
        ),
        AiMessage(
            tool_calls=(
                ToolCall("call_0", "open_claim", '{"order": "ORD-1"}'),
                ToolCall("call_1", "refund", '{"order": "ORD-1", "amount": 5}'),
            ),
            message_id="a2",
        ),
        ToolMessage("call_0", "claim C-9 opened", message_id="t2a"),
        ToolMessage("call_1", "refund failed: limit", is_error=True, message_id="t2b"),
        AgentFormMessage(payload={"approve": "refund"}, status="open", message_id="form1"),
        AiMessage(None, refusal="I can't issue refunds over the limit.", message_id="a2f"),
        UserMessage("Then escalate it please.", message_id="u3"),
    ]


def test_every_message_has_only_the_api_keys() -> None:
    entries = to_openai(conversation())
    assert [e["role"] for e in entries] == [
        "developer",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "user",
    ]
    allowed = {"role", "content", "name", "tool_calls", "tool_call_id", "refusal"}
    assert all(set(e) <= allowed for e in entries)
    assert entries[3] == {
        "role": "tool",
        "tool_call_id": "call_0",
        "content": '{"status": "shipped"}',
    }
    assert entries[1] == {"role": "user", "content": "Where is ORD-1?", "name": "alice"}
    assert entries[9] == {"role": "assistant", "refusal": "I can't issue refunds over the limit."}


def test_parts_have_the_api_shapes() -> None:
    parts = to_openai(conversation())[5]["content"]
    assert isinstance(parts, list)
    assert parts[0] == {"type": "text", "text": "Here is the damaged box and my voice note."}
    assert parts[1] == {
        "type": "image_url",
        "image_url": {"url": "https://img.example/box.jpg", "detail": "high"},
    }
    assert parts[2] == {
        "type": "image_url",
        "image_url": {
            "url": "data:image/png;base64," + base64.b64encode(PNG).decode(),
            "detail": "low",
        },
    }
    assert parts[3] == {
        "type": "input_audio",
        "input_audio": {"data": base64.b64encode(WAV).decode(), "format": "wav"},
    }
    assert parts[4] == {
        "type": "file",
        "file": {"file_id": "file-abc123", "filename": "receipt.pdf"},
    }
    assert parts[5] == {
        "type": "file",
        "file": {
            "file_data": "data:application/pdf;base64,"
            + base64.b64encode(b"%PDF-1.4 tiny").decode(),
            "filename": "label.pdf",
        },
    }


def test_a_window_passes_the_sdk_request_types_and_the_strict_checker() -> None:
    window = build_window(conversation(), max_attached_turns=5)
    assert [m.message_id for m in window.messages][:2] == ["sys", "u1"]
    entries = to_openai(window.messages)
    assert type_errors(entries, list[ChatCompletionMessageParam]) == []
    tools = openai_tools([Tool("get_order", lambda id: id), Tool("refund", lambda order: order)])
    assert type_errors(tools, list[ChatCompletionToolParam]) == []
    assert request_errors({"model": "gpt-4o", "messages": entries, "tools": tools}) is None


def test_the_checks_catch_what_the_api_rejects() -> None:
    # The old output (an id on every message, a name on tool messages) fails both checks.
    bad = [{"role": "user", "content": "hi", "id": "u1"}]
    assert type_errors(bad, list[ChatCompletionMessageParam])
    assert request_errors({"model": "m", "messages": bad}) is not None
    tool_named = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c", "content": "x", "name": "f"},
    ]
    error = request_errors({"model": "m", "messages": tool_named})
    assert error is not None and error.param == "messages.[2].name"
    inline = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": None}}]}]
    assert type_errors(inline, list[ChatCompletionMessageParam])


def test_include_ids_round_trip_keeps_what_the_format_carries() -> None:
    history = conversation()
    visible = [m for m in history if m.model_visible]
    back = from_openai(to_openai(history, include_ids=True))
    assert [m.message_id for m in back] == [m.message_id for m in visible]
    assert back == [_carried(m) for m in visible]
    assert isinstance(back[0], SystemMessage) and back[0].role == "developer"
    assert to_openai(back) == to_openai(history)


def _carried(message: Message) -> Message:
    """What survives the format: no tool_name, is_error, turn_id, metadata, version or usage."""
    changes: dict[str, Any] = {"metadata": {}, "version": 0, "turn_id": None}
    if isinstance(message, ToolMessage):
        changes.update(tool_name=None, is_error=False)
    if isinstance(message, AiMessage):
        changes["usage"] = None
        changes["provider_items"] = ()  # Chat Completions has no place for them
        if message.text is None and not message.tool_calls and message.refusal is None:
            changes["text"] = ""  # the API needs content when there is nothing else
    return dataclasses.replace(message, **changes)


@settings(max_examples=300, deadline=None)
@given(histories())
def test_round_trip_on_generated_histories(history: list[Message]) -> None:
    visible = [m for m in history if m.model_visible]
    assert from_openai(to_openai(history, include_ids=True)) == [_carried(m) for m in visible]
    assert all("id" not in entry for entry in to_openai(history))


def test_a_tool_call_without_an_id_is_refused_both_ways() -> None:
    """An empty tool-call id has no OpenAI form: ``to_openai`` refuses it, naming the message,
    as ``from_openai`` refuses the entry it would make (so a round trip never fails half-way)."""
    history = [
        UserMessage("hi", message_id="u1"),
        AiMessage(None, (ToolCall("", "get_order", "{}"),), message_id="a1"),
    ]
    with pytest.raises(
        InvalidArgumentError,
        match=r"message 'a1' \(messages\[1\]\): tool call 'get_order' has no id",
    ):
        to_openai(history)
    entry = {
        "role": "assistant",
        "tool_calls": [
            {"id": "", "type": "function", "function": {"name": "get_order", "arguments": "{}"}}
        ],
    }
    with pytest.raises(InvalidArgumentError, match="a tool call has no id"):
        from_openai([entry])


def test_ui_messages_are_left_out_and_never_made() -> None:
    entries = to_openai(conversation(), include_ids=True)
    assert not {"ui1", "form1"} & {e["id"] for e in entries}
    assert all(m.model_visible for m in from_openai(entries))


def test_from_openai_keeps_developer_name_refusal_and_detail() -> None:
    messages = from_openai(
        [
            {"role": "developer", "content": "Be brief.", "name": "ops"},
            {
                "role": "system",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            },
            {
                "role": "user",
                "name": "bob",
                "content": [
                    {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}},
                ],
            },
            {"role": "assistant", "content": None, "refusal": "No.", "name": "bot"},
            {"role": "assistant", "content": [{"type": "refusal", "refusal": "Not that."}]},
            {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
        ]
    )
    system, joined, user, refusal, refusal_part, text_part = messages
    assert isinstance(system, SystemMessage)
    assert (system.role, system.name, system.text) == ("developer", "ops", "Be brief.")
    assert isinstance(joined, SystemMessage) and (joined.role, joined.text) == ("system", "a\nb")
    assert isinstance(user, UserMessage) and user.name == "bob"
    assert user.content == (ImagePart(uri="https://x/y.png", detail="low"),)
    assert isinstance(refusal, AiMessage)
    assert (refusal.text, refusal.refusal, refusal.name) == (None, "No.", "bot")
    assert isinstance(refusal_part, AiMessage)
    assert (refusal_part.text, refusal_part.refusal) == (None, "Not that.")
    assert isinstance(text_part, AiMessage) and text_part.text == "ok"


def test_from_openai_decodes_inline_media() -> None:
    (user,) = from_openai(
        [
            {
                "role": "user",
                "content": [
                    {
                        "type": "image_url",
                        "image_url": {
                            "url": "data:image/png;base64," + base64.b64encode(PNG).decode()
                        },
                    },
                    {
                        "type": "input_audio",
                        "input_audio": {"data": base64.b64encode(WAV).decode(), "format": "mp3"},
                    },
                    {
                        "type": "file",
                        "file": {
                            "file_data": base64.b64encode(b"raw").decode(),
                            "filename": "a.bin",
                        },
                    },
                ],
            }
        ]
    )
    assert isinstance(user, UserMessage)
    assert user.content == (
        ImagePart(mime_type="image/png", data=PNG),
        AudioPart(mime_type="audio/mpeg", data=WAV),
        FilePart(data=b"raw", name="a.bin"),
    )


def test_a_tool_message_name_from_an_older_file_becomes_the_tool_name() -> None:
    (tool,) = from_openai([{"role": "tool", "tool_call_id": "c1", "content": "x", "name": "get"}])
    assert isinstance(tool, ToolMessage) and tool.tool_name == "get"


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ({"content": "hi"}, "entry 1 has no role"),
        ({"role": "robot", "content": "hi"}, "entry 1: unknown role 'robot'"),
        ({"role": "function", "name": "f", "content": "x"}, "legacy 'function' role"),
        (
            {
                "role": "assistant",
                "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}],
            },
            "entry 1: a tool call has no id",
        ),
        (
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": "c",
                        "type": "function",
                        "function": {"name": "f", "arguments": {"a": 1}},
                    }
                ],
            },
            "entry 1: tool call 'c' arguments must be a JSON string",
        ),
        (
            {"role": "user", "content": [{"type": "video"}]},
            "entry 1 content[0]: unknown content part",
        ),
        (
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": None}}]},
            "entry 1 content[0] image_url: 'url'",
        ),
        (
            {
                "role": "tool",
                "tool_call_id": "c",
                "content": [{"type": "image_url", "image_url": {"url": "https://x"}}],
            },
            "takes only text parts",
        ),
        ({"role": "user", "content": "hi", "name": "a b"}, "entry 1: message"),
        ({"role": "user", "content": "hi", "id": 7}, "entry 1: 'id' is a int"),
        ({"role": "user"}, "entry 1: a user message needs"),
        (
            {"role": "assistant", "function_call": {"name": "f", "arguments": "{}"}},
            "'function_call' is not supported",
        ),
        (
            {
                "role": "user",
                "content": [
                    {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "ogg"}}
                ],
            },
            "wav or mp3",
        ),
        ("not an object", "entry 1 is not an object"),
    ],
)
def test_malformed_entries_name_their_index(entry: Any, problem: str) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        from_openai([{"role": "user", "content": "first"}, entry])
    assert isinstance(raised.value, OpenAIFormatError)
    assert problem in str(raised.value)


def test_inline_content_over_the_cap_is_refused_naming_the_entry() -> None:
    big = base64.b64encode(bytes(300 * 1024)).decode()
    with pytest.raises(ContentTooLargeError, match=r"^entry 0: "):
        from_openai(
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{big}"}}
                    ],
                }
            ]
        )


@pytest.mark.parametrize(
    ("part", "problem"),
    [
        (AudioPart(data=b"x", mime_type="audio/ogg"), "audio format 'audio/ogg' cannot be sent"),
        (AudioPart(uri="https://x/a.wav", mime_type="audio/wav"), "audio by reference"),
        (FilePart(uri="https://x/a.pdf"), "is a URL"),
        (ImagePart(data=b"not an image"), "needs a mime_type"),
    ],
)
def test_parts_the_api_cannot_take_name_the_message(part: Any, problem: str) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        to_openai([UserMessage("a", message_id="u0"), UserMessage((part,), message_id="u1")])
    assert "message 'u1' (messages[1]) content[0]" in str(raised.value)
    assert problem in str(raised.value)


def test_audio_format_from_a_data_uri_and_the_file_name() -> None:
    data_uri = "data:audio/wav;base64," + base64.b64encode(WAV).decode()
    (entry,) = to_openai(
        [
            UserMessage(
                (AudioPart(uri=data_uri, mime_type="audio/wav"), AudioPart(data=WAV, name="n.MP3"))
            )
        ]
    )
    assert [p["input_audio"]["format"] for p in entry["content"]] == ["wav", "mp3"]  # type: ignore[index, union-attr]


def test_openai_tools_are_function_tools() -> None:
    def get_order(order_id: str) -> str:
        """Look an order up."""
        return order_id

    assert openai_tools([Tool("get_order", get_order)]) == [
        {
            "type": "function",
            "function": {
                "name": "get_order",
                "parameters": {
                    "type": "object",
                    "properties": {"order_id": {"type": "string"}},
                    "required": ["order_id"],
                },
                "description": "Look an order up.",
            },
        }
    ]


def test_subclasses_convert_as_their_library_class() -> None:
    """`to_openai` looks a library class up by its exact type; a subclass takes the isinstance
    match and gives the same entry, and anything else is refused naming its index."""
    call = ToolCall("c1", "get_order", "{}")

    def tagged_class(base: type) -> Any:
        """A subclass of ``base`` with one more field."""
        field = ("tag", str, dataclasses.field(default=""))
        return dataclasses.make_dataclass(
            f"Tagged{base.__name__}", [field], bases=(base,), frozen=True, slots=True
        )

    TaggedSystem, TaggedUser, TaggedAi, TaggedTool, TaggedAction = map(
        tagged_class, (SystemMessage, UserMessage, AiMessage, ToolMessage, AgentActionMessage)
    )

    plain = [
        SystemMessage("rules", message_id="s", name="ops"),
        UserMessage("hi", message_id="u", name="ann"),
        AiMessage("checking", (call,), message_id="a"),
        ToolMessage("c1", "shipped", tool_name="get_order", message_id="t"),
    ]
    tagged = [
        TaggedSystem("rules", message_id="s", name="ops", tag="x"),
        TaggedUser("hi", message_id="u", name="ann", tag="x"),
        TaggedAi("checking", (call,), message_id="a", tag="x"),
        TaggedTool("c1", "shipped", tool_name="get_order", message_id="t", tag="x"),
        TaggedAction(message_id="ui", tag="x"),
    ]
    assert to_openai(tagged) == to_openai(plain)
    assert to_openai(tagged, include_ids=True) == to_openai(plain, include_ids=True)
    with pytest.raises(InvalidMessageTypeError, match=r"messages\[1\] is not a Message: got dict"):
        to_openai([plain[1], {"role": "user", "content": "hi"}])  # type: ignore[list-item]
