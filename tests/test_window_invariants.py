"""Invariants of every window, on the backend in use (SPEC §5, §6)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentctx_fast import (
    AgentCtxError,
    AiMessage,
    Message,
    SystemMessage,
    ToolMessage,
    UserMessage,
    build_window,
    segment_turns,
    validate_tool_protocol,
)
from strategies import histories, window_options

SETTINGS = settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _visible_turns(history: list[Message]) -> list[list[Message]]:
    visible = [m for m in history if m.model_visible]
    seg = segment_turns(visible)
    return [visible[s:e] for s, e in zip(seg.starts.tolist(), seg.ends.tolist(), strict=True)]


@SETTINGS
@given(st.data())
def test_window_invariants(data: st.DataObject) -> None:
    history = data.draw(histories())
    options: dict[str, Any] = data.draw(window_options(history))
    snapshot = [(m.message_id, m) for m in history]
    turns = _visible_turns(history)
    try:
        window = build_window(history, **options)
    except AgentCtxError as error:
        assert not turns, f"unexpected {error!r}"
        return
    assert [(m.message_id, m) for m in history] == snapshot, "input mutated"
    messages = window.messages
    has_system = (
        bool(messages)
        and isinstance(messages[0], SystemMessage)
        and (options.get("system") is not None or messages[0] is _leading_system(history))
    )
    body = messages[1:] if has_system else messages
    assert body and isinstance(body[0], UserMessage), "window must start with a user message"
    current = turns[-1]
    assert body[len(body) - len(current) :] == current, "current turn not whole"
    history_part = body[: len(body) - len(current)]
    assert validate_tool_protocol(history_part) == [], "history part holds a violation"
    _assert_whole_turns(history_part, turns[:-1])
    if window.attached_turns:
        assert len(body) <= options.get("max_attached_messages", 100)
        budget = options.get("max_attached_tokens")
        if budget is not None:
            assert window.estimated_tokens <= budget
    assert window.attached_turns <= options.get("max_attached_turns", 10)
    assert window.attached_turns + window.dropped_turns == len(turns) - 1
    assert 0 <= window.compacted_turns <= window.attached_turns
    if not options.get("compact_completed_tool_turns"):
        assert window.compacted_turns == 0


def _leading_system(history: list[Message]) -> Message | None:
    for m in history:
        if isinstance(m, UserMessage):
            return None
        if isinstance(m, SystemMessage):
            return m
    return None


def _assert_whole_turns(part: list[Message], turns: list[list[Message]]) -> None:
    """Each history turn appears whole (repaired), compacted, or not at all, in order."""
    owner = {id(m): k for k, turn in enumerate(turns) for m in turn}
    groups: dict[int, list[Message]] = {}
    order: list[int] = []
    last_turn = -1
    for m in part:
        k = owner.get(id(m))
        if k is None:  # a synthetic result closing a missing call
            assert isinstance(m, ToolMessage) and m.is_error and m.message_id.endswith(":missing")
            k = last_turn
        else:
            assert k >= last_turn, "turns out of order"
            if k != last_turn:
                order.append(k)
            last_turn = k
        groups.setdefault(k, []).append(m)
    for k in order:
        turn, shown = turns[k], [m for m in groups[k] if id(m) in owner]
        compacted = shown == [turn[0], turn[-1]] and isinstance(turn[-1], AiMessage)
        dropped_results = [m for m in turn if m not in shown]
        assert compacted or all(isinstance(m, ToolMessage) for m in dropped_results), (
            f"turn {k} was cut"
        )


def test_public_build_window_uses_the_selected_core() -> None:
    from agentctx_fast import _backend

    window = build_window(
        [
            UserMessage("Where is my order?", message_id="u1"),
            AiMessage("It ships today.", message_id="a1"),
            UserMessage("Thanks, and the refund?", message_id="u2"),
        ],
        system="Be brief.",
    )
    assert [m.message_id for m in window.messages] == ["system", "u1", "a1", "u2"]
    _, _, _, engine = window._unread
    assert engine is _backend.core
