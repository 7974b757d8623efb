"""`build_window` as callers reach it: the Rust core selects the window without Python code,
the shared layer handles every other option; both agree with the reference."""

from __future__ import annotations

import copy
import gc
import pickle
import sys
from collections import OrderedDict, UserList
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentctx_fast
from agentctx_fast import (
    AgentActionMessage,
    AgentFormMessage,
    AiMessage,
    HeuristicTokenEstimator,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    TurnStatus,
    UserMessage,
    _backend,
)
from agentctx_fast.core._reference import api as reference
from agentctx_fast.core._reference.read import MessageView
from agentctx_fast.core.messages import _VIEW
from agentctx_fast.core.window import ContextWindow, WindowOptions, window_reach
from conftest import IntSubclass, StrSubclass, SystemSubclass, native_or_skip, window_outcome
from engines import build_on, compiled
from strategies import histories, window_options

SETTINGS = settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def native() -> Any:
    return native_or_skip()


_Int, _Str, _System = IntSubclass, StrSubclass, SystemSubclass


class _Estimator:
    def estimate(self, messages: list[Message]) -> int:
        return 3 * len(messages)


def _keep_older(older: list[Message]) -> list[Message]:
    return older


_LIMIT = st.one_of(
    st.integers(-2, 12),
    st.booleans(),
    st.sampled_from([2**64, 2**70, 3.0, None, "3", _Int(4)]),
)
# Values a caller may pass that are off the fast path, valid or not.
ODD_OPTIONS = {
    "system": st.sampled_from(
        [
            "",
            "\ud800 lone surrogate",
            _Str("You are a str subclass."),
            SystemMessage("You are a message.", message_id="sys"),
            _System("You are a subclass.", message_id="sub"),
            UserMessage("not a system message"),
            5,
        ]
    ),
    "max_attached_turns": _LIMIT,
    "max_attached_messages": _LIMIT,
    "compression_keep_recent_turns": _LIMIT,
    "max_attached_tokens": _LIMIT,
    "compact_completed_tool_turns": st.sampled_from([0, 1, None, "yes"]),
    "turn_statuses": st.sampled_from(
        [
            OrderedDict(),
            MappingProxyType({"t0": TurnStatus.COMPLETED}),
            {"t0": TurnStatus.FAILED},
            [],
        ]
    ),
    "token_estimator": st.one_of(
        st.builds(HeuristicTokenEstimator), st.sampled_from([_Estimator(), object()])
    ),
    "context_compressor": st.sampled_from([_keep_older, lambda older: [], 5]),
}


def _window(
    build: Callable[..., ContextWindow], history: list[Any], options: dict[str, Any]
) -> Any:
    return window_outcome(build, history, **options)


def _for_reference(options: dict[str, Any]) -> dict[str, Any]:
    """The reference's default estimator caches by (message_id, version), and hypothesis
    reuses ids across examples with other content; a fresh one per call counts afresh, as the
    Rust core's per-object count does."""
    if options.get("token_estimator") is None:
        return {**options, "token_estimator": HeuristicTokenEstimator()}
    return options


def _keywords(engine: Any) -> Callable[..., ContextWindow]:
    """`build_window` with its keywords, on ``engine``."""
    return partial(build_on, engine)


@SETTINGS
@given(st.data())
def test_entry_parity_on_plain_options(native: Any, data: st.DataObject) -> None:
    history = data.draw(histories())
    options = data.draw(window_options(history))
    # A list and a tuple are read from their item arrays, any other sequence by __getitem__.
    container = data.draw(st.sampled_from([list, tuple, UserList]))
    messages = container(history)
    assert _window(_keywords(native), messages, options) == _window(
        _keywords(reference), messages, _for_reference(options)
    )


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_entry_parity_on_odd_options(native: Any, data: st.DataObject) -> None:
    history = data.draw(histories())
    options = data.draw(window_options(history))
    names = data.draw(st.lists(st.sampled_from(sorted(ODD_OPTIONS)), min_size=1, max_size=3))
    for name in names:
        options[name] = data.draw(ODD_OPTIONS[name])
    assert _window(_keywords(native), history, options) == _window(
        _keywords(reference), history, _for_reference(options)
    )


