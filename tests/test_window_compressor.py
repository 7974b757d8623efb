"""SPEC §5 rule 8: the context compressor, through the public `build_window`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentctx_fast import (
    AgentActionMessage,
    AgentFormMessage,
    AiMessage,
    CompressionError,
    CompressorOutputError,
    HeuristicTokenEstimator,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
    build_window,
    segment_turns,
)
from conftest import unique_id, window_kwargs
from strategies import histories, window_options

SYSTEM = "You are the support agent of a web shop."


def _tool_turn(n: int, prefix: str) -> list[Message]:
    """A completed tool turn: question, call, result, final answer."""
    return [
        UserMessage(f"where is order ORD-{n}?", message_id=f"{prefix}u{n}"),
        AiMessage(
            None, (ToolCall("call_0", "get_order", f'{{"id": {n}}}'),), message_id=f"{prefix}a{n}"
        ),
        ToolMessage("call_0", f'{{"id": {n}, "status": "shipped"}}', message_id=f"{prefix}t{n}"),
        AiMessage(f"order ORD-{n} has shipped", message_id=f"{prefix}f{n}"),
    ]


def _history(history_turns: int) -> list[Message]:
    prefix = unique_id("cmp") + "-"
    out: list[Message] = []
    for n in range(history_turns):
        out.extend(_tool_turn(n, prefix))
    out.append(UserMessage("and my refund?", message_id=f"{prefix}current"))
    return out


class Recorder:
    """A compressor that records what it was given and returns a fixed replacement."""

    def __init__(self, replacement: Callable[[list[Message]], Any]) -> None:
        self.calls: list[list[Message]] = []
        self._replacement = replacement

    def __call__(self, older: list[Message]) -> Any:
        self.calls.append(list(older))
        return self._replacement(older)


def _summary(older: list[Message]) -> list[Message]:
    return [UserMessage(f"summary of {len(older)} messages", message_id=unique_id("summary"))]


def _expected_tokens(messages: list[Message]) -> int:
    return HeuristicTokenEstimator().estimate(messages)


def _ids(messages: list[Message]) -> list[str]:
    return [m.message_id for m in messages]


# -- what the compressor receives and what replaces it ------------------------------------------


@pytest.mark.parametrize("keep_recent", [0, 1, 2, 3])
def test_compressor_receives_the_older_attached_turns(keep_recent: int) -> None:
    history = _history(5)
    recorder = Recorder(_summary)
    window = build_window(
        history,
        system=SYSTEM,
        compression_keep_recent_turns=keep_recent,
        context_compressor=recorder,
    )
    older_turns = 5 - keep_recent
    expected_older = history[: 4 * older_turns]
    assert len(recorder.calls) == 1
    assert recorder.calls[0] == expected_older
    assert all(a is b for a, b in zip(recorder.calls[0], expected_older, strict=True))
    replacement_id = window.messages[1].message_id
    assert replacement_id.startswith("summary")
    assert _ids(window.messages) == ["system", replacement_id, *_ids(history[4 * older_turns :])]
    assert isinstance(window.messages[0], SystemMessage)
    assert isinstance(window.messages[1], UserMessage)
    assert window.estimated_tokens == _expected_tokens(window.messages)


def test_compressor_sees_compacted_turns() -> None:
    history = _history(5)
    recorder = Recorder(_summary)
    window = build_window(
        history,
        system=SYSTEM,
        compact_completed_tool_turns=True,
        compression_keep_recent_turns=2,
        context_compressor=recorder,
    )
    # turns 0-2 are older than the 2 protected ones: compacted to [question, final answer]
    expected = [m for n in range(3) for m in (history[4 * n], history[4 * n + 3])]
    assert recorder.calls == [expected]
    assert window.compacted_turns == 3
    assert _ids(window.messages)[2:] == _ids(history[12:])
    assert window.estimated_tokens == _expected_tokens(window.messages)


def test_replacement_with_tool_calls_is_used_verbatim() -> None:
    history = _history(4)

    def compressor(older: list[Message]) -> list[Message]:
        return [
            UserMessage("summary question", message_id="sq"),
            AiMessage(None, (ToolCall("k1", "lookup", '{"q": "all"}'),), message_id="sa"),
            ToolMessage("k1", "everything shipped", message_id="st"),
            AiMessage("summary answer", message_id="sf"),
        ]

    window = build_window(history, system=SYSTEM, context_compressor=compressor)
    assert _ids(window.messages)[:5] == ["system", "sq", "sa", "st", "sf"]
    assert _ids(window.messages)[5:] == _ids(history[8:])
    assert window.estimated_tokens == _expected_tokens(window.messages)


def test_leading_system_of_the_timeline_stays_first() -> None:
    history: list[Message] = [SystemMessage("instructions", message_id="sys0"), *_history(4)]
    window = build_window(history, context_compressor=_summary)
    assert window.messages[0].message_id == "sys0"
    assert isinstance(window.messages[1], UserMessage)
    assert window.messages[1].message_id.startswith("summary")
    assert window.estimated_tokens == _expected_tokens(window.messages)


def test_empty_replacement_is_allowed() -> None:
    history = _history(4)
    window = build_window(history, system=SYSTEM, context_compressor=lambda older: [])
    assert _ids(window.messages) == ["system", *_ids(history[8:])]
    assert isinstance(window.messages[1], UserMessage)
    assert window.estimated_tokens == _expected_tokens(window.messages)


def test_empty_replacement_with_nothing_protected() -> None:
    history = _history(3)
    window = build_window(
        history, system=SYSTEM, compression_keep_recent_turns=0, context_compressor=lambda o: []
    )
    assert _ids(window.messages) == ["system", history[-1].message_id]
    assert window.estimated_tokens == _expected_tokens(window.messages)


# -- not called when there is nothing older -----------------------------------------------------


@pytest.mark.parametrize(
    ("history_turns", "options"),
    [
        (0, {}),
        (1, {}),
        (2, {}),
        (2, {"compression_keep_recent_turns": 2}),
        (5, {"compression_keep_recent_turns": 5}),
        (5, {"compression_keep_recent_turns": 9}),
        (5, {"max_attached_turns": 0}),
        (5, {"max_attached_turns": 2}),
        (5, {"max_attached_messages": 9}),
    ],
)
def test_not_called_without_older_turns(history_turns: int, options: dict[str, Any]) -> None:
    history = _history(history_turns)
    recorder = Recorder(_summary)
    window = build_window(history, system=SYSTEM, context_compressor=recorder, **options)
    plain = build_window(history, system=SYSTEM, **options)
    assert recorder.calls == []
    assert _ids(window.messages) == _ids(plain.messages)
    assert window.estimated_tokens == plain.estimated_tokens


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_compressor_replaces_a_prefix_of_the_plain_window(data: st.DataObject) -> None:
    """On any history: the compressor gets the attached turns past the protected ones."""
    # fresh ids: hypothesis replays uuids, and token caches are keyed by (message_id, version)
    history = [replace(m, message_id=unique_id("h")) for m in data.draw(histories())]
    if not any(isinstance(m, UserMessage) for m in history):
        return
    drawn = data.draw(window_options(history))
    if drawn.get("turn_statuses") is None:
        drawn.pop("turn_statuses", None)
    options = window_kwargs(drawn)
    options.pop("max_attached_tokens", None)  # a budget would be checked before compression
    plain = build_window(history, **options)
    recorder = Recorder(_summary)
    window = build_window(history, context_compressor=recorder, **options)
    start = 1 if plain.messages and isinstance(plain.messages[0], SystemMessage) else 0
    keep = options.get("compression_keep_recent_turns", 2)
    # protected: the current turn (if any) and the `keep` most recent history turns
    # (attached or not)
    starts = [int(i) for i in segment_turns(history).starts]
    history_turns = len(starts) - (options.get("current_turn", "last") == "last")
    boundary = [*starts, len(history)][history_turns - keep] if history_turns > keep else 0
    position = {id(m): i for i, m in enumerate(history)}
    cut = start
    for message in plain.messages[start:]:
        if id(message) in position and position[id(message)] >= boundary:
            break
        cut += 1
    if cut == start:
        assert recorder.calls == []
        assert _ids(window.messages) == _ids(plain.messages)
        return
    assert len(recorder.calls) == 1
    older = recorder.calls[0]
    assert older and isinstance(older[0], UserMessage)
    assert _ids(older) == _ids(plain.messages[start:cut])
    replacement = window.messages[start]
    assert replacement.message_id.startswith("summary")
    assert _ids(window.messages) == [
        *_ids(plain.messages[:start]),
        replacement.message_id,
        *_ids(plain.messages[start + len(older) :]),
    ]
    # the next turn (the current one, or with current_turn="none" a protected one, if any)
    after = window.messages[start + 1 : start + 2]
    assert all(isinstance(m, UserMessage) for m in after)
    assert after or options.get("current_turn") == "none"
    assert window.estimated_tokens == _expected_tokens(window.messages)


# -- invalid output ----------------------------------------------------------------------------


def _ok_user() -> UserMessage:
    return UserMessage("summary", message_id="s0")


INVALID: list[tuple[str, Callable[[list[Message]], Any], str]] = [
    ("a str", lambda older: "a summary", r"list of messages.*str"),
    ("None", lambda older: None, r"list of messages.*NoneType"),
    ("a dict", lambda older: {"summary": 1}, r"list of messages.*dict"),
    ("a generator", lambda older: (m for m in older), r"list of messages.*generator"),
    (
        "a non-message element",
        lambda older: [_ok_user(), {"role": "user"}],
        r"\[1\].*not a Message",
    ),
    ("a str element", lambda older: ["summary"], r"\[0\].*not a Message"),
    (
        "a UI action",
        lambda older: [_ok_user(), AgentActionMessage(payload={"b": 1}, message_id="ui-x")],
        r"UI message.*ui-x",
    ),
    (
        "a UI form",
        lambda older: [AgentFormMessage(payload={}, message_id="form-x"), _ok_user()],
        r"UI message.*form-x",
    ),
    (
        "an AiMessage first",
        lambda older: [AiMessage("summary", message_id="ai-first"), _ok_user()],
        r"start with a UserMessage.*AiMessage.*ai-first",
    ),
    (
        "a ToolMessage first",
        lambda older: [ToolMessage("c1", "r", message_id="tool-first")],
        r"start with a UserMessage.*ToolMessage.*tool-first",
    ),
    (
        "an orphan ToolMessage",
        lambda older: [_ok_user(), ToolMessage("nope", "result", message_id="orphan")],
        r"orphan_result.*orphan.*nope",
    ),
    (
        "a result before its call",
        lambda older: [
            _ok_user(),
            ToolMessage("c1", "result", message_id="early"),
            AiMessage(None, (ToolCall("c1", "f"),), message_id="late"),
        ],
        r"orphan_result.*early.*c1",
    ),
    (
        "a call without result",
        lambda older: [
            _ok_user(),
            AiMessage(None, (ToolCall("c1", "f"), ToolCall("c2", "g")), message_id="calls"),
            ToolMessage("c1", "result", message_id="r1"),
        ],
        r"missing_result.*calls.*c2",
    ),
]


@pytest.mark.parametrize(
    ("compressor", "pattern"), [(c, p) for _, c, p in INVALID], ids=[n for n, _, _ in INVALID]
)
def test_invalid_output_raises_compressor_output_error(
    compressor: Callable[[list[Message]], Any], pattern: str
) -> None:
    history = _history(4)
    before = list(history)
    with pytest.raises(CompressorOutputError, match=pattern):
        build_window(history, system=SYSTEM, context_compressor=compressor)
    assert len(history) == len(before)
    assert all(a is b for a, b in zip(history, before, strict=True))


def test_compressor_output_error_is_not_a_compression_error() -> None:
    with pytest.raises(CompressorOutputError) as info:
        build_window(_history(4), context_compressor=lambda older: 42)
    assert not isinstance(info.value, CompressionError)


# -- a failing compressor ----------------------------------------------------------------------


def test_compressor_raising_value_error_gives_compression_error() -> None:
    history = _history(4)
    before = list(history)
    cause = ValueError("summary model unavailable")

    def compressor(older: list[Message]) -> list[Message]:
        raise cause

    with pytest.raises(CompressionError, match="summary model unavailable") as info:
        build_window(history, system=SYSTEM, context_compressor=compressor)
    assert info.value.__cause__ is cause
    assert len(history) == len(before)
    assert all(a is b for a, b in zip(history, before, strict=True))


def test_compressor_raising_compression_error_passes_through() -> None:
    history = _history(4)
    before = list(history)
    error = CompressionError("the summary model timed out")

    def compressor(older: list[Message]) -> list[Message]:
        raise error

    with pytest.raises(CompressionError) as info:
        build_window(history, system=SYSTEM, context_compressor=compressor)
    assert info.value is error
    assert str(info.value) == "the summary model timed out"
    assert len(history) == len(before)
    assert all(a is b for a, b in zip(history, before, strict=True))


@pytest.mark.parametrize("error", [RuntimeError("boom"), KeyError("k"), TypeError("bad")])
def test_other_exceptions_become_compression_error(error: Exception) -> None:
    history = _history(4)
    before = list(history)

    def compressor(older: list[Message]) -> list[Message]:
        raise error

    with pytest.raises(CompressionError) as info:
        build_window(history, context_compressor=compressor)
    assert info.value.__cause__ is error
    assert all(a is b for a, b in zip(history, before, strict=True))
    assert len(history) == len(before)


def test_compressor_mutating_its_argument_does_not_touch_the_history() -> None:
    history = _history(4)
    before = list(history)

    def compressor(older: list[Message]) -> list[Message]:
        first = older[0]
        older.clear()
        return [first]

    window = build_window(history, context_compressor=compressor)
    assert len(history) == len(before)
    assert all(a is b for a, b in zip(history, before, strict=True))
    assert window.messages[0] is history[0]
