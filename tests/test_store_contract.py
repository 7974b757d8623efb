"""The `ChatMemory` and compression-state contract, run against every store (SPEC §10, §12)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from agentctx_fast import (
    AgentActionMessage,
    AgentFormMessage,
    AiMessage,
    DuplicateMessageError,
    InvalidArgumentError,
    InvalidMessageTypeError,
    Message,
    MessageNotFoundError,
    ToolCall,
    ToolMessage,
    UserMessage,
    VersionConflictError,
)
from agentctx_fast.compression.coordinator import CompressionState
from agentctx_fast.memory import ChatMemory
from store_fixtures import (
    every_store_kind,  # noqa: F401  (store_kind: every store)
    new_conversation_id,
)


def timeline(n: int, prefix: str = "m") -> list[Message]:
    """``n`` messages; every third one is a UI message."""
    out: list[Message] = []
    for i in range(n):
        if i % 3 == 2:
            out.append(AgentActionMessage(payload={"i": i}, message_id=f"{prefix}{i}"))
        elif i % 3 == 0:
            out.append(UserMessage(f"question {i}", message_id=f"{prefix}{i}"))
        else:
            out.append(AiMessage(f"answer {i}", message_id=f"{prefix}{i}"))
    return out


def ids(messages: list[Message]) -> list[str]:
    return [m.message_id for m in messages]


@pytest.fixture
def memory(store: Any) -> ChatMemory:
    chat_memory: ChatMemory = store.chat_memory(new_conversation_id())
    return chat_memory


def test_add_and_read_back_every_field(memory: ChatMemory) -> None:
    call = ToolCall("call_1", "lookup_order", '{"order_id": "ORD-2024-001"}')
    messages = [
        UserMessage("订单 ORD-2024-001 在哪里？", message_id="u1", metadata={"tenant": "t1"}),
        AiMessage(None, (call,), message_id="a1", turn_id="t-1"),
        ToolMessage("call_1", '{"status": "shipped"}', tool_name="lookup_order", message_id="r1"),
        AgentFormMessage(payload={"approve": None}, status="pending", message_id="f1"),
    ]
    for message in messages:
        memory.add_message(message)
    assert memory.get_messages() == messages
    assert memory.get_message("a1") == messages[1]
    assert memory.message_count() == 4


def test_add_if_absent_is_idempotent_by_id(memory: ChatMemory) -> None:
    first = UserMessage("one", message_id="same")
    assert memory.add_message_if_absent(first) is True
    assert memory.add_message_if_absent(UserMessage("two", message_id="same")) is False
    assert memory.get_messages() == [first]
    with pytest.raises(DuplicateMessageError, match="'same'"):
        memory.add_message(UserMessage("three", message_id="same"))
    assert memory.get_messages() == [first]


@pytest.mark.parametrize(
    ("count", "offset"),
    [(None, 0), (3, 0), (3, 2), (1, 9), (5, 8), (20, 0), (0, 0), (4, 10), (None, 4)],
)
def test_get_messages_pages_from_the_newest(memory: ChatMemory, count: Any, offset: int) -> None:
    messages = timeline(10)
    for message in messages:
        memory.add_message(message)
    end = max(len(messages) - offset, 0)
    start = 0 if count is None else max(end - count, 0)
    assert ids(memory.get_messages(count, offset=offset)) == ids(messages[start:end])


@pytest.mark.parametrize("count", [None, 0, 1, 4, 7, 100])
def test_get_model_messages_drops_ui_messages_first(memory: ChatMemory, count: Any) -> None:
    messages = timeline(11)
    for message in messages:
        memory.add_message(message)
    visible = [m for m in messages if m.model_visible]
    expected = visible if count is None else visible[len(visible) - count :] if count else []
    assert ids(memory.get_model_messages(count)) == ids(expected)


def test_default_get_model_messages_pages_past_ui_runs() -> None:
    # The base class's default implementation, used by custom stores, reads page by page.
    from agentctx_fast.memory import InMemoryChatMemory

    class PagedOnly(InMemoryChatMemory):
        get_model_messages = ChatMemory.get_model_messages

    memory = PagedOnly()
    messages = [*timeline(5), *[AgentActionMessage(message_id=f"ui{i}") for i in range(600)]]
    for message in messages:
        memory.add_message(message)
    assert ids(memory.get_model_messages(2)) == ["m3", "m4"]
    assert ids(memory.get_model_messages()) == ["m0", "m1", "m3", "m4"]


def test_get_message_unknown_is_none(memory: ChatMemory) -> None:
    memory.add_message(UserMessage("x", message_id="u1"))
    assert memory.get_message("nope") is None


def test_update_message_compare_and_set(memory: ChatMemory) -> None:
    form = AgentFormMessage(payload={"tool_call_id": "c1"}, status="pending", message_id="f1")
    memory.add_message(form)
    approved = replace(form, status="approved")
    stored = memory.update_message(approved, expected_version=0)
    assert stored.version == 1
    assert stored.status == "approved"
    assert memory.get_message("f1") == stored
    with pytest.raises(VersionConflictError, match="'f1' is at version 1, not 0"):
        memory.update_message(replace(form, status="refused"), expected_version=0)
    assert memory.get_message("f1") == stored
    again = memory.update_message(replace(form, status="refused"), expected_version=1)
    assert again.version == 2
    assert ids(memory.get_messages()) == ["f1"]


def test_update_unknown_message(memory: ChatMemory) -> None:
    with pytest.raises(MessageNotFoundError, match="'ghost'"):
        memory.update_message(UserMessage("x", message_id="ghost"), expected_version=0)


def test_update_cannot_change_the_message_type(memory: ChatMemory) -> None:
    memory.add_message(AgentFormMessage(message_id="f1"))
    with pytest.raises(InvalidArgumentError, match="AgentFormMessage 'f1'"):
        memory.update_message(UserMessage("x", message_id="f1"), expected_version=0)
    assert memory.get_messages() == [AgentFormMessage(message_id="f1")]


def test_update_keeps_position_and_visibility(memory: ChatMemory) -> None:
    messages = timeline(6)
    for message in messages:
        memory.add_message(message)
    memory.update_message(replace(messages[1], text="edited"), expected_version=0)  # type: ignore[call-arg]
    assert ids(memory.get_messages()) == ids(messages)
    assert ids(memory.get_model_messages()) == ids([m for m in messages if m.model_visible])


@pytest.mark.parametrize(
    ("count", "offset"), [(-1, 0), (1, -1), (True, 0), (1.5, 0), ("3", 0), (1, None)]
)
def test_bad_page_arguments(memory: ChatMemory, count: Any, offset: Any) -> None:
    with pytest.raises(InvalidArgumentError):
        memory.get_messages(count, offset=offset)


def test_java_order_offset_count_fails_loudly(memory: ChatMemory) -> None:
    for message in timeline(4):
        memory.add_message(message)
    with pytest.raises(TypeError):
        memory.get_messages(0, 50)  # type: ignore[misc]


def test_bad_arguments_write_nothing(memory: ChatMemory) -> None:
    with pytest.raises(InvalidMessageTypeError):
        memory.add_message_if_absent("not a message")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        memory.get_model_messages(-2)
    memory.add_message(UserMessage("x", message_id="u1"))
    with pytest.raises(InvalidArgumentError):
        memory.update_message(UserMessage("y", message_id="u1"), expected_version=-1)
    assert memory.get_messages() == [UserMessage("x", message_id="u1")]


def test_conversations_are_separate(store: Any) -> None:
    first, second = new_conversation_id(), new_conversation_id()
    store.chat_memory(first).add_message(UserMessage("a", message_id="u1"))
    store.chat_memory(second).add_message(UserMessage("b", message_id="u1"))
    assert [m.text for m in store.chat_memory(first).get_messages()] == ["a"]
    assert [m.text for m in store.chat_memory(second).get_messages()] == ["b"]
    provider = store.chat_memory_provider()
    assert provider(first).get_message("u1").text == "a"


@pytest.mark.parametrize("conversation_id", ["", None, 7])
def test_bad_conversation_id(store: Any, conversation_id: Any) -> None:
    with pytest.raises(InvalidArgumentError):
        store.chat_memory(conversation_id)


def test_clear_exists_and_empties_only_its_conversation(store: Any) -> None:
    keep, wipe = new_conversation_id(), new_conversation_id()
    store.chat_memory(keep).add_message(UserMessage("a", message_id="u1"))
    store.chat_memory(wipe).add_message(UserMessage("b", message_id="u1"))
    store.chat_memory(wipe).clear()
    assert store.chat_memory(wipe).get_messages() == []
    assert store.chat_memory(wipe).add_message_if_absent(UserMessage("b", message_id="u1"))
    assert len(store.chat_memory(keep).get_messages()) == 1


def test_concurrent_add_if_absent_has_one_winner(store: Any) -> None:
    conversation_id = new_conversation_id()
    memory = store.chat_memory(conversation_id)

    def add(i: int) -> bool:
        return bool(memory.add_message_if_absent(UserMessage(f"copy {i}", message_id="once")))

    with ThreadPoolExecutor(16) as pool:
        outcomes = list(pool.map(add, range(16)))
    assert outcomes.count(True) == 1
    assert len(memory.get_messages()) == 1
    assert memory.message_count() == 1


def test_compression_state_compare_and_set(store: Any) -> None:
    states = store.compression_state_store()
    conversation_id = new_conversation_id()
    assert states.load(conversation_id) is None
    summary = (UserMessage("summary", message_id="s-u"), AiMessage("ok", message_id="s-a"))
    when = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
    first = CompressionState(
        conversation_id,
        version=42,  # ignored: a save stores expected_version + 1
        compression_version=1,
        covered_until_message_id="a7",
        summary=summary,
        covered_tokens=900,
        covered_turns=3,
        updated_at=when,
    )
    assert states.save(first, 1) is False  # nothing stored yet: only 0 may win
    assert states.save(first, 0) is True
    assert states.load(conversation_id) == replace(first, version=1)
    assert states.save(replace(first, covered_turns=99), 0) is False
    assert states.load(conversation_id) == replace(first, version=1)
    second = replace(first, compression_version=2, covered_until_message_id="a9")
    assert states.save(second, 1) is True
    assert states.load(conversation_id) == replace(second, version=2)
    assert states.save(second, 1) is False
    assert states.load(new_conversation_id()) is None


def test_compression_state_bad_arguments(store: Any) -> None:
    states = store.compression_state_store()
    with pytest.raises(InvalidArgumentError):
        states.save(CompressionState("c"), -1)
    with pytest.raises(InvalidMessageTypeError):
        states.save("state", 0)


def test_add_messages_if_absent_is_one_batch_idempotent_per_message(memory: ChatMemory) -> None:
    messages = timeline(7)
    memory.add_message(messages[2])
    first = memory.add_messages_if_absent([*messages[:5], messages[0]])
    assert first == [True, True, False, True, True, False]  # stored, then repeated in the batch
    assert memory.add_messages_if_absent(messages) == [False] * 5 + [True, True]
    assert memory.add_messages_if_absent([]) == []
    order = [messages[2], messages[0], messages[1], messages[3], messages[4], *messages[5:]]
    assert ids(memory.get_messages()) == ids(order)
    assert ids(memory.get_model_messages()) == ids([m for m in order if m.model_visible])
    assert memory.message_count() == 7


def test_add_messages_if_absent_writes_nothing_on_bad_input(
    memory: ChatMemory, store_kind: str
) -> None:
    from agentctx_fast import SerializationError

    good = timeline(3)
    with pytest.raises(InvalidMessageTypeError):
        memory.add_messages_if_absent([good[0], "not a message"])  # type: ignore[list-item]
    with pytest.raises(InvalidMessageTypeError):
        memory.add_messages_if_absent(good[0])  # type: ignore[arg-type]
    if not store_kind.endswith("memory"):  # in-process stores keep objects, not records
        unserialisable = UserMessage("x", message_id="bad", metadata={"when": object()})
        with pytest.raises(SerializationError):
            memory.add_messages_if_absent([good[1], unserialisable])
    assert memory.get_messages() == []
    assert memory.message_count() == 0


def test_add_messages_if_absent_large_batch(memory: ChatMemory) -> None:
    messages = timeline(1_203, prefix="big")
    assert memory.add_messages_if_absent(messages) == [True] * 1_203
    assert ids(memory.get_messages(5)) == ids(messages[-5:])
    assert memory.message_count() == 1_203


def test_add_messages_if_absent_large_batch_with_stored_and_repeated_ids(
    memory: ChatMemory,
) -> None:
    """A batch longer than one multi-row statement, half of it stored already, some ids twice:
    only the first of each new id is appended, in batch order."""
    messages = timeline(2_500, prefix="mix")
    assert memory.add_messages_if_absent(messages[::2]) == [True] * 1_250
    flags = memory.add_messages_if_absent([*messages, messages[3], messages[4]])
    assert flags == [i % 2 == 1 for i in range(2_500)] + [False, False]
    assert ids(memory.get_messages()) == ids([*messages[::2], *messages[1::2]])