def _history() -> list[Message]:
    return [
        UserMessage("Where is my order?", message_id="u1"),
        AiMessage("It ships today.", message_id="a1"),
        UserMessage("Thanks, and the refund?", message_id="u2"),
    ]


PACKAGE = str(Path(agentctx_fast.__file__).parent)


def _python_calls(fn: Callable[[], Any]) -> list[str]:
    """The library's Python functions that run during ``fn()``."""
    calls: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename.startswith(PACKAGE):
            calls.append(f"{frame.f_code.co_filename}:{frame.f_code.co_name}")

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls


PLAIN_CALLS = [
    ("Be brief.", 10, 100, True, 2, 500, {"u2-turn": TurnStatus.COMPLETED}),
    (None, 10, 100, False, 2, None, None),
    (SystemMessage("Be brief."), 0, 0, False, 0, 0, {}),
    (None, 2**40, 2**40, True, 2**40, 2**63, None),
]


def _plain(native: Any, history: list[Message], call: tuple[Any, ...]) -> tuple[Any, ...]:
    system, turns, messages, compact, keep, tokens, statuses = call
    if isinstance(system, str):
        system = SystemMessage(system, message_id="system")
    options = WindowOptions(turns, messages, compact, keep, None, tokens)
    return (history, system, system is None, compiled(native, options), None, statuses)


@pytest.mark.parametrize("call", PLAIN_CALLS)
def test_plain_window_runs_no_python_code(native: Any, call: tuple[Any, ...]) -> None:
    """The Rust core selects a plain window (no compressor, default estimator) end to end."""
    history = _history()
    args = _plain(native, history, call)
    native.select(*args)  # the first read caches each message's core
    assert _python_calls(lambda: native.select(*args)) == []
    # An estimator is the shared layer's: its Python code runs.
    estimator = HeuristicTokenEstimator()
    calls = _python_calls(
        lambda: build_on(native, history, token_estimator=estimator, system=call[0])
    )
    assert any("estimate" in name for name in calls)


def _selected(module: Any, history: list[Message], statuses: Any = None) -> list[Message]:
    """The messages of ``module``'s default window (its ``select``)."""
    options = compiled(module, WindowOptions())
    return list(module.select(history, None, True, options, None, statuses)[0])


def test_fast_path_window_is_a_whole_context_window(native: Any) -> None:
    history = _history()
    window = build_on(native, history, max_attached_turns=0)
    assert isinstance(window, ContextWindow)
    assert [m.message_id for m in window.messages] == ["u2"]
    assert window.estimated_tokens > 0
    assert (window.attached_turns, window.compacted_turns) == (0, 0)
    assert window.cut_by == "max_attached_turns"
    assert window.repairs == []
    assert window.dropped_turns == 1
    assert repr(window).startswith("ContextWindow(1 messages")


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_copies_and_pickles_start_without_a_kept_core(native: Any, data: st.DataObject) -> None:
    """Each core keeps what it read of a message on the message; copies, deep copies and
    pickles start without it and are read again, the same on both cores."""
    history = data.draw(histories())
    options = data.draw(window_options(history))
    _window(_keywords(native), history, options)  # keeps a core on every message it read
    _window(_keywords(reference), history, _for_reference(options))
    changed: list[Any] = []
    for message in history:
        how = data.draw(st.sampled_from(["keep", "copy", "deepcopy", "pickle"]))
        if how == "copy":
            message = copy.copy(message)
        elif how == "deepcopy":
            message = copy.deepcopy(message)
        elif how == "pickle":
            message = pickle.loads(pickle.dumps(message))
        changed.append(message)
    assert _window(_keywords(native), changed, options) == _window(
        _keywords(reference), changed, _for_reference(options)
    )


KINDS = (SystemMessage, UserMessage, AiMessage, ToolMessage, AgentActionMessage, AgentFormMessage)


class _Shouting(UserMessage):
    """A subclass of a kind."""


def test_every_message_class_derives_from_the_native_base() -> None:
    """The Rust core keeps a message's core in the extension's `MessageBase`, which every
    message class derives from (a caller's subclass too)."""
    native = native_or_skip()
    for kind in (Message, *KINDS, _Shouting):
        assert issubclass(kind, native.MessageBase), kind


