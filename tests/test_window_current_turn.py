"""The window options of SPEC §23 on both cores: ``current_turn="none"`` (a finished
conversation: every turn is history) and ``current_turn_tool_results_kept`` (a long tool loop
within one turn kept under the token budget by placeholders)."""

from __future__ import annotations

from typing import Any

import pytest

from agentctx_fast import (
    AiMessage,
    InvalidArgumentError,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
    WindowOptions,
    build_window,
    validate_tool_protocol,
)
from agentctx_fast.core._reference import api as reference
from agentctx_fast.core.tokens import HeuristicTokenEstimator
from conftest import native_or_skip
from engines import build_on


@pytest.fixture(params=["rust", "python"])
def engine(request: pytest.FixtureRequest) -> Any:
    return native_or_skip() if request.param == "rust" else reference


def _ids(messages: list[Message]) -> list[str]:
    return [m.message_id for m in messages]


def _tool_turn(n: int, *, answered: bool = True, final: bool = True) -> list[Message]:
    """A turn asking a question, calling ``lookup`` and answering."""
    turn: list[Message] = [
        UserMessage(f"question {n}", message_id=f"u{n}"),
        AiMessage(None, (ToolCall(f"c{n}", "lookup", "{}"),), message_id=f"a{n}"),
    ]
    if answered:
        turn.append(ToolMessage(f"c{n}", f"result {n}", message_id=f"t{n}"))
    if final:
        turn.append(AiMessage(f"answer {n}", message_id=f"f{n}"))
    return turn


def _plain_turn(n: int) -> list[Message]:
    return [
        UserMessage(f"question {n}", message_id=f"u{n}"),
        AiMessage(f"answer {n}", message_id=f"f{n}"),
    ]


# -- current_turn="none" ----------------------------------------------------------------------


def test_none_compacts_the_last_turn_like_any_history_turn(engine: Any) -> None:
    history = [*_tool_turn(1), *_tool_turn(2)]
    options = {"compact_completed_tool_turns": True, "compression_keep_recent_turns": 0}
    last = build_on(engine, history, **options)
    assert _ids(last.messages) == ["u1", "f1", "u2", "a2", "t2", "f2"]  # the current turn whole
    none = build_on(engine, history, current_turn="none", **options)
    assert _ids(none.messages) == ["u1", "f1", "u2", "f2"]
    assert (none.attached_turns, none.compacted_turns, none.dropped_turns) == (2, 2, 0)


def test_none_drops_the_last_turn_by_the_limits(engine: Any) -> None:
    history = [*_plain_turn(1), *_plain_turn(2), *_plain_turn(3)]
    one = build_on(engine, history, current_turn="none", max_attached_turns=1)
    assert _ids(one.messages) == ["u3", "f3"]
    assert (one.attached_turns, one.dropped_turns, one.cut_by) == (1, 2, "max_attached_turns")
    nothing = build_on(
        engine, history, system="Be brief.", current_turn="none", max_attached_turns=0
    )
    assert _ids(nothing.messages) == ["system"]
    assert (nothing.attached_turns, nothing.dropped_turns) == (0, 3)
    # A budget the last turn does not fit in leaves it out (the current turn is kept whole).
    budget = HeuristicTokenEstimator().estimate(history[-2:]) - 1
    cut = build_on(engine, history, current_turn="none", max_attached_tokens=budget)
    assert (cut.messages, cut.cut_by, cut.estimated_tokens) == ([], "max_attached_tokens", 0)
    kept = build_on(engine, history, max_attached_tokens=budget)
    assert _ids(kept.messages) == ["u3", "f3"]


def test_none_repairs_the_last_turn(engine: Any) -> None:
    # A step left without its result is closed, as in any history turn.
    history = [*_plain_turn(1), *_tool_turn(2, answered=False, final=False)]
    last = build_on(engine, history)
    assert _ids(last.messages) == ["u1", "f1", "u2", "a2"]  # the step in progress stays open
    none = build_on(engine, history, current_turn="none")
    assert _ids(none.messages) == ["u1", "f1", "u2", "a2", "c2:missing"]
    assert [(v.kind, v.message_id) for v in none.repairs] == [("missing_result", "a2")]
    assert validate_tool_protocol(none.messages) == []
    # A turn repeating an open call id is left out.
    repeated = AiMessage(None, (ToolCall("c", "x", "{}"), ToolCall("c", "x", "{}")), message_id="r")
    broken = [*_plain_turn(1), UserMessage("again", message_id="u2"), repeated]
    left_out = build_on(engine, broken, current_turn="none")
    assert _ids(left_out.messages) == ["u1", "f1"]
    assert (left_out.attached_turns, left_out.dropped_turns) == (1, 1)
    assert _ids(build_on(engine, broken).messages) == ["u1", "f1", "u2", "r"]


