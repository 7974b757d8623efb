"""`Usage` on `AiMessage` and the OpenAI fields of messages: stored, outside the core (SPEC §18)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from hypothesis import given, settings

from agentctx_fast import (
    AiMessage,
    ImagePart,
    InvalidArgumentError,
    JsonAgentStoreSerializer,
    Message,
    SerializationError,
    SystemMessage,
    Usage,
    UserMessage,
    build_window,
)
from agentctx_fast.core._reference import api as reference
from conftest import native_or_skip, select_args
from strategies import histories


def _dressed(message: Message, index: int) -> Message:
    """The message with the new optional fields set, where its class has them."""
    if isinstance(message, AiMessage):
        return dataclasses.replace(
            message,
            usage=Usage(index, 1, index + 1),
            refusal="no" if index % 3 else None,
            name="bot",
        )
    if isinstance(message, UserMessage):
        return dataclasses.replace(message, name=f"user{index % 2}")
    if isinstance(message, SystemMessage):
        return dataclasses.replace(message, role="developer", name="ops")
    return message


def _select(core: Any, history: list[Any], options: dict[str, Any]) -> Any:
    """The window's message ids and counts, or the error: comparable across dressings."""
    try:
        window = _call_select(core, history, options)
    except Exception as error:
        return ("error", type(error), str(error))
    messages, *rest = tuple(window)  # a plain tuple from Rust, a NamedTuple from the reference
    return [(type(m).__name__, m.message_id) for m in messages], rest


def _call_select(core: Any, history: list[Any], options: dict[str, Any]) -> Any:
    return core.select(*select_args(core, history, options))


@settings(max_examples=300, deadline=None)
@given(histories())
def test_both_cores_ignore_the_new_fields(history: list[Message]) -> None:
    native = native_or_skip()
    dressed = [_dressed(m, i) for i, m in enumerate(history)]
    options = {"max_attached_tokens": 200, "compact_completed_tool_turns": True}
    assert _select(native, dressed, options) == _select(reference, dressed, options)
    for core in (native, reference):
        assert _select(core, dressed, options) == _select(core, history, options)
        assert core.message_tokens(dressed) == core.message_tokens(history)
        assert core.validate(dressed) == core.validate(history)


def test_windows_keep_the_dressed_messages_themselves() -> None:
    usage = Usage(120, 30, 150)
    history = [
        SystemMessage("rules", role="developer", message_id="s"),
        UserMessage("hi", name="alice", message_id="u1"),
        AiMessage("hello", usage=usage, name="bot", message_id="a1"),
        UserMessage("again", message_id="u2"),
    ]
    window = build_window(history)
    assert window.messages == history
    assert window.messages[2].usage is usage  # type: ignore[attr-defined]
    plain = build_window([dataclasses.replace(m, **_plain(m)) for m in history])
    assert plain.estimated_tokens == window.estimated_tokens


def _plain(message: Message) -> dict[str, Any]:
    if isinstance(message, AiMessage):
        return {"usage": None, "name": None}
    if isinstance(message, (UserMessage, SystemMessage)):
        return {"name": None}
    return {}


@pytest.mark.parametrize("values", [(-1, 0, 0), (1, True, 2), (1, 2, 3.0), (None, 0, 0)])
def test_usage_refuses_what_is_not_a_count(values: tuple[Any, ...]) -> None:
    with pytest.raises(InvalidArgumentError, match="Usage"):
        Usage(*values)


def test_the_new_fields_are_checked() -> None:
    with pytest.raises(InvalidArgumentError, match="role must be 'system' or 'developer'"):
        SystemMessage("x", role="assistant")
    with pytest.raises(InvalidArgumentError, match="detail"):
        ImagePart(uri="https://x", detail="ultra")
    with pytest.raises(InvalidArgumentError, match="name"):
        UserMessage("x", name="two words")
    with pytest.raises(TypeError, match="usage must be a Usage"):
        AiMessage("x", usage={"prompt_tokens": 1})  # type: ignore[arg-type]


def test_serializer_round_trips_usage_and_the_openai_fields() -> None:
    serializer = JsonAgentStoreSerializer()
    messages = [
        AiMessage("hi", usage=Usage(10, 2, 12), refusal="no", name="bot", message_id="a1"),
        UserMessage((ImagePart(uri="https://x/y.png", detail="low"),), name="al", message_id="u1"),
        SystemMessage("rules", role="developer", name="ops", message_id="s1"),
    ]
    for message in messages:
        assert serializer.loads(serializer.dumps(message)) == message


def test_records_without_the_new_fields_are_unchanged_and_still_load() -> None:
    serializer = JsonAgentStoreSerializer()
    old = (
        b'{"type":"ai","message_id":"a1","metadata":{},"version":0,"turn_id":null,'
        b'"text":"hi","tool_calls":[]}'
    )
    message = serializer.loads(old)
    assert isinstance(message, AiMessage) and message.usage is None and message.refusal is None
    assert serializer.dumps(message) == old
    system = serializer.dumps(SystemMessage("s", message_id="s1"))
    assert b"role" not in system and b"name" not in system


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": 1, "completion_tokens": 2},
        {"prompt_tokens": -1, "completion_tokens": 0, "total_tokens": 0},
        {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2, "x": 1},
        [1, 2, 3],
    ],
)
def test_a_bad_stored_usage_is_a_serialization_error(usage: Any) -> None:
    record = {
        "type": "ai",
        "message_id": "a1",
        "metadata": {},
        "version": 0,
        "turn_id": None,
        "text": "hi",
        "tool_calls": [],
        "usage": usage,
    }
    with pytest.raises(SerializationError):
        JsonAgentStoreSerializer().loads(json.dumps(record).encode())