@pytest.mark.parametrize("name", ["_core", "_view", "core", "view"])
def test_no_caller_reaches_a_kept_core_by_name(name: str) -> None:
    """Neither core's kept view of a message has a name a caller could set (with
    `object.__setattr__`, past the frozen dataclass) to make the two cores disagree."""
    message = UserMessage("hi", message_id="u1")
    build_on(reference, [message])
    if _backend.native is not None:
        build_on(_backend.native, [message])
    with pytest.raises(AttributeError):
        object.__setattr__(message, name, None)
    assert not hasattr(message, name)


def test_the_reference_keeps_its_view_on_each_message() -> None:
    """A window on the reference keeps a `MessageView` on every message it read (a caller's
    subclass too), in the slot `messages._VIEW` holds."""
    calls = (ToolCall("c1", "lookup", "{}"),)
    history = [
        SystemMessage("Be brief.", message_id="s"),
        _Shouting("hi", message_id="u1"),
        AiMessage(None, calls, message_id="a1"),
        ToolMessage("c1", "found", message_id="t1"),
        AgentActionMessage({"button": "ok"}, message_id="x1"),
        AgentFormMessage({"field": 1}, "open", message_id="f1"),
        AiMessage("done", message_id="a2"),
    ]
    window = build_on(reference, history)
    assert [m.message_id for m in window.messages] == ["s", "u1", "a1", "t1", "a2"]
    for message, kind in zip(history, (0, 1, 2, 3, 4, 5, 2), strict=True):
        kept = _VIEW.__get__(message)
        assert type(kept) is MessageView and kept.kind == kind, message.message_id


def _history_with_missing_results() -> list[Message]:
    calls = tuple(ToolCall(f"c{i}", "search", "{}") for i in range(3))
    return [
        UserMessage("hi", message_id="u1"),
        AiMessage(None, calls, message_id="a1"),
        AiMessage("done", message_id="a2"),
        UserMessage("next", message_id="u2"),
    ]


