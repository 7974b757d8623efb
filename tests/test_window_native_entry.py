"""The native `build_window` (the public entry on the Rust backend) against the Python
implementation it hands every call off its plain path: same signature and docstring, same
window or same typed error for every argument, whichever backend is in use."""

from __future__ import annotations

import doctest
import inspect
import sys
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentctx_fast
from agentctx_fast import (
    AiMessage,
    HeuristicTokenEstimator,
    InvalidArgumentError,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    TurnStatus,
    UserMessage,
)
from agentctx_fast import window as window_module
from agentctx_fast._backend import backend
from agentctx_fast.window import ContextWindow
from conftest import IntSubclass, StrSubclass, SystemSubclass, native_or_skip, window_outcome
from strategies import histories, window_options

PYTHON_ENTRY = window_module._python_build_window


@pytest.fixture
def native(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The extension, with the Python implementation running on it too (its own core on the
    Rust backend already): the two then differ only in how they take their arguments."""
    module = native_or_skip()
    monkeypatch.setattr(window_module, "_window", module.window)
    monkeypatch.setattr(window_module, "core", module)
    return module


_Int, _Str, _System = IntSubclass, StrSubclass, SystemSubclass


class _Dict(dict[str, TurnStatus]):
    pass


class _Estimator:
    def estimate(self, messages: list[Message]) -> int:
        return 2 * len(messages)


def _history() -> list[Message]:
    return [
        SystemMessage("Stored instructions.", message_id="s0"),
        UserMessage("Where is my order?", message_id="u1", turn_id="t1"),
        AiMessage(None, (ToolCall("c1", "lookup", "{}"),), message_id="a1", turn_id="t1"),
        ToolMessage("c1", "shipped", tool_name="lookup", message_id="r1", turn_id="t1"),
        AiMessage("It ships today.", message_id="a2", turn_id="t1"),
        UserMessage("And the refund?", message_id="u2", turn_id="t2"),
    ]


_outcome = window_outcome


def test_public_entry_is_the_native_function_on_the_rust_backend() -> None:
    if backend == "rust":
        assert agentctx_fast.build_window is agentctx_fast._backend.core.build_window
        assert window_module.build_window is agentctx_fast.build_window
        assert type(agentctx_fast.build_window).__name__ == "builtin_function_or_method"
    else:
        assert agentctx_fast.build_window is PYTHON_ENTRY
        assert inspect.isfunction(agentctx_fast.build_window)


def _parameters(function: Any) -> list[tuple[str, Any, Any]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


def test_native_entry_has_the_python_signature_and_docstring(native: Any) -> None:
    assert native.build_window.__name__ == "build_window"
    assert _parameters(native.build_window) == _parameters(PYTHON_ENTRY)
    assert [name for name, _, _ in _parameters(PYTHON_ENTRY)][:2] == ["messages", "system"]
    assert inspect.getdoc(native.build_window) == inspect.getdoc(PYTHON_ENTRY)
    assert "Build the window for one model call" in (native.build_window.__doc__ or "")


def test_native_entry_docstring_example_runs(native: Any) -> None:
    parser = doctest.DocTestParser()
    test = parser.get_doctest(
        inspect.getdoc(native.build_window) or "",
        {"build_window": native.build_window},
        "build_window",
        None,
        0,
    )
    assert test.examples
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test)
    assert runner.summarize(verbose=False).failed == 0


def test_window_module_doctests_cover_build_window() -> None:
    names = [test.name for test in doctest.DocTestFinder().find(window_module) if test.examples]
    assert any(name.endswith("build_window") for name in names), names


_HISTORY = _history()

# (args, kwargs) a caller may pass: plain ones, odd valid ones, and misuse of every kind.
CALLS: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
    ((_HISTORY,), {}),
    ((_HISTORY,), {"max_attached_turns": 0}),
    ((_HISTORY,), {"max_attached_turns": True}),
    ((_HISTORY,), {"max_attached_turns": False}),
    ((_HISTORY,), {"max_attached_turns": _Int(1)}),
    ((_HISTORY,), {"max_attached_turns": _Int(-1)}),
    ((_HISTORY,), {"max_attached_turns": -1}),
    ((_HISTORY,), {"max_attached_messages": -2}),
    ((_HISTORY,), {"max_attached_messages": 2**70}),
    ((_HISTORY,), {"max_attached_messages": 2}),
    ((_HISTORY,), {"compression_keep_recent_turns": -1}),
    ((_HISTORY,), {"compression_keep_recent_turns": 2**64}),
    ((_HISTORY,), {"max_attached_tokens": 0}),
    ((_HISTORY,), {"max_attached_tokens": 2**200}),
    ((_HISTORY,), {"max_attached_tokens": -5}),
    ((_HISTORY,), {"max_attached_tokens": True}),
    ((_HISTORY,), {"max_attached_tokens": 10.0}),
    ((_HISTORY,), {"compact_completed_tool_turns": True, "compression_keep_recent_turns": 0}),
    ((_HISTORY,), {"compact_completed_tool_turns": 1}),
    ((_HISTORY,), {"compact_completed_tool_turns": None}),
    ((_HISTORY,), {"system": "Be brief."}),
    ((_HISTORY,), {"system": _Str("A str subclass.")}),
    ((_HISTORY,), {"system": "\ud800 lone surrogate"}),
    ((_HISTORY,), {"system": SystemMessage("A message.", message_id="sys")}),
    ((_HISTORY,), {"system": _System("A subclass.", message_id="sub")}),
    ((_HISTORY,), {"system": UserMessage("not a system message")}),
    ((_HISTORY,), {"system": 5}),
    ((_HISTORY,), {"turn_statuses": {"t1": TurnStatus.COMPLETED}}),
    ((_HISTORY,), {"turn_statuses": _Dict(t1=TurnStatus.FAILED)}),
    ((_HISTORY,), {"turn_statuses": OrderedDict(t1=TurnStatus.COMPLETED)}),
    ((_HISTORY,), {"turn_statuses": [("t1", TurnStatus.COMPLETED)]}),
    ((_HISTORY,), {"token_estimator": _Estimator()}),
    ((_HISTORY,), {"token_estimator": object()}),
    ((_HISTORY,), {"context_compressor": lambda older: []}),
    ((_HISTORY,), {"context_compressor": 5}),
    ((_HISTORY,), {"context_compressor": None, "token_estimator": None}),
    ((_HISTORY,), {"max_attached_turns": 1, "unknown": 1}),
    ((_HISTORY,), {"unknown": 1, "max_attached_turns": -1}),
    ((_HISTORY,), {_Str("max_attached_turns"): 0}),
    ((_HISTORY, 3), {}),
    ((_HISTORY, "Be brief."), {"max_attached_turns": 1}),
    ((), {}),
    ((), {"messages": _HISTORY}),
    ((), {"messages": _HISTORY, "system": "Be brief."}),
    ((_HISTORY,), {"messages": _HISTORY}),
    ((tuple(_HISTORY),), {}),
    (([],), {}),
    ((_HISTORY[:1],), {}),
    ((None,), {}),
    (("not a history",), {}),
    (([*_HISTORY, "junk"],), {}),
]


def _call_id(call: tuple[tuple[Any, ...], dict[str, Any]]) -> str:
    args, kwargs = call
    return f"{len(args)}-" + ",".join(f"{k}={v!r}"[:40] for k, v in kwargs.items())


@pytest.mark.parametrize("call", CALLS, ids=[_call_id(c) for c in CALLS])
def test_native_entry_matches_the_python_function(
    native: Any, call: tuple[tuple[Any, ...], dict[str, Any]]
) -> None:
    args, kwargs = call
    expected = _outcome(PYTHON_ENTRY, *args, **kwargs)
    assert _outcome(native.build_window, *args, **kwargs) == expected
    # The public entry, whichever it is, too (the plain limits it last saw do not matter).
    assert _outcome(agentctx_fast.build_window, *args, **kwargs) == expected


def test_odd_arguments_keep_their_typed_errors(native: Any) -> None:
    with pytest.raises(InvalidArgumentError, match=r"^max_attached_turns must be an int >= 0"):
        native.build_window(_HISTORY, max_attached_turns=True)
    with pytest.raises(TypeError, match=r"takes 1 positional argument but 2 were given"):
        native.build_window(_HISTORY, 3)
    with pytest.raises(TypeError, match=r"got an unexpected keyword argument 'unknown'"):
        native.build_window(_HISTORY, unknown=1)
    with pytest.raises(TypeError, match=r"missing 1 required positional argument: 'messages'"):
        native.build_window()


def test_a_str_system_is_the_cached_system_message(native: Any) -> None:
    window = native.build_window(_HISTORY, system="Cached instructions.")
    assert window.messages[0] is window_module._system_message("Cached instructions.")
    assert (
        native.build_window(_HISTORY, system="Cached instructions.").messages[0]
        is (window.messages[0])
    )


PACKAGE = str(Path(agentctx_fast.__file__).parent)


def _python_calls(function: Any) -> list[str]:
    calls: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename.startswith(PACKAGE):
            calls.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        function()
    finally:
        sys.setprofile(None)
    return calls


def test_plain_calls_run_no_python_code_and_odd_ones_run_the_python_function(
    native: Any,
) -> None:
    system = SystemMessage("Be brief.", message_id="system")
    plain = {
        "system": system,
        "max_attached_turns": 3,
        "max_attached_messages": 50,
        "compact_completed_tool_turns": True,
        "compression_keep_recent_turns": 1,
        "max_attached_tokens": 5000,
        "context_compressor": None,
        "token_estimator": None,
        "turn_statuses": {"t1": TurnStatus.COMPLETED},
    }
    native.build_window(_HISTORY, **plain)  # reads and keeps each message's core
    native.build_window(_HISTORY, system="Be brief.")  # the text's message is cached
    assert _python_calls(lambda: native.build_window(_HISTORY, **plain)) == []
    assert _python_calls(lambda: native.build_window(_HISTORY, system="Be brief.")) == []
    calls = _python_calls(lambda: native.build_window(_HISTORY, max_attached_turns=_Int(3)))
    assert "build_window" in calls
    estimator = HeuristicTokenEstimator()
    calls = _python_calls(lambda: native.build_window(_HISTORY, token_estimator=estimator))
    assert "build_window" in calls and "estimate" in calls


def test_register_keeps_the_first_registration(native: Any) -> None:
    def other(*args: Any, **kwargs: Any) -> ContextWindow:
        raise AssertionError("a second registration must not replace the first")

    assert native.register_build_window(other, other) is False
    with pytest.raises(InvalidArgumentError):
        native.build_window(_HISTORY, max_attached_turns=-1)


_ODD = {
    "system": st.sampled_from(["", "Be brief.", _Str("sub"), _System("s", message_id="x"), 5]),
    "max_attached_turns": st.one_of(st.integers(-2, 12), st.booleans(), st.just(_Int(2))),
    "max_attached_messages": st.one_of(st.integers(-2, 40), st.just(2**70)),
    "compression_keep_recent_turns": st.one_of(st.integers(-1, 4), st.just(None)),
    "max_attached_tokens": st.one_of(st.none(), st.integers(-1, 3000), st.just(2**80)),
    "compact_completed_tool_turns": st.sampled_from([True, False, 0, None]),
    "turn_statuses": st.sampled_from([None, {}, _Dict(), OrderedDict(), []]),
    "token_estimator": st.sampled_from([None, _Estimator()]),
}


@settings(
    max_examples=300,
    deadline=None,
    # The fixture only points the Python implementation at the extension: nothing to reset.
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(st.data())
def test_native_entry_matches_the_python_function_on_any_arguments(
    native: Any, data: st.DataObject
) -> None:
    history = data.draw(histories())
    options = data.draw(window_options(history))
    for name in data.draw(st.lists(st.sampled_from(sorted(_ODD)), max_size=3)):
        options[name] = data.draw(_ODD[name])
    assert _outcome(native.build_window, history, **options) == _outcome(
        PYTHON_ENTRY, history, **options
    )
