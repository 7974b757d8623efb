"""Provider content blocks in LangChain messages are classified and carried, never refused
(SPEC §23): text is text, tool-call blocks are covered by the tool calls, thinking, reasoning
and hosted-tool blocks are provider items, media are parts; a message read comes back as it
was. Run on both cores (AGENTCTX_FAST_BACKEND=rust / python)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from langchain_core import messages as lc
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel

from agentctx_fast import (
    AiMessage,
    SystemMessage,
    ToolMessage,
    UserMessage,
    build_window,
    validate_tool_protocol,
)
from agentctx_fast.integrations.langchain import (
    LANGCHAIN_METADATA_KEY,
    LangChainChatModel,
    from_langchain,
    to_langchain,
    window_messages,
)
from langchain_blocks import CASES, LOSSY

IDS = [case[0] for case in CASES]


@pytest.mark.parametrize(("name", "message", "expected"), CASES, ids=IDS)
def test_each_provider_shape_is_classified(
    name: str, message: Any, expected: dict[str, Any]
) -> None:
    (ours,) = from_langchain([message])
    assert type(ours).__name__ == expected["kind"]
    assert ours.message_id == message.id
    if "text" in expected:
        assert ours.text == expected["text"]  # type: ignore[attr-defined]
    if isinstance(ours, AiMessage):
        assert [item["type"] for item in ours.provider_items] == expected["items"]
        assert [call.id for call in ours.tool_calls] == expected["calls"]
        assert ours.refusal == expected.get("refusal")
    if isinstance(ours, UserMessage):
        assert [type(p).__name__ for p in ours.content] == expected["parts"]


@pytest.mark.parametrize(("name", "message", "expected"), CASES, ids=IDS)
def test_a_message_read_comes_back_as_it_was(name: str, message: Any, expected: Any) -> None:
    (back,) = to_langchain(from_langchain([message]))
    if name in LOSSY:  # the call it made only in content is listed in tool_calls as well
        assert isinstance(back, lc.AIMessage) and back.content == message.content
        assert [c["id"] for c in back.tool_calls] == expected["calls"]
        return
    assert type(back) is type(message)
    assert back == message
    assert back.content_blocks == message.content_blocks


def test_the_way_back_follows_an_updated_message() -> None:
    """Kept content is used only while it reads as the message's fields: an edit wins."""
    message = CASES[0][1]
    (ours,) = from_langchain([message])
    assert LANGCHAIN_METADATA_KEY in ours.metadata
    edited = dataclasses.replace(ours, text="Edited.")
    (back,) = to_langchain([edited])
    assert isinstance(back, lc.AIMessage) and back.text == "Edited."
    assert back.content[0] == message.content[0]  # the thinking block still first
    assert back.response_metadata == message.response_metadata


def _conversation() -> list[Any]:
    """One turn per case: each AI case with a result for each call it makes, each tool case
    after the call it answers, each user case starting a turn."""
    history: list[Any] = [CASES[-1][1]]  # the system message
    for name, message, expected in CASES[:-1]:
        if isinstance(message, lc.HumanMessage):
            history += [message, lc.AIMessage("ok", id=f"{name}-final")]
            continue
        history.append(lc.HumanMessage(f"question {name}", id=f"{name}-q"))
        if isinstance(message, lc.ToolMessage):
            call = {"name": "get_order", "args": {}, "id": message.tool_call_id}
            history.append(lc.AIMessage("", tool_calls=[call], id=f"{name}-call"))
            history.append(message)
        else:
            history.append(message)
            history += [
                lc.ToolMessage("shipped", tool_call_id=call_id, id=f"{name}-r{i}")
                for i, call_id in enumerate(expected["calls"])
            ]
        history.append(lc.AIMessage("done", id=f"{name}-final"))
    history.append(lc.HumanMessage("and now?", id="last"))
    return history


def test_a_window_over_every_shape_keeps_whole_turns_and_pairs() -> None:
    history = _conversation()
    whole = window_messages(history, max_attached_turns=100)
    assert [m.id for m in whole] == [m.id for m in history]
    assert all(a is b for a, b in zip(whole, history, strict=True))  # the caller's objects
    window = build_window(from_langchain(history), max_attached_turns=100)
    assert window.repairs == [] and validate_tool_protocol(window.messages) == []
    small = window_messages(history, max_attached_turns=3)
    assert small[0] is history[0] and isinstance(small[1], lc.HumanMessage)
    assert sum(isinstance(m, lc.HumanMessage) for m in small) == 4
    assert validate_tool_protocol(from_langchain(small)) == []


def test_provider_items_are_counted_with_their_message() -> None:
    thinking = CASES[0][1]
    bare = thinking.model_copy(update={"content": thinking.content[1:], "id": "bare"})
    question = lc.HumanMessage("where is ORD-7?", id="q")
    results = [lc.ToolMessage("shipped", tool_call_id=thinking.tool_calls[0]["id"], id="r")]
    with_items = build_window(from_langchain([question, thinking, *results]))
    without = build_window(from_langchain([question, bare, *results]))
    assert with_items.estimated_tokens > without.estimated_tokens + 20  # the signature counts


def test_a_model_reply_with_thinking_is_carried() -> None:
    reply = CASES[0][1]
    model = LangChainChatModel(FakeMessagesListChatModel(responses=[reply]))
    answer = model.chat([UserMessage("where is ORD-7?")], ())
    assert [item["type"] for item in answer.provider_items] == ["thinking"]
    assert [call.id for call in answer.tool_calls] == ["toolu_01TS5h8LNo7p5imcG7yRiaUM"]
    (back,) = to_langchain([answer])
    assert back.content == reply.content


def test_a_system_message_object_is_the_windows_own() -> None:
    system = lc.SystemMessage("Be brief.", id="sys")
    history = [lc.HumanMessage("q1", id="u1"), lc.AIMessage("a1", id="a1"),
               lc.HumanMessage("q2", id="u2")]  # fmt: skip
    window = window_messages(history, system=system, max_attached_turns=0)
    assert window[0] is system and [m.id for m in window] == ["sys", "u2"]
    with pytest.raises(Exception, match="system must be a system message"):
        window_messages(history, system=lc.HumanMessage("x"))


def test_unknown_window_options_are_named() -> None:
    with pytest.raises(Exception, match="unknown window option 'max_turns'"):
        window_messages([lc.HumanMessage("q")], max_turns=3)


def test_what_is_kept_is_json_for_every_store() -> None:
    """Values a store cannot hold (a parsed pydantic object) are left out, not refused."""
    message = lc.AIMessage(
        "{}", additional_kwargs={"parsed": object(), "x": 1}, response_metadata={"n": object()}
    )
    (ours,) = from_langchain([message])
    assert ours.metadata == {LANGCHAIN_METADATA_KEY: {"additional_kwargs": {"x": 1}}}
    assert isinstance(ours, AiMessage) and isinstance(from_langchain([CASES[-1][1]])[0],
                                                       SystemMessage)  # fmt: skip
    assert isinstance(from_langchain([CASES[10][1]])[0], ToolMessage)