def test_window_list_is_never_seen_half_filled(native: Any) -> None:
    """Making the synthetic results runs Python code, and a collection then may hand any
    tracked object to Python (gc callbacks, memory profilers): the window list must be full
    by the time it exists."""
    history = _history_with_missing_results()
    seen: list[int] = []

    def inspect(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            for candidate in gc.get_objects():
                if type(candidate) is list and candidate[:1] == [history[0]]:
                    seen.append(len(list(candidate)))  # reads every item

    _selected(native, history)
    threshold = gc.get_threshold()
    gc.callbacks.append(inspect)
    gc.set_threshold(1)
    try:
        for _ in range(20):
            messages = _selected(native, history)
    finally:
        gc.set_threshold(*threshold)
        gc.callbacks.remove(inspect)
    assert [m.message_id for m in messages][-3:] == ["c2:missing", "a2", "u2"]
    assert seen, "no collection ran while windows were built"


class _ShrinksHistory:
    """A turn status whose comparison empties the history being read."""

    def __init__(self, history: list[Message]) -> None:
        self.history = history

    def __eq__(self, other: object) -> bool:
        self.history.clear()
        gc.collect()
        return True

    __hash__ = object.__hash__


@pytest.mark.parametrize("engine", ["native", "reference"])
def test_history_emptied_during_a_build_is_an_error_not_a_crash(native: Any, engine: str) -> None:
    """Each index is read once, so the messages already read stay; the first index read after
    the list was emptied is an IndexError on both cores."""
    module = native if engine == "native" else reference
    history: list[Message] = [AiMessage("stray", message_id="s0")]  # no leading system/user
    for turn in range(1, 4):
        history.append(UserMessage("q", message_id=f"u{turn}", turn_id=f"t{turn}"))
        history.append(AiMessage("a", message_id=f"a{turn}", turn_id=f"t{turn}"))
    history.append(UserMessage("e", message_id="u4", turn_id="t4"))
    statuses = {"t3": _ShrinksHistory(history), "t2": _ShrinksHistory(history)}
    with pytest.raises(IndexError):
        _selected(module, history, statuses)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_public_entry_matches_the_reference_on_odd_options(data: st.DataObject) -> None:
    """`build_window` itself (its options made once per plain override set included) against the
    reference, on plain and odd options alike, two calls in a row."""
    history = data.draw(histories())
    for _ in range(2):
        options = data.draw(window_options(history))
        names = data.draw(st.lists(st.sampled_from(sorted(ODD_OPTIONS)), max_size=2))
        for name in names:
            options[name] = data.draw(ODD_OPTIONS[name])
        assert _window(partial(agentctx_fast.build_window), history, options) == _window(
            _keywords(reference), history, _for_reference(options)
        )


@pytest.mark.parametrize("bad", [10.0, True, "10", None, -1, _Int(-1)])
def test_public_entry_checks_a_limit_after_plain_calls(bad: Any) -> None:
    history = _history()
    agentctx_fast.build_window(history)
    agentctx_fast.build_window(history, max_attached_turns=10)
    with pytest.raises(agentctx_fast.InvalidArgumentError, match=r"^max_attached_turns must be"):
        agentctx_fast.build_window(history, max_attached_turns=bad)


@pytest.mark.parametrize("before_system", [0, 3, 4, 5, 9])
def test_long_prefix_before_the_first_user_message(native: Any, before_system: int) -> None:
    """The messages read from the front to find the leading system message: the first few are
    held without allocating, the rest apart; either way the window matches the reference."""
    history: list[Message] = [
        AgentActionMessage({"step": i}, message_id=f"x{i}") for i in range(before_system)
    ]
    history.append(SystemMessage("Be brief.", message_id="s"))
    history += [AgentFormMessage({"field": i}, "open", message_id=f"f{i}") for i in range(3)]
    for turn in range(4):
        history.append(UserMessage("q", message_id=f"u{turn}"))
        history.append(AiMessage("a", message_id=f"a{turn}"))
    for options in ({}, {"max_attached_turns": 1}, {"max_attached_messages": 3}):
        outcome = _window(_keywords(native), history, options)
        assert outcome == _window(_keywords(reference), history, _for_reference(options))
        assert outcome[0][0].message_id == "s"
    assert [m.message_id for m in build_on(native, history).messages][:3] == ["s", "u0", "a0"]


def test_windows_built_inside_a_window_get_their_own_room(native: Any) -> None:
    """A collection run while a window is built (gc callbacks) builds other windows: each gets
    its own selection and message room, and every window holds its own messages."""
    history = _history_with_missing_results()
    other = [UserMessage(f"q{i}", message_id=f"o{i}") for i in range(5)]
    inner: list[list[str]] = []

    def build_another(phase: str, info: dict[str, Any]) -> None:
        if phase == "start" and len(inner) < 50:
            inner.append([m.message_id for m in _selected(native, other)])

    expected = [m.message_id for m in _selected(reference, history)]
    threshold = gc.get_threshold()
    gc.callbacks.append(build_another)
    gc.set_threshold(1)
    try:
        windows = [_selected(native, history) for _ in range(20)]
    finally:
        gc.set_threshold(*threshold)
        gc.callbacks.remove(build_another)
    assert inner, "no collection ran while windows were built"
    other_expected = [m.message_id for m in _selected(reference, other)]
    assert all(ids == other_expected for ids in inner)
    for messages in windows:
        assert [m.message_id for m in messages] == expected
    assert [m.message_id for m in _selected(native, history)] == expected


def test_window_reach_says_where_a_reader_of_the_newest_messages_may_stop() -> None:
    """`window_reach` (public for readers that page back from the newest message, as the
    runner and `memory.window` do): the index where the window's reach starts, None while the
    messages do not show it, a typed error for options that are not `WindowOptions`."""
    history = [
        UserMessage("q1", message_id="u1"),
        AiMessage("a1", message_id="a1"),
        UserMessage("q2", message_id="u2"),
        AiMessage("a2", message_id="a2"),
        UserMessage("q3", message_id="u3"),
    ]
    options = WindowOptions(max_attached_turns=1)
    assert window_reach(history, options) == 2  # the current turn and one history turn
    whole = agentctx_fast.build_window(history, options)
    assert agentctx_fast.build_window(history[2:], options).messages == whole.messages
    assert window_reach(history[2:], options) is None  # no older turn read: it may reach further
    assert window_reach(history, options, has_current_turn=False) == 4  # u3 is a history turn
    with pytest.raises(agentctx_fast.InvalidArgumentError, match="must be a WindowOptions"):
        window_reach(history, {"max_attached_turns": 1})  # type: ignore[arg-type]
