"""`build_window(history, options=None, *, system=None, turn_statuses=None, **overrides)`: one
Python entry on both backends, options compiled once into the core's `CoreOptions`, keyword
overrides checked as `WindowOptions` checks them."""

from __future__ import annotations

import copy
import dataclasses
import doctest
import inspect
import pickle
from collections import OrderedDict
from typing import Any

import pytest

import agentctx_fast
from agentctx_fast import (
    AiMessage,
    InvalidArgumentError,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    TurnStatus,
    UserMessage,
    WindowOptions,
    build_window,
)
from agentctx_fast.core import window as window_module
from agentctx_fast.core._backend import core
from agentctx_fast.core._reference import api as reference
from conftest import IntSubclass, StrSubclass, SystemSubclass, native_or_skip, window_outcome
from engines import build_on, options_on


def _history() -> list[Message]:
    return [
        SystemMessage("Stored instructions.", message_id="s0"),
        UserMessage("Where is my order?", message_id="u1", turn_id="t1"),
        AiMessage(None, (ToolCall("c1", "lookup", "{}"),), message_id="a1", turn_id="t1"),
        ToolMessage("c1", "shipped", tool_name="lookup", message_id="r1", turn_id="t1"),
        AiMessage("It ships today.", message_id="a2", turn_id="t1"),
        UserMessage("And the refund?", message_id="u2", turn_id="t2"),
    ]


_HISTORY = _history()
P = inspect.Parameter


def test_one_signature_on_both_backends() -> None:
    parameters = [
        (p.name, p.kind, p.default) for p in inspect.signature(build_window).parameters.values()
    ]
    assert parameters == [
        ("history", P.POSITIONAL_OR_KEYWORD, P.empty),
        ("options", P.POSITIONAL_OR_KEYWORD, None),
        ("system", P.KEYWORD_ONLY, None),
        ("turn_statuses", P.KEYWORD_ONLY, None),
        ("overrides", P.VAR_KEYWORD, P.empty),
    ]
    # The same Python function whichever core runs below it: no native entry, no callback.
    assert inspect.isfunction(build_window)
    assert agentctx_fast.build_window is window_module.build_window
    for gone in ("build_window", "register_build_window", "window"):
        assert not hasattr(core, gone)
        assert not hasattr(reference, gone)
    assert not hasattr(window_module, "build_window_with")
    assert not hasattr(window_module, "build_window_on")


def test_window_module_doctests_cover_build_window() -> None:
    tests = [t for t in doctest.DocTestFinder().find(window_module) if t.examples]
    assert any(t.name.endswith(".build_window") for t in tests)
    runner = doctest.DocTestRunner()
    for test in tests:
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0


def test_overrides_replace_the_options_values() -> None:
    options = WindowOptions(max_attached_turns=0, compact_completed_tool_turns=True)
    got = window_outcome(build_window, _HISTORY, options, max_attached_turns=1)
    expected = WindowOptions(max_attached_turns=1, compact_completed_tool_turns=True)
    assert got == window_outcome(build_window, _HISTORY, expected)
    assert got != window_outcome(build_window, _HISTORY, options)
    assert options.max_attached_turns == 0  # the caller's options are left as they are
    # Keywords alone override the defaults: the calls written before options existed.
    assert window_outcome(build_window, _HISTORY, max_attached_turns=0) == window_outcome(
        build_window, _HISTORY, WindowOptions(max_attached_turns=0)
    )
    assert window_outcome(build_window, _HISTORY) == window_outcome(
        build_window, _HISTORY, WindowOptions()
    )


@pytest.mark.parametrize("options", [None, WindowOptions(max_attached_turns=1)])
def test_an_unknown_override_is_a_typed_error(options: WindowOptions | None) -> None:
    with pytest.raises(InvalidArgumentError, match=r"^unknown window option 'max_turns'; "):
        build_window(_HISTORY, options, max_turns=1)
    with pytest.raises(InvalidArgumentError, match=r"^unknown window option 'messages'"):
        build_window(_HISTORY, options, messages=_HISTORY)


@pytest.mark.parametrize("bad", [True, -1, 3.0, "3", None, IntSubclass(-1)])
def test_a_bad_override_value_is_the_options_error(bad: Any) -> None:
    with pytest.raises(InvalidArgumentError, match=r"^max_attached_turns must be an int >= 0"):
        build_window(_HISTORY, max_attached_turns=bad)
    with pytest.raises(InvalidArgumentError, match=r"^max_attached_turns must be an int >= 0"):
        build_window(_HISTORY, WindowOptions(), max_attached_turns=bad)


def test_a_plain_override_is_checked_by_type_not_only_by_value() -> None:
    """Overrides are made into options once per distinct set; True equals 1 as a dict key, but
    only 1 is a limit."""
    assert build_window(_HISTORY, max_attached_turns=1).attached_turns == 1
    with pytest.raises(InvalidArgumentError, match=r"^max_attached_turns must be"):
        build_window(_HISTORY, max_attached_turns=True)
    assert build_window(_HISTORY, max_attached_turns=IntSubclass(1)).attached_turns == 1


@pytest.mark.parametrize(
    "options",
    [{"max_attached_turns": 1}, 3, "Be brief.", (1, 100, False, 2, None, "last")],
    ids=["dict", "int", "str", "tuple"],
)
def test_options_not_a_window_options_is_a_typed_error(options: Any) -> None:
    name = type(options).__name__
    with pytest.raises(
        InvalidArgumentError, match=rf"^options must be a WindowOptions, got {name}"
    ):
        build_window(_HISTORY, options)
    with pytest.raises(InvalidArgumentError, match=r"^options must be a WindowOptions"):
        build_window(_HISTORY, options, max_attached_turns=1)