def test_none_without_a_user_message_is_an_empty_window(engine: Any) -> None:
    lead = SystemMessage("You help.", message_id="s")
    for history in ([], [lead], [lead, AiMessage("hello", message_id="a")]):
        window = build_on(engine, history, current_turn="none")
        assert _ids(window.messages) == (["s"] if history else [])
        assert (window.attached_turns, window.dropped_turns, window.estimated_tokens) == (
            0,
            0,
            HeuristicTokenEstimator().estimate(window.messages),
        )
        with pytest.raises(InvalidArgumentError, match="no UserMessage"):
            build_on(engine, history)


@pytest.mark.parametrize("value", ["LAST", "", None, 1, True, "finished"])
def test_current_turn_takes_last_or_none_only(engine: Any, value: Any) -> None:
    expected = f"current_turn must be 'last' or 'none', got {value!r}"
    with pytest.raises(InvalidArgumentError) as made:
        WindowOptions(current_turn=value)
    assert str(made.value) == expected
    with pytest.raises(InvalidArgumentError) as built:
        build_on(engine, _plain_turn(1), current_turn=value)
    assert str(built.value) == expected


@pytest.mark.parametrize("value", ["LAST", None, 0])
def test_the_public_build_window_checks_current_turn(value: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="current_turn must be 'last' or 'none'"):
        build_window(_plain_turn(1), current_turn=value)


def test_the_public_build_window_takes_current_turn() -> None:
    history = [*_plain_turn(1), *_plain_turn(2)]
    window = build_window(history, current_turn="none", max_attached_turns=1)
    assert _ids(window.messages) == ["u2", "f2"]
    assert window.dropped_turns == 1


# -- current_turn_tool_results_kept -----------------------------------------------------------


def _tool_loop(steps: int, size: int = 400) -> list[Message]:
    """An older turn, then a current turn calling ``fetch`` ``steps`` times, each result
    ``size`` characters."""
    loop: list[Message] = [*_plain_turn(0), UserMessage("collect every page", message_id="q")]
    for n in range(steps):
        loop.append(
            AiMessage(None, (ToolCall(f"k{n}", "fetch", f'{{"page": {n}}}'),), message_id=f"s{n}")
        )
        text = (f"page {n} " * size)[:size]
        # Every other result names its tool; the placeholder names the call's tool anyway.
        name = "fetch" if n % 2 else None
        loop.append(ToolMessage(f"k{n}", text, tool_name=name, message_id=f"r{n}", turn_id="T"))
    return loop


def test_older_results_of_the_current_turn_become_placeholders(engine: Any) -> None:
    history = _tool_loop(5)
    stored = list(history)
    window = build_on(engine, history, max_attached_tokens=200, current_turn_tool_results_kept=2)
    assert history == stored and all(a is b for a, b in zip(history, stored, strict=True))
    assert _ids(window.messages) == [
        "q",
        "s0",
        "r0",
        "s1",
        "r1",
        "s2",
        "r2",
        "s3",
        "r3",
        "s4",
        "r4",
    ]
    sent = {m.message_id: m for m in window.messages}
    for n in range(3):
        placeholder = sent[f"r{n}"]
        assert isinstance(placeholder, ToolMessage)
        assert placeholder is not history[4 + 2 * n]
        assert placeholder.tool_call_id == f"k{n}"
        assert placeholder.text == (
            f"[tool result left out of this window: call k{n}, tool fetch, 400 characters]"
        )
        assert (placeholder.turn_id, placeholder.tool_name) == ("T", "fetch" if n % 2 else None)
    for n in (3, 4):
        assert sent[f"r{n}"] is history[4 + 2 * n]
    assert window.estimated_tokens == HeuristicTokenEstimator().estimate(window.messages)
    assert window.cut_by == "max_attached_tokens" and window.attached_turns == 0
    assert validate_tool_protocol(window.messages) == []


def test_a_placeholder_names_the_tool_of_the_call_it_answers(engine: Any) -> None:
    # Ids reused per step, as many models number their calls: the result answers the latest
    # call of its id before it.
    history: list[Message] = [UserMessage("find it", message_id="q")]
    for step, tool in enumerate(("search", "fetch")):
        history.append(AiMessage(None, (ToolCall("call_0", tool, "{}"),), message_id=f"s{step}"))
        history.append(ToolMessage("call_0", "x" * 200, message_id=f"r{step}"))
    window = build_on(engine, history, max_attached_tokens=10, current_turn_tool_results_kept=1)
    assert [m.text for m in window.messages if isinstance(m, ToolMessage)] == [
        "[tool result left out of this window: call call_0, tool search, 200 characters]",
        "x" * 200,
    ]


