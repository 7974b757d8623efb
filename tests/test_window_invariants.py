"""Invariants of every window, on the backend in use (SPEC §5, §6, §20)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentctx_fast import (
    AgentCtxError,
    AiMessage,
    HeuristicTokenEstimator,
    ToolMessage,
    UserMessage,
    build_window,
)
from strategies import histories, tool_loop_histories, tool_loop_options, window_options
from window_checks import check_window, visible_turns

SETTINGS = settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(st.data())
def test_window_invariants(data: st.DataObject) -> None:
    history = data.draw(histories())
    _check_invariants(history, data.draw(window_options(history)))


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_window_invariants_in_a_long_tool_loop(data: st.DataObject) -> None:
    """Histories ending in a long tool loop, where placeholders stand for older results."""
    history = data.draw(tool_loop_histories())
    _check_invariants(history, data.draw(tool_loop_options(history)))


def _check_invariants(history: list[Any], options: dict[str, Any]) -> None:
    snapshot = [(m.message_id, m) for m in history]
    turns = visible_turns(history)
    has_current = options.get("current_turn", "last") == "last"
    try:
        window = build_window(history, **options)
    except AgentCtxError as error:
        assert has_current and not turns, f"unexpected {error!r}"
        return
    assert [(m.message_id, m) for m in history] == snapshot, "input mutated"
    body = check_window(history, options, window.messages)
    if window.attached_turns:
        assert len(body) <= options.get("max_attached_messages", 100)
        budget = options.get("max_attached_tokens")
        if budget is not None:
            assert window.estimated_tokens <= budget
    assert window.attached_turns <= options.get("max_attached_turns", 10)
    assert window.attached_turns + window.dropped_turns == len(turns) - has_current
    # The tokens are those of the messages sent (placeholders included).
    assert window.estimated_tokens == HeuristicTokenEstimator().estimate(window.messages)
    kept = options.get("current_turn_tool_results_kept")
    budget = options.get("max_attached_tokens")
    if has_current and kept is not None and budget is not None:
        # Over the budget, every result of the current turn but the newest `kept` is a
        # placeholder (the window then holds the current turn alone).
        stored = {id(m) for m in history}
        results = [
            m
            for m in window.messages
            if isinstance(m, ToolMessage) and not m.message_id.endswith(":missing")
        ]
        older = results[: max(len(results) - kept, 0)]
        over = HeuristicTokenEstimator().estimate(
            [next((h for h in history if h.message_id == m.message_id), m) for m in window.messages]
        )
        if over > budget:
            assert window.attached_turns == 0
            assert not any(id(m) in stored for m in older)
        else:
            assert all(id(m) in stored for m in results)
    assert 0 <= window.compacted_turns <= window.attached_turns
    if not options.get("compact_completed_tool_turns"):
        assert window.compacted_turns == 0


def test_public_build_window_uses_the_selected_core() -> None:
    from agentctx_fast.core import _backend

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
