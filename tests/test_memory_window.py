"""`memory.window(options, system)` on every store, blocking and async (SPEC §23): the window
the whole history gives, read from the tail alone."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentctx_fast import (
    AgentActionMessage,
    AiMessage,
    ContextWindow,
    InvalidArgumentError,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
    WindowOptions,
)
from agentctx_fast.core.window import build_window
from agentctx_fast.memory import ChatMemory
from store_fixtures import (
    every_store_kind,  # noqa: F401  (store_kind: every store)
    new_conversation_id,
)
from strategies import histories, window_options

SETTINGS = settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


class CountingMemory(ChatMemory):
    """A memory over another that counts the records its page reads return."""

    def __init__(self, inner: ChatMemory) -> None:
        self.inner = inner
        self.read = 0  # records of the tail's pages
        self.head = 0  # records of the head's reads
        self.reads: list[str] = []  # the reads made, in order
        self.reached_start = False  # the last page read was short: the history starts there

    def get_messages(self, count: int | None = None, *, offset: int = 0) -> list[Message]:
        page = self.inner.get_messages(count, offset=offset)
        self.read += len(page)
        self.reads.append("page")
        self.reached_start = count is None or len(page) < count
        return page

    def get_first_messages(self, count: int) -> list[Message]:
        page = self.inner.get_first_messages(count)
        self.head += len(page)
        self.reads.append("head")
        return page

    def add_message_if_absent(self, message: Message) -> bool:
        return self.inner.add_message_if_absent(message)

    def get_message(self, message_id: str) -> Message | None:
        return self.inner.get_message(message_id)

    def update_message(self, message: Message, expected_version: int) -> Message:
        return self.inner.update_message(message, expected_version)

    def message_count(self) -> int:
        self.reads.append("count")
        return self.inner.message_count()

    def clear(self) -> None:
        self.inner.clear()


def outcome(make: Any, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
    """What a window call gives, comparable: its fields, or the type of its error."""
    try:
        window: ContextWindow = make(*args, **kwargs)
    except Exception as error:
        return ("error", type(error))
    return (
        window.messages,
        window.estimated_tokens,
        window.attached_turns,
        window.compacted_turns,
        window.cut_by,
        window.repairs,
    )


@st.composite
def long_histories(draw: st.DrawFn) -> list[Message]:
    """Several generated histories one after another (each with its own ids): hundreds of
    messages, so a window's tail read stops well before the start."""
    parts = draw(st.lists(histories(), min_size=4, max_size=12))
    return [message for part in parts for message in part]


@SETTINGS
@given(data=st.data())
def test_the_window_is_the_one_of_the_whole_history(store: Any, data: st.DataObject) -> None:
    history = data.draw(st.one_of(histories(), long_histories()))
    drawn = dict(data.draw(window_options(history)))
    drawn.pop("turn_statuses", None)
    system = drawn.pop("system", None)
    options = WindowOptions(**drawn)
    memory: ChatMemory = store.chat_memory(new_conversation_id())
    memory.add_messages_if_absent(history)
    counting = CountingMemory(memory)
    whole = outcome(build_window, memory.get_messages(), options, system=system)
    assert outcome(memory.window, options, system) == whole
    assert outcome(counting.window, options, system) == whole
    assert counting.read <= len(history) + 1
    if whole[0] != "error" and counting.reached_start:  # the tail was all of it
        expected = build_window(history, options, system=system).dropped_turns
        assert memory.window(options, system).dropped_turns == expected


def _tool_heavy(turns: int) -> list[Message]:
    out: list[Message] = []
    for turn in range(turns):
        tid = f"h{turn}"
        call = ToolCall(f"c{turn}", "look", "{}")
        out += [
            UserMessage(f"question {turn}", message_id=f"{tid}:user", turn_id=tid),
            AiMessage(tool_calls=(call,), message_id=f"{tid}:ai:1", turn_id=tid),
            ToolMessage(call.id, "looked", message_id=f"{tid}:tool", turn_id=tid),
            AiMessage(f"answer {turn}", message_id=f"{tid}:ai:2", turn_id=tid),
        ]
    return out


@pytest.mark.parametrize(
    ("options", "most"),
    [
        (None, 116),  # the defaults: one page of max_attached_messages + 16
        (WindowOptions(max_attached_turns=3, max_attached_messages=10), 64),
        (WindowOptions(max_attached_turns=40, max_attached_messages=400), 416),
    ],
)
def test_only_the_tail_is_read(store: Any, options: WindowOptions | None, most: int) -> None:
    history = _tool_heavy(300)  # 1,200 stored messages
    memory: ChatMemory = store.chat_memory(new_conversation_id())
    memory.add_messages_if_absent(history)
    counting = CountingMemory(memory)
    window = counting.window(options, "Be brief.")
    assert counting.read == most  # one page
    whole = outcome(build_window, history, options or WindowOptions(), system="Be brief.")
    assert outcome(lambda: window) == whole  # cut_by included: the read saw a turn past it
    assert outcome(memory.window, options, "Be brief.") == whole


