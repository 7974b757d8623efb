"""The Rust core and the pure-Python reference agree on every input, errors included."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentctx_fast.core._reference import api as reference
from agentctx_fast.core.types import WindowOptions
from conftest import native_or_skip, select_args
from engines import build_on, compiled
from strategies import histories, tool_loop_histories, tool_loop_options, window_options

SETTINGS = settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def native() -> Any:
    return native_or_skip()


def _outcome(fn: Callable[[], Any]) -> Any:
    try:
        result = fn()
    except Exception as error:  # parity covers the class and the message
        return ("error", type(error), str(error))
    if isinstance(result, tuple) and result and isinstance(result[0], np.ndarray):
        return tuple(a.tolist() for a in result)
    if isinstance(result, np.ndarray):
        return result.tolist()
    return result


@SETTINGS
@given(st.data())
def test_select_parity(native: Any, data: st.DataObject) -> None:
    history = data.draw(histories())
    options = data.draw(window_options(history))
    assert _outcome(lambda: native.select(*select_args(native, history, options))) == _outcome(
        lambda: reference.select(*select_args(reference, history, options))
    )


@SETTINGS
@given(histories())
def test_whole_history_parity(native: Any, history: list[Any]) -> None:
    for name in ("segment", "validate", "message_tokens"):
        assert _outcome(lambda name=name: getattr(native, name)(history)) == _outcome(
            lambda name=name: getattr(reference, name)(history)
        ), name
    for end in (0, len(history) // 2, len(history)):
        assert _outcome(lambda end=end: native.count_turns(history, end)) == _outcome(
            lambda end=end: reference.count_turns(history, end)
        )


@settings(max_examples=500, deadline=None)
@given(st.data())
def test_bad_elements_give_the_same_error(native: Any, data: st.DataObject) -> None:
    history = data.draw(histories())
    junk = data.draw(
        st.one_of(
            st.none(),
            st.integers(),
            st.text(),
            st.binary(),
            st.dictionaries(st.text(), st.integers()),
        )
    )
    history.insert(data.draw(st.integers(0, len(history))), junk)
    options = data.draw(window_options([m for m in history if hasattr(m, "turn_id")]))
    got = _outcome(lambda: native.select(*select_args(native, history, options)))
    assert got == _outcome(lambda: reference.select(*select_args(reference, history, options)))
    for name in ("segment", "validate", "message_tokens"):
        assert _outcome(lambda name=name: getattr(native, name)(history)) == _outcome(
            lambda name=name: getattr(reference, name)(history)
        ), name


def test_estimator_callback_is_used_the_same_way(native: Any) -> None:
    from conftest import build_message

    history = [
        build_message({"t": t, "id": f"p{i}"}) for i, t in enumerate("user ai user ai user".split())
    ]
    seen_native: list[list[str]] = []
    seen_reference: list[list[str]] = []

    def counter(log: list[list[str]]) -> Callable[[Any], int]:
        def count(messages: Any) -> int:
            log.append([m.message_id for m in messages])
            return 7 * len(messages)

        return count

    a = list(select_args(native, history, {"max_attached_tokens": 30}))
    a[4] = counter(seen_native)
    b = list(select_args(reference, history, {"max_attached_tokens": 30}))
    b[4] = counter(seen_reference)
    assert native.select(*a) == reference.select(*b)
    assert seen_native == seen_reference and seen_native


def _window_outcome(fn: Callable[[], Any]) -> Any:
    """A whole window as comparable values (messages by type, ids and text), or the error."""
    try:
        window = fn()
    except Exception as error:
        return ("error", type(error), str(error))
    return (
        [
            (
                type(m).__name__,
                m.message_id,
                getattr(m, "text", None),
                getattr(m, "tool_call_id", None),
            )
            for m in window.messages
        ],
        window.estimated_tokens,
        window.attached_turns,
        window.dropped_turns,
        window.compacted_turns,
        window.cut_by,
        window.repairs,
    )


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_whole_window_parity_with_a_tool_loop(native: Any, data: st.DataObject) -> None:
    """Both cores, through the shared layer, give the same window, placeholders included."""
    history = data.draw(st.one_of(histories(), tool_loop_histories()))
    options = data.draw(tool_loop_options(history))
    assert _window_outcome(lambda: build_on(native, history, **options)) == (
        _window_outcome(lambda: build_on(reference, history, **options))
    )


def _reach_options(options: dict[str, Any]) -> WindowOptions:
    """The `WindowOptions` of a window's options dict (its window limits only)."""
    return WindowOptions(
        **{
            name: value
            for name, value in options.items()
            if name not in ("system", "turn_statuses", "token_estimator")
        }
    )


def _reach_args(engine: Any, messages: list[Any], options: dict[str, Any]) -> list[Any]:
    """``engine``'s `window_reach` arguments: ``messages`` (a history's newest), a window's
    options compiled for ``engine``, and whether the window has a current turn."""
    window = _reach_options(options)
    return [messages, compiled(engine, window), window.current_turn == "last"]


