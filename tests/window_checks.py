"""What every window promises about its messages (SPEC §5, §6, §20), checked against the
history it was built from; shared by the window's property tests."""

from __future__ import annotations

from typing import Any

from agentctx_fast import (
    AiMessage,
    Message,
    SystemMessage,
    ToolMessage,
    UserMessage,
    segment_turns,
    validate_tool_protocol,
)


def visible_turns(history: list[Message]) -> list[list[Message]]:
    """The history's turns, model-visible messages only."""
    visible = [m for m in history if m.model_visible]
    seg = segment_turns(visible)
    return [visible[s:e] for s, e in zip(seg.starts.tolist(), seg.ends.tolist(), strict=True)]


def adjacency_problems(messages: list[Message], open_at_end: bool = False) -> list[str]:
    """Tool results that do not directly follow their call's AI message (after the other
    results of that message), and calls left without a result there: what a model API
    refuses, and what SPEC §20 says a window never holds. ``open_at_end``: the last AI
    message's calls may still be waiting for results (a step in progress)."""
    problems: list[str] = []
    waiting: set[str] | None = None  # calls of the AI message whose results are being read
    for m in messages:
        if isinstance(m, ToolMessage):
            if waiting is None or m.tool_call_id not in waiting:
                problems.append(f"result {m.message_id} out of place")
            else:
                waiting.discard(m.tool_call_id)
            continue
        if waiting:
            problems.append(f"calls {sorted(waiting)} unanswered before {m.message_id}")
        waiting = {c.id for c in m.tool_calls} if isinstance(m, AiMessage) else None
    if waiting and not open_at_end:
        problems.append(f"calls {sorted(waiting)} unanswered at the end")
    return problems


def check_window(
    history: list[Message], options: dict[str, Any], messages: list[Message]
) -> list[Message]:
    """Asserts the window's promises; returns its messages after the system message.

    The window starts with the system message (if any), then a user message; history turns
    appear in order, each whole, compacted or not at all; the current turn is always there,
    whole; tool results may be left out and synthetic results added (repairs), and then
    `validate_tool_protocol` finds nothing and every result directly follows its call. The
    violations a window may hold are in its current turn, which is never left out: a call id
    repeated inside one AI message (no order makes that valid), and the calls of the step in
    progress (its last AI message, when only results follow it) still waiting for results.
    """
    turns = visible_turns(history)
    has_current = options.get("current_turn", "last") == "last"
    has_system = (
        bool(messages)
        and isinstance(messages[0], SystemMessage)
        and (options.get("system") is not None or messages[0] is _leading_system(history))
    )
    sent = messages[1:] if has_system else messages
    body = _placeholders_undone(history, options, sent)
    if not has_current:
        return _check_history_only(turns, sent, body)
    assert body and isinstance(body[0], UserMessage), "window must start with a user message"
    groups = _turn_groups(body, turns)
    assert groups and groups[-1][0] == len(turns) - 1, "the current turn is not in the window"
    _check_turns(turns, groups, len(turns) - 1)
    current = turns[-1]
    allowed = {
        ("duplicate_call_id", m.message_id)
        for m in current
        if isinstance(m, AiMessage) and len({c.id for c in m.tool_calls}) < len(m.tool_calls)
    }
    step = next((m for m in reversed(current) if not isinstance(m, ToolMessage)), None)
    if isinstance(step, AiMessage):
        allowed.add(("missing_result", step.message_id))
    for violation in validate_tool_protocol(messages):
        assert (violation.kind, violation.message_id) in allowed, violation
    assert adjacency_problems(body, open_at_end=isinstance(step, AiMessage)) == []
    return body


def _check_history_only(
    turns: list[list[Message]], sent: list[Message], body: list[Message]
) -> list[Message]:
    """``current_turn="none"``: every turn is a history turn, each whole, compacted, repaired
    or left out; the window may be empty, and holds no violation at all."""
    assert not body or isinstance(body[0], UserMessage), "window must start with a user message"
    _check_turns(turns, _turn_groups(body, turns), len(turns))
    assert validate_tool_protocol(sent) == []
    assert adjacency_problems(body) == []
    return body


def _placeholders_undone(
    history: list[Message], options: dict[str, Any], sent: list[Message]
) -> list[Message]:
    """``sent`` with each placeholder (a tool result left out of the current turn) replaced
    by the stored result it stands for, after checking it names that result's call and keeps
    its ids; only results older than the newest ``current_turn_tool_results_kept`` are."""
    stored = {m.message_id: m for m in history if isinstance(m, ToolMessage)}
    originals = {id(m) for m in history}
    undone: list[Message] = []
    replaced = 0
    for m in sent:
        if isinstance(m, ToolMessage) and id(m) not in originals and m.message_id in stored:
            original = stored[m.message_id]
            assert m.tool_call_id == original.tool_call_id
            assert m.text.startswith("[tool result left out of this window")
            assert f"call {m.tool_call_id}," in m.text
            assert f"{len(original.text)} characters" in m.text
            undone.append(original)
            replaced += 1
        else:
            undone.append(m)
    kept = options.get("current_turn_tool_results_kept")
    if replaced:
        assert kept is not None and options.get("max_attached_tokens") is not None
        results = [m for m in sent if isinstance(m, ToolMessage)]
        assert all(
            id(m) in originals or m.message_id.endswith(":missing") for m in results[-kept:] if kept
        )
    return undone


def _check_turns(
    turns: list[list[Message]], groups: list[tuple[int, list[Message]]], history_turns: int
) -> None:
    """Each group is its turn in order: whole, or (a history turn) compacted; tool results may
    be left out or added by repairs."""
    for k, shown in groups:
        turn = turns[k]
        shown_ids = {id(m) for m in shown}
        assert [id(m) for m in shown] == [id(m) for m in turn if id(m) in shown_ids], (
            f"turn {k} out of order"
        )
        compacted = (
            k < history_turns and shown == [turn[0], turn[-1]] and isinstance(turn[-1], AiMessage)
        )
        kept = [id(m) for m in turn if not isinstance(m, ToolMessage)]
        assert compacted or kept == [id(m) for m in shown if not isinstance(m, ToolMessage)], (
            f"turn {k} was cut"
        )


def _leading_system(history: list[Message]) -> Message | None:
    for m in history:
        if isinstance(m, UserMessage):
            return None
        if isinstance(m, SystemMessage):
            return m
    return None


def _turn_groups(
    body: list[Message], turns: list[list[Message]]
) -> list[tuple[int, list[Message]]]:
    """The window's original messages grouped by the turn they come from, in window order;
    a message from no turn must be a synthetic result closing a missing one."""
    owner = {id(m): k for k, turn in enumerate(turns) for m in turn}
    groups: list[tuple[int, list[Message]]] = []
    for m in body:
        k = owner.get(id(m))
        if k is None:
            assert isinstance(m, ToolMessage) and m.is_error and m.message_id.endswith(":missing")
            assert groups, "a synthetic result before any turn"
            continue
        if not groups or groups[-1][0] != k:
            assert not groups or k > groups[-1][0], "turns out of order"
            groups.append((k, []))
        groups[-1][1].append(m)
    return groups
