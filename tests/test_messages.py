"""Messages (SPEC §3) and OpenAI conversion (SPEC §15)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings

from agentctx_fast import (
    MAX_INLINE_BYTES,
    AgentActionMessage,
    AgentCtxError,
    AiMessage,
    ContentTooLargeError,
    ImagePart,
    InvalidMessageTypeError,
    OpenAIFormatError,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    UserMessage,
    from_openai,
    to_openai,
)
from strategies import histories


def test_messages_are_frozen_with_generated_ids() -> None:
    a, b = UserMessage("hi"), UserMessage("hi")
    assert len(a.message_id) == 32 and a.message_id != b.message_id
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.content = "changed"  # type: ignore[misc]
    assert a.version == 0 and a.turn_id is None and a.metadata == {}


def test_model_visible_per_class() -> None:
    assert UserMessage("x").model_visible and AiMessage("x").model_visible
    assert not AgentActionMessage().model_visible


def test_multimodal_text_and_inline_cap() -> None:
    message = UserMessage((TextPart("look"), ImagePart(uri="s3://b/k.png"), TextPart("here")))
    assert message.text == "look\nhere"
    ImagePart(data=b"x" * MAX_INLINE_BYTES)
    with pytest.raises(ContentTooLargeError, match="over the"):
        ImagePart(data=b"x" * (MAX_INLINE_BYTES + 1))


def test_bad_fields_are_typed_errors() -> None:
    with pytest.raises(InvalidMessageTypeError, match="arguments"):
        ToolCall("c1", "f", {"a": 1})  # type: ignore[arg-type]
    with pytest.raises(AgentCtxError, match="version"):
        UserMessage("x", version=-1)
    with pytest.raises(InvalidMessageTypeError, match=r"tool_calls\[0\]"):
        AiMessage(None, ("not a call",))  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(histories())
def test_openai_round_trip_keeps_every_field_it_can_carry(history: list) -> None:
    visible = [m for m in history if m.model_visible]
    back = from_openai(to_openai(history, include_ids=True))
    assert len(back) == len(visible)
    for original, copy in zip(visible, back, strict=True):
        assert type(copy) is type(original)
        assert copy.message_id == original.message_id
        if isinstance(original, AiMessage):
            assert isinstance(copy, AiMessage)
            assert copy.tool_calls == original.tool_calls
            if original.text is None and not original.tool_calls:
                assert copy.text == ""  # the API needs content when there is nothing else
            else:
                assert copy.text == original.text
        elif isinstance(original, ToolMessage):
            assert isinstance(copy, ToolMessage)
            assert (copy.tool_call_id, copy.text) == (original.tool_call_id, original.text)
        elif isinstance(original, (UserMessage, SystemMessage)):
            assert copy.text == original.text  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("entries", "needle"),
    [
        (
            [{"role": "user", "content": "a"}, {"role": "wizard", "content": "x"}],
            "entry 1: unknown role",
        ),
        (
            [{"role": "assistant", "tool_calls": [{"function": {"name": "f"}}]}],
            "entry 0: a tool call has no id",
        ),
        (
            [
                {
                    "role": "assistant",
                    "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": {}}}],
                }
            ],
            "entry 0: tool call 'c' arguments",
        ),
        (["nope"], "entry 0 is not an object"),
    ],
)
def test_from_openai_names_the_bad_entry(entries: list, needle: str) -> None:
    with pytest.raises(OpenAIFormatError, match=needle):
        from_openai(entries)


def test_to_openai_leaves_ui_messages_out() -> None:
    history = [UserMessage("a", message_id="u"), AgentActionMessage(message_id="x")]
    assert to_openai(history, include_ids=True) == [{"role": "user", "content": "a", "id": "u"}]
    assert to_openai(history) == [{"role": "user", "content": "a"}]


@settings(max_examples=50, deadline=None)
@given(histories())
def test_messages_pickle_and_copy_at_every_protocol(history: list[object]) -> None:
    """A message's state is its fields, whatever its base holds: it pickles at every protocol
    (0 and 1 included) and copies to an equal message of the same class."""
    import copy
    import pickle

    for message in history:
        for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
            again = pickle.loads(pickle.dumps(message, protocol=protocol))
            assert type(again) is type(message) and again == message, protocol
        for how in (copy.copy, copy.deepcopy):
            assert how(message) == message
