"""`AiMessage.provider_items` (SPEC §23): validated, kept with their message, counted by every
estimator on both cores from their JSON text, stored losslessly by every store."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from agentctx_fast import (
    AiMessage,
    HeuristicTokenEstimator,
    InvalidArgumentError,
    InvalidMessageTypeError,
    SerializationError,
    ToolCall,
    ToolMessage,
    UserMessage,
    build_window,
)
from agentctx_fast.core._backend import core
from agentctx_fast.core._reference import api as reference
from agentctx_fast.core._reference.tokens import count_text
from agentctx_fast.memory import ChatMemory
from agentctx_fast.stores import JsonAgentStoreSerializer
from conftest import native_or_skip
from store_fixtures import (
    every_store_kind,  # noqa: F401  (store_kind: every store)
    new_conversation_id,
)

REASONING = {
    "type": "reasoning",
    "id": "rs_68a1",
    "summary": [{"type": "summary_text", "text": "Look the order up first."}],
    "encrypted_content": "gAAAAABoq" + "Zx9" * 200,
    "status": "completed",
}
THINKING = {"type": "thinking", "thinking": "用户要查订单 ORD-1。", "signature": "EqQBCkYIBxgC"}
WEB_SEARCH = {
    "type": "web_search_call",
    "id": "ws_1",
    "status": "completed",
    "action": {"type": "search", "query": "ORD-1 carrier"},
}


def reply(**kwargs: Any) -> AiMessage:
    return AiMessage(
        None,
        (ToolCall("call_1", "get_order", '{"id": "ORD-1"}'),),
        message_id="a1",
        **kwargs,
    )


def test_items_are_plain_json_copies_in_order() -> None:
    source = {"type": "reasoning", "id": "rs_1", "summary": ({"type": "summary_text"},)}
    message = reply(provider_items=[source, THINKING])
    source["id"] = "changed later"
    assert message.provider_items == (
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text"}]},
        THINKING,
    )
    assert type(message.provider_items) is tuple
    assert reply().provider_items == ()
    assert message == reply(provider_items=(dict(message.provider_items[0]), THINKING))
    assert message != reply(provider_items=(THINKING,))
    assert dataclasses.replace(message, text="x").provider_items == message.provider_items


@pytest.mark.parametrize(
    ("items", "error", "problem"),
    [
        ("abc", InvalidMessageTypeError, "provider_items must be a tuple"),
        ({"type": "reasoning"}, InvalidMessageTypeError, "provider_items must be a tuple"),
        ([["reasoning"]], InvalidMessageTypeError, "provider_items[0] must be a JSON object"),
        ([THINKING, 3], InvalidMessageTypeError, "provider_items[1] must be a JSON object"),
        ([{"n": float("nan")}], InvalidArgumentError, "is not valid JSON"),
        ([{1: "x"}], InvalidArgumentError, "key 1 is not a str"),
        ([{"blob": b"raw"}], InvalidMessageTypeError, "bytes, which is not JSON"),
        ([{"when": object()}], InvalidMessageTypeError, "which is not JSON"),
    ],
)
def test_bad_items_are_a_typed_error(items: Any, error: type[Exception], problem: str) -> None:
    with pytest.raises(error, match=r"provider_items|JSON|key") as caught:
        reply(provider_items=items)
    assert problem in str(caught.value)


def test_a_cycle_is_refused_not_a_recursion_error() -> None:
    loop: dict[str, Any] = {"type": "x"}
    loop["self"] = loop
    with pytest.raises(InvalidArgumentError, match="nested deeper"):
        reply(provider_items=[loop])


def test_every_estimator_counts_the_items_from_their_json_text() -> None:
    bare = reply()
    dressed = reply(provider_items=(REASONING, THINKING))
    text = dressed.provider_text
    assert json.loads(text) == [REASONING, THINKING]
    extra = count_text(text)
    assert extra > 100
    assert core.message_tokens([dressed]) == [core.message_tokens([bare])[0] + extra]
    assert reference.message_tokens([dressed]) == core.message_tokens([dressed])
    for encoding in ("cl100k_base", "o200k_base"):
        estimator = HeuristicTokenEstimator(encoding)
        gained = estimator.estimate([dressed]) - estimator.estimate([bare])
        assert gained == estimator.count_text(text)


def test_both_cores_count_the_same() -> None:
    native = native_or_skip()
    history = [
        UserMessage("where is ORD-1?", message_id="u1"),
        reply(provider_items=(REASONING, WEB_SEARCH)),
        ToolMessage("call_1", "shipped", message_id="t1"),
        AiMessage("shipped", message_id="f1", provider_items=(THINKING,)),
    ]
    assert native.message_tokens(history) == reference.message_tokens(history)
    assert native.message_tokens(history)[1] > native.message_tokens([reply()])[0]


def test_the_estimator_cache_tells_messages_with_other_items_apart() -> None:
    """Two messages with one id and version but other provider items are counted apart."""
    estimator = HeuristicTokenEstimator()
    bare = estimator.estimate([reply()])
    assert estimator.estimate([reply(provider_items=(REASONING,))]) > bare


def test_a_window_keeps_the_items_with_their_message() -> None:
    history = [
        UserMessage("where is ORD-1?", message_id="u1"),
        reply(provider_items=(REASONING,)),
        ToolMessage("call_1", "shipped", message_id="t1"),
        AiMessage("shipped", message_id="f1"),
    ]
    window = build_window(history)
    assert window.messages[1].provider_items == (REASONING,)  # type: ignore[union-attr]
    assert window.estimated_tokens == sum(reference.message_tokens(window.messages))
    history[1] = reply()
    assert window.estimated_tokens > build_window(history).estimated_tokens


def test_the_serializer_round_trips_and_refuses_corrupt_records() -> None:
    serializer = JsonAgentStoreSerializer()
    message = reply(provider_items=(REASONING, THINKING, WEB_SEARCH))
    assert serializer.loads(serializer.dumps(message)) == message
    record = json.loads(serializer.dumps(message))
    assert record["provider_items"] == [REASONING, THINKING, WEB_SEARCH]
    assert "provider_items" not in json.loads(serializer.dumps(reply()))  # earlier form kept
    for bad in ({"type": "x"}, [1], "items"):
        record["provider_items"] = bad
        with pytest.raises(SerializationError):
            serializer.loads(json.dumps(record).encode())


def test_every_store_keeps_the_items_losslessly(store: Any) -> None:
    memory: ChatMemory = store.chat_memory(new_conversation_id())
    messages = [
        UserMessage("where is ORD-1?", message_id="u1"),
        reply(provider_items=(REASONING, WEB_SEARCH)),
        ToolMessage("call_1", "shipped", message_id="t1"),
        AiMessage("shipped", message_id="f1", provider_items=(THINKING,)),
    ]
    for message in messages:
        memory.add_message(message)
    assert memory.get_messages() == messages
    assert memory.get_message("a1") == messages[1]
    updated = dataclasses.replace(messages[3], provider_items=(THINKING, REASONING))
    memory.update_message(updated, expected_version=0)
    assert memory.get_message("f1").provider_items == (THINKING, REASONING)  # type: ignore[union-attr]


class _OddText(AiMessage):
    """A subclass whose provider text is not a str."""

    @property
    def provider_text(self) -> str:
        return 5  # type: ignore[return-value]


def test_both_cores_read_a_subclass_the_same_way() -> None:
    native = native_or_skip()
    odd = _OddText("hi", message_id="o1", provider_items=(THINKING,))
    plain = _OddText("hi", message_id="o2")  # no items: provider_text is never read
    outcomes = []
    for module in (native, reference):
        with pytest.raises(InvalidMessageTypeError) as caught:
            module.message_tokens([plain, odd])
        outcomes.append(str(caught.value))
    assert outcomes[0] == outcomes[1]
    assert "messages[1].provider_text must be a str" in outcomes[0]
    assert native.message_tokens([plain]) == reference.message_tokens([plain])