def test_the_compiled_options_are_not_window_options() -> None:
    compiled = WindowOptions()._compiled
    with pytest.raises(InvalidArgumentError, match=r"^options must be a WindowOptions, got Core"):
        build_window(_HISTORY, compiled)


def _engines() -> list[Any]:
    return [native_or_skip(), reference]


REPLACED = [None, (1, 100, False, 2, None, "last"), [1, 100, False, 2, None, "last"], "x", 0]


@pytest.mark.parametrize("replaced", REPLACED, ids=[repr(r)[:12] for r in REPLACED])
def test_replaced_compiled_options_give_one_typed_error_on_both_cores(replaced: Any) -> None:
    outcomes = []
    for engine in _engines():
        options = options_on(engine, max_attached_turns=1)
        object.__setattr__(options, "_compiled", replaced)
        outcomes.append(
            window_outcome(
                lambda o=options, e=engine: window_module._build(e, _HISTORY, o, None, None)
            )
        )
    assert outcomes[0] == outcomes[1]
    assert outcomes[0] == (
        "error",
        InvalidArgumentError,
        "options were not checked: make them with WindowOptions(...)",
    )
    # The public entry on the backend in use, too.
    options = WindowOptions()
    object.__setattr__(options, "_compiled", replaced)
    assert window_outcome(build_window, _HISTORY, options) == outcomes[0]


def test_one_cores_options_are_not_the_others() -> None:
    native, python = _engines()
    for engine, other in ((native, python), (python, native)):
        options = options_on(engine)
        object.__setattr__(options, "_compiled", options_on(other)._compiled)
        with pytest.raises(InvalidArgumentError, match=r"^options were not checked"):
            window_module._build(engine, _HISTORY, options, None, None)


@pytest.mark.parametrize(
    "args",
    [
        (-1, 100, False, 2, None, "last"),
        (True, 100, False, 2, None, "last"),
        (IntSubclass(1), 100, False, 2, None, "last"),
        (1, 100, 1, 2, None, "last"),
        (1, 100, False, 2, -1, "last"),
        (1, 100, False, 2, None, "bogus"),
        (1, 100, False, 2, None, StrSubclass("last")),
    ],
)
def test_core_options_take_only_checked_values(args: tuple[Any, ...]) -> None:
    outcomes = []
    for engine in _engines():
        try:
            engine.CoreOptions(*args)
        except InvalidArgumentError as error:
            outcomes.append(str(error))
    assert outcomes == ["options were not checked: make them with WindowOptions(...)"] * 2


@pytest.mark.parametrize("engine", ["rust", "python"])
def test_compiled_options_survive_copies_and_pickles(engine: str) -> None:
    module = native_or_skip() if engine == "rust" else reference
    options = options_on(module, max_attached_turns=2**70, max_attached_tokens=2**130)
    for copied in (copy.copy, copy.deepcopy, lambda o: pickle.loads(pickle.dumps(o))):
        again = copied(options._compiled)
        assert type(again) is module.CoreOptions
        replaced = dataclasses.replace(options)
        object.__setattr__(replaced, "_compiled", again)
        assert window_outcome(build_on, module, _HISTORY, replaced) == window_outcome(
            build_on, module, _HISTORY, options
        )
    with pytest.raises((AttributeError, TypeError)):
        options._compiled.max_attached_turns = 0  # immutable on both cores


# (kwargs) a caller may pass: plain ones, odd valid ones, and misuse of every kind; the public
# entry on the backend in use gives what the shared layer gives on the other core.
CALLS: list[dict[str, Any]] = [
    {},
    {"max_attached_turns": 0},
    {"max_attached_turns": True},
    {"max_attached_turns": IntSubclass(1)},
    {"max_attached_messages": 2**70},
    {"compression_keep_recent_turns": -1},
    {"max_attached_tokens": 0},
    {"max_attached_tokens": 2**200},
    {"max_attached_tokens": 10.0},
    {"compact_completed_tool_turns": True, "compression_keep_recent_turns": 0},
    {"compact_completed_tool_turns": None},
    {"system": "Be brief."},
    {"system": StrSubclass("A str subclass.")},
    {"system": SystemSubclass("A subclass.", message_id="sub")},
    {"system": UserMessage("not a system message")},
    {"system": 5},
    {"turn_statuses": {"t1": TurnStatus.COMPLETED}},
    {"turn_statuses": OrderedDict(t1=TurnStatus.COMPLETED)},
    {"turn_statuses": [("t1", TurnStatus.COMPLETED)]},
    {"token_estimator": object()},
    {"context_compressor": lambda older: []},
    {"context_compressor": 5},
    {"current_turn": "none"},
    {"current_turn": "bogus"},
]


@pytest.mark.parametrize("kwargs", CALLS, ids=[",".join(c)[:40] or "none" for c in CALLS])
def test_public_entry_matches_the_other_core(kwargs: dict[str, Any]) -> None:
    native = native_or_skip()
    other = reference if core is native else native
    expected = window_outcome(build_on, other, _HISTORY, **kwargs)
    assert window_outcome(build_window, _HISTORY, **kwargs) == expected


def test_positional_misuse_is_python_s_own_error() -> None:
    with pytest.raises(TypeError, match=r"missing 1 required positional argument: 'history'"):
        build_window()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"takes from 1 to 2 positional arguments but 3"):
        build_window(_HISTORY, None, "Be brief.")  # type: ignore[misc]


def test_a_str_system_is_the_cached_system_message() -> None:
    window = build_window(_HISTORY, system="Cached instructions.")
    assert window.messages[0] is window_module._system_message("Cached instructions.")
    assert build_window(_HISTORY, system="Cached instructions.").messages[0] is window.messages[0]
