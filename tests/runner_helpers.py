"""Shared helpers of the runner tests: memory-content checks, recording models and tools."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from agentctx_fast import (
    AgentFormMessage,
    AgentTurn,
    AiMessage,
    Message,
    ToolCall,
    ToolMessage,
    validate_tool_protocol,
)
from agentctx_fast.memory import ChatMemory


def ids(messages: Iterable[Message]) -> list[str]:
    return [m.message_id for m in messages]


def turn_messages(turns: Iterable[AgentTurn]) -> list[Message]:
    """The messages of ``turns`` in order: what the runner says it appended."""
    return [message for turn in turns for message in turn.messages]


def check_memory(
    memory: ChatMemory,
    turns: Iterable[AgentTurn],
    *,
    before: Sequence[Message] = (),
    protocol: bool = True,
) -> list[Message]:
    """The stored timeline is exactly ``before`` then every message of ``turns``, in order.

    Pass each turn's final view (a resumed or cancelled turn carries the whole turn with its
    updated forms). Ids are unique, only UI forms have a version above 0, every message the
    runner wrote carries its turn's id, and (by default) the tool protocol holds.
    """
    turns = list(turns)
    stored = memory.get_messages()
    expected = [*before, *turn_messages(turns)]
    assert ids(stored) == ids(expected)
    assert stored == expected
    assert len(set(ids(stored))) == len(stored), "message ids are not unique"
    for message in stored:
        if not isinstance(message, AgentFormMessage):
            assert message.version == 0, f"{message.message_id} changed version"
    for turn in turns:
        for message in turn.messages:
            assert message.turn_id == turn.turn_id, message.message_id
    assert memory.message_count() == len(stored)
    if protocol:
        assert validate_tool_protocol(stored) == []
    return stored


def check_append_only(earlier: Sequence[Message], later: Sequence[Message]) -> None:
    """``later`` extends ``earlier``: nothing removed or reordered; only forms may change
    (and then only to a higher version)."""
    assert len(later) >= len(earlier)
    for old, new in zip(earlier, later, strict=False):
        assert old.message_id == new.message_id
        if isinstance(old, AgentFormMessage):
            assert isinstance(new, AgentFormMessage)
            assert new.version >= old.version
        else:
            assert new == old


def call(call_id: str, name: str, arguments: Any = None) -> ToolCall:
    """A tool call whose arguments are ``arguments`` as JSON (a str is passed as it is)."""
    if arguments is None:
        arguments = {}
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return ToolCall(call_id, name, text)


def calls(*tool_calls: ToolCall, text: str | None = None) -> AiMessage:
    return AiMessage(text, tool_calls)


class Recorder:
    """A tool function that records its keyword arguments and returns ``result``."""

    def __init__(self, result: Any = "ok") -> None:
        self.result = result
        self.calls: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def __call__(self, **kwargs: Any) -> Any:
        with self._lock:
            self.calls.append(kwargs)
        if isinstance(self.result, BaseException):
            raise self.result
        return self.result


def capturing(
    memory: ChatMemory, seen: list[list[Message]], reply: AiMessage
) -> Callable[[Sequence[Message], Sequence[Any]], AiMessage]:
    """A scripted reply that first records the whole stored history at the time of the call."""

    def reply_fn(messages: Sequence[Message], tools: Sequence[Any]) -> AiMessage:
        seen.append(memory.get_messages())
        return reply

    return reply_fn


class ConcurrencyProbe:
    """Counts model calls running at once (a reply that sleeps while it is counted)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.active = 0
        self.peak = 0
        self.entered = 0
        self._lock = threading.Lock()

    def __call__(self, messages: Sequence[Message], tools: Sequence[Any]) -> AiMessage:
        with self._lock:
            self.active += 1
            self.entered += 1
            self.peak = max(self.peak, self.active)
        try:
            time.sleep(self.seconds)
        finally:
            with self._lock:
                self.active -= 1
        return AiMessage(f"answer to {messages[-1].text}")  # type: ignore[attr-defined]


def results_by_call(messages: Iterable[Message]) -> dict[str, ToolMessage]:
    return {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}