def test_the_leading_system_message_of_a_long_history_is_found(store: Any) -> None:
    """Without ``system``, the window takes the history's leading system message, which a
    tail read does not reach: the head is read for it (a few records, not the history)."""
    history: list[Message] = [SystemMessage("You are a support agent.", message_id="s0")]
    history += _tool_heavy(300)
    memory: ChatMemory = store.chat_memory(new_conversation_id())
    memory.add_messages_if_absent(history)
    counting = CountingMemory(memory)
    options = WindowOptions(max_attached_turns=2)
    window = counting.window(options)
    assert window.messages[0].message_id == "s0"
    assert outcome(lambda: window) == outcome(build_window, history, options)
    assert counting.read + counting.head < 150
    assert counting.reads == ["page", "head"]  # the tail's one page, the head's one query


@pytest.mark.parametrize("leading", [[], [SystemMessage("Be brief.", message_id="s0")]])
def test_a_window_reads_its_tail_then_the_head_once(store: Any, leading: list[Message]) -> None:
    """A tail that reaches the start is the whole history: nothing more is read. One that
    does not is followed by one read of the head, even when the head has no system message
    or its first user message is far from the start."""
    memory: ChatMemory = store.chat_memory(new_conversation_id())
    memory.add_messages_if_absent([*leading, *_tool_heavy(10)])
    counting = CountingMemory(memory)
    assert outcome(counting.window) == whole_window(memory)
    assert counting.reads == ["page"]
    memory.add_messages_if_absent(_tool_heavy(300)[40:])
    counting = CountingMemory(memory)
    assert outcome(counting.window) == whole_window(memory)
    assert counting.reads == ["page", "head"]
    ui = [AgentActionMessage(payload={"step": i}, message_id=f"n{i}") for i in range(40)]
    memory = store.chat_memory(new_conversation_id())  # 40 UI messages before the first turn
    memory.add_messages_if_absent([*ui, *leading, *_tool_heavy(300)])
    counting = CountingMemory(memory)
    assert outcome(counting.window) == whole_window(memory)
    assert counting.reads == ["page", "head", "head", "head"]  # 4, 16, then 64 messages


def whole_window(memory: ChatMemory) -> tuple[Any, ...]:
    return outcome(build_window, memory.get_messages(), WindowOptions())


def test_a_tail_read_of_exactly_the_history_s_length_is_not_taken_for_all_of_it(
    store: Any,
) -> None:
    """A first page as long as the history, whose window starts later: the tail is not the
    whole history (a full page), so the head is read for its leading system message."""
    memory: ChatMemory = store.chat_memory(new_conversation_id())
    memory.add_messages_if_absent(
        [SystemMessage("Be brief.", message_id="s0"), *_tool_heavy(16)[1:]]
    )  # 64 messages: one first page of 64
    counting = CountingMemory(memory)
    options = WindowOptions(max_attached_turns=2, max_attached_messages=0)
    window = counting.window(options)
    assert counting.reads == ["page", "head"] and not counting.reached_start
    assert outcome(lambda: window) == outcome(build_window, memory.get_messages(), options)
    assert window.messages[0].message_id == "s0"


def test_the_first_messages_are_the_head_of_the_history(store: Any) -> None:
    memory: ChatMemory = store.chat_memory(new_conversation_id())
    assert memory.get_first_messages(3) == []
    history = _tool_heavy(5)
    memory.add_messages_if_absent(history)
    for count in (0, 1, 7, 20, 21):
        assert memory.get_first_messages(count) == memory.get_messages()[:count]
    for bad in (-1, None, True, "3", 2.0):
        with pytest.raises(InvalidArgumentError, match="count must be an int >= 0"):
            memory.get_first_messages(bad)  # type: ignore[arg-type]


def test_a_window_of_options_that_are_not_window_options_is_refused(store: Any) -> None:
    memory: ChatMemory = store.chat_memory(new_conversation_id())
    memory.add_message(UserMessage("hi", message_id="u1"))
    bad: Sequence[Any] = [{"max_attached_turns": 1}, 3]
    for options in bad:
        with pytest.raises(InvalidArgumentError, match="options must be a WindowOptions"):
            memory.window(options)
    assert [m.message_id for m in memory.window().messages] == ["u1"]


@pytest.mark.parametrize("turns", [1, 2, 3])
def test_a_finished_conversation_s_window_is_the_one_of_the_whole_history(
    store: Any, turns: int
) -> None:
    """With ``current_turn="none"`` the newest turn is history too: the tail read must reach
    one more turn back than with a turn in progress."""
    memory: ChatMemory = store.chat_memory(new_conversation_id())
    memory.add_messages_if_absent(_tool_heavy(60))
    options = WindowOptions(
        max_attached_turns=turns, current_turn="none", compact_completed_tool_turns=True
    )
    whole = outcome(build_window, memory.get_messages(), options, system="Be brief.")
    assert outcome(memory.window, options, "Be brief.") == whole