def test_placeholders_only_over_the_budget(engine: Any) -> None:
    history = _tool_loop(5)
    whole = build_on(engine, history, max_attached_tokens=10_000)
    for kept in (0, 2):
        window = build_on(
            engine, history, max_attached_tokens=10_000, current_turn_tool_results_kept=kept
        )
        assert [m is w for m, w in zip(window.messages, whole.messages, strict=True)] == [True] * 13
        # No budget: no window is over it.
        unbounded = build_on(engine, history, current_turn_tool_results_kept=kept)
        assert all(isinstance(m, ToolMessage) is False or m in history for m in unbounded.messages)
    # More kept than there are results: nothing to replace.
    many = build_on(engine, history, max_attached_tokens=10, current_turn_tool_results_kept=5)
    assert all(m in history for m in many.messages)
    # None kept: every result is a placeholder.
    none_kept = build_on(engine, history, max_attached_tokens=10, current_turn_tool_results_kept=0)
    results = [m for m in none_kept.messages if isinstance(m, ToolMessage)]
    assert len(results) == 5 and not any(m in history for m in results)


def test_a_finished_conversation_has_no_current_turn_to_shorten(engine: Any) -> None:
    history = _tool_loop(5)
    window = build_on(
        engine,
        history,
        current_turn="none",
        max_attached_tokens=200,
        current_turn_tool_results_kept=0,
    )
    # The loop's turn does not fit: it is left out whole, and with it every older turn.
    assert (window.messages, window.cut_by, window.dropped_turns) == ([], "max_attached_tokens", 2)


def test_placeholders_are_counted_by_the_given_estimator(engine: Any) -> None:
    class PerCharacter:
        def estimate(self, messages: Any) -> int:
            return sum(len(getattr(m, "text", None) or "") for m in messages)

    history = _tool_loop(4, size=300)
    window = build_on(
        engine,
        history,
        max_attached_tokens=100,
        token_estimator=PerCharacter(),
        current_turn_tool_results_kept=1,
    )
    assert window.estimated_tokens == PerCharacter().estimate(window.messages)
    assert window.estimated_tokens < PerCharacter().estimate(history[2:])


@pytest.mark.parametrize("value", [-1, True, 1.0, "2"])
def test_results_kept_is_an_int_or_none(value: Any) -> None:
    expected = f"current_turn_tool_results_kept must be an int >= 0, got {value!r}"
    with pytest.raises(InvalidArgumentError) as made:
        WindowOptions(current_turn_tool_results_kept=value)
    assert str(made.value) == expected
    with pytest.raises(InvalidArgumentError) as built:
        build_window(_plain_turn(1), current_turn_tool_results_kept=value)
    assert str(built.value) == expected


# -- in the runner ----------------------------------------------------------------------------


def test_a_long_tool_loop_within_one_turn_stays_under_the_budget(store: Any) -> None:
    """The issue's case: a 500-token budget and a turn that fetches page after page. Without
    the option every model call gets the whole turn (far over the budget); with it, each call
    gets the newest result and placeholders for the older ones, under the budget (each older
    step still costs its call and its placeholder, about 40 tokens)."""
    from agentctx_fast import Agent, AgentRunner, ScriptedChatModel, Tool
    from store_fixtures import new_conversation_id

    def fetch(page: int) -> str:
        return " ".join(f"line {page}.{n} of the order export" for n in range(20))

    steps = 8
    replies = [
        AiMessage(None, (ToolCall(f"call_{n}", "fetch", f'{{"page": {n}}}'),)) for n in range(steps)
    ]
    replies.append(AiMessage("All pages read."))
    estimator = HeuristicTokenEstimator()
    sent: dict[str, list[int]] = {}
    for name, kept in (("without", None), ("with", 1)):
        model = ScriptedChatModel(list(replies))
        agent = Agent(
            name,
            model,
            instructions="Read every page.",
            tools=[Tool("fetch", fetch)],
            max_attached_tokens=500,
            max_steps=steps + 1,
            current_turn_tool_results_kept=kept,
        )
        turn = AgentRunner(store).run(agent, new_conversation_id(), "Export every order page.")
        assert turn.status == "completed"
        assert len(model.calls) == steps + 1
        for call in model.calls:
            assert validate_tool_protocol(list(call.messages)) == []
        sent[name] = [estimator.estimate(list(call.messages)) for call in model.calls]
        # Stored whole: every result is in memory as the tool returned it.
        stored = store.chat_memory(turn.conversation_id).get_messages()
        results = [m for m in stored if isinstance(m, ToolMessage)]
        assert [m.text for m in results] == [fetch(n) for n in range(steps)]
    assert max(sent["without"]) > 1000
    assert max(sent["with"]) <= 500