class _NotOptions:
    """Not a `CoreOptions`: both cores refuse it alike."""


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_window_reach_parity(native: Any, data: st.DataObject) -> None:
    history = data.draw(histories())
    cut = data.draw(st.integers(0, len(history)))
    options = data.draw(window_options(history))
    native_args = _reach_args(native, history[cut:], options)
    reference_args = _reach_args(reference, history[cut:], options)
    if data.draw(st.integers(0, 19)) == 0:  # a wrong argument: both cores refuse it alike
        wrong: list[Any] = [None, _reach_options(options), tuple(reference_args[1]), _NotOptions()]
        choice = data.draw(st.integers(0, len(wrong) + 1))
        if choice < len(wrong):
            native_args[1] = reference_args[1] = wrong[choice]
        elif choice == len(wrong):  # the other core's options
            native_args[1], reference_args[1] = reference_args[1], native_args[1]
        else:
            native_args[2] = reference_args[2] = data.draw(st.sampled_from([0, 1, None, "last"]))
    got = _outcome(lambda: native.window_reach(*native_args))
    assert got == _outcome(lambda: reference.window_reach(*reference_args))


class _Logged(list[Any]):
    """A history that logs each index read."""

    def __init__(self, items: list[Any], log: list[int]) -> None:
        super().__init__(items)
        self.log = log

    def __getitem__(self, index: Any) -> Any:
        self.log.append(index)
        return super().__getitem__(index)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_window_reach_reads_each_index_once(native: Any, data: st.DataObject) -> None:
    """`window_reach` reads each index of the caller's sequence at most once (what it saw of a
    message stays what it saw), as `select` does, on both cores alike."""
    history = data.draw(histories())
    options = data.draw(window_options(history))
    cut = data.draw(st.integers(0, len(history)))
    outcomes = []
    for core in (native, reference):
        log: list[int] = []
        args = _reach_args(core, _Logged(history[cut:], log), options)
        outcomes.append(_outcome(lambda core=core, args=args: core.window_reach(*args)))
        assert len(log) == len(set(log)), (core.__name__, sorted(log))
    assert outcomes[0] == outcomes[1]


@pytest.mark.parametrize("kind", ["not a sequence", "junk item", "read by __getitem__"])
def test_options_are_refused_before_any_other_argument(native: Any, kind: str) -> None:
    """Options that are not the core's `CoreOptions` are refused first, alike on both cores,
    whatever else is wrong (the messages, ``has_current_turn``), and before a message is read."""
    from agentctx_fast import InvalidArgumentError, UserMessage

    log: list[int] = []
    messages: Any = {
        "not a sequence": 42,
        "junk item": ["junk", UserMessage("hi")],
        "read by __getitem__": _Logged([UserMessage("hi")], log),
    }[kind]
    for wrong in (None, _NotOptions()):
        for name in ("select", "window_reach"):
            args = (
                (messages, None, True, wrong, None, None)
                if name == "select"
                else (messages, wrong, None)
            )
            got = _outcome(lambda core=native, name=name, args=args: getattr(core, name)(*args))
            assert got == _outcome(
                lambda core=reference, name=name, args=args: getattr(core, name)(*args)
            ), name
            assert got[:2] == ("error", InvalidArgumentError), (name, got)
    assert log == []


@st.composite
def _continued_histories(draw: st.DrawFn) -> list[Any]:
    """`histories` with user messages that continue the turn of the message before them (its
    turn id): a tail starting at one does not show where its turn starts."""
    from agentctx_fast import UserMessage

    history = list(draw(histories()))
    for _ in range(draw(st.integers(0, 4))):
        position = draw(st.integers(1, max(1, len(history))))
        before = history[position - 1] if position <= len(history) else None
        if before is not None and before.turn_id is not None:
            follow = UserMessage("and", message_id=f"{before.message_id}+", turn_id=before.turn_id)
            history.insert(position, follow)
    return history


class _ThreePerMessage:
    def estimate(self, messages: Any) -> int:
        return 3 * len(messages)


def _compared(window: Any) -> Any:
    return (
        [(type(m).__name__, m.message_id, getattr(m, "text", None)) for m in window.messages],
        window.estimated_tokens,
        window.attached_turns,
        window.compacted_turns,
        window.cut_by,
        window.repairs,
    )


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_the_window_from_a_tail_s_reach_is_the_window_of_the_whole_history(
    data: st.DataObject,
) -> None:
    """The guarantee the runner's and a memory's reads rely on: when the newest messages of a
    history prove where the window's reach starts, the window of the history from there is
    the window of the whole history, whatever the turn statuses, budget and estimator (the
    window's system message given, as those readers give it), but for a ``cut_by`` of
    ``max_attached_turns``, which a memory's window gets by asking for one turn more."""
    from agentctx_fast.core._backend import core

    history = data.draw(_continued_histories())
    options = dict(data.draw(tool_loop_options(history)))
    options["system"] = options.get("system") or "Be brief."
    if data.draw(st.booleans()):
        options["token_estimator"] = _ThreePerMessage()
    users = [i for i, m in enumerate(history) if type(m).__name__ == "UserMessage"] or [0]
    cut = data.draw(st.one_of(st.integers(0, len(history)), st.sampled_from(users)))
    reach = core.window_reach(*_reach_args(core, history[cut:], options))
    if reach is None:
        return
    assert 0 <= reach <= len(history) - cut
    whole = _compared(build_on(core, history, **options))
    from_reach = _compared(build_on(core, history[cut + reach :], **options))
    if whole[-2] == "max_attached_turns":  # a window from the reach does not see that turn
        whole, from_reach = whole[:-2] + whole[-1:], from_reach[:-2] + from_reach[-1:]
    assert from_reach == whole
