"""No Rust panic reaches Python: odd strings and odd containers get a typed `AgentCtxError`,
the same class and message as the pure-Python reference."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentctx_fast import (
    AgentActionMessage,
    AgentCtxError,
    AgentFormMessage,
    AiMessage,
    HeuristicTokenEstimator,
    ImagePart,
    InvalidArgumentError,
    Message,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    TurnStatus,
    UserMessage,
    WindowOptions,
)
from agentctx_fast.core._reference import api as reference
from conftest import native_or_skip
from engines import compiled

FUNCTIONS = ("segment", "validate", "message_tokens")


@pytest.fixture(scope="module")
def native() -> Any:
    return native_or_skip()


class SubUser(UserMessage):
    """A Message subclass: a real message."""


class SubTool(ToolMessage):
    """Another Message subclass."""


class Impostor:
    """Has every attribute a UserMessage has, but is not a Message."""

    def __init__(self, message_id: str, content: str) -> None:
        self.message_id = message_id
        self.content = content
        self.text = content
        self.metadata: dict[str, Any] = {}
        self.version = 0
        self.turn_id: str | None = None
        self.model_visible = True
        self._kind = 1
        self.tool_calls: tuple[ToolCall, ...] = ()
        self.tool_call_id = "call_0"


# -- strings: any code point, lone surrogates, undecodable bytes --------------------------------

SURROGATES = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
ANY_CHAR = st.one_of(st.characters(codec=None, categories=None), SURROGATES)
FUZZ = st.one_of(
    st.text(st.characters(codec=None, categories=None), max_size=30),
    st.text(ANY_CHAR, max_size=12),
    st.binary(max_size=30).map(lambda b: b.decode("utf-8", "surrogateescape")),
    st.sampled_from(["", "\ud800", "\udfff", "a\udcffb", "\x00", "订单\ud83d", "\U0010ffff"]),
)
# the same without surrogates: every str here is valid UTF-8
VALID = st.one_of(
    st.text(max_size=30),
    st.binary(max_size=30).map(lambda b: b.decode("utf-8", "replace")),
    st.sampled_from(["", "\x00", "订单", "\U0010ffff", "call_0"]),
)
# Identifiers must be valid Unicode without NUL (messages reject lone surrogates and NUL in
# them, see test_surrogate_in_an_identifier_is_rejected and test_nul_in_an_identifier_is_rejected);
# they often collide, so calls pair with results.
ID = VALID.map(lambda text: text.replace("\x00", ""))
CALL_ID = st.one_of(st.sampled_from(["call_0", "call_1", ""]), ID)
TURN_ID = st.one_of(st.none(), st.sampled_from(["T0", "T1"]), ID)
VERSION = st.one_of(st.just(0), st.integers(0, 2**63 - 1))


@st.composite
def fuzz_message(draw: st.DrawFn, valid_utf8: bool = False) -> Message:
    fuzz = VALID if valid_utf8 else FUZZ  # free text: any str, surrogates included
    call_id, turn_id = CALL_ID, TURN_ID
    common: dict[str, Any] = {
        "message_id": draw(ID),
        "turn_id": draw(turn_id),
        "version": draw(VERSION),
    }
    kind = draw(
        st.sampled_from(
            ["system", "user", "parts", "sub", "ai", "tool", "subtool", "action", "form"]
        )
    )
    if kind == "system":
        return SystemMessage(draw(fuzz), **common)
    if kind == "user":
        return UserMessage(draw(fuzz), **common)
    if kind == "parts":
        parts = draw(
            st.lists(
                st.one_of(
                    fuzz.map(TextPart),
                    fuzz.map(lambda uri: ImagePart(uri=uri)),
                ),
                max_size=3,
            )
        )
        return UserMessage(tuple(parts), **common)
    if kind == "sub":
        return SubUser(draw(fuzz), **common)
    if kind == "ai":
        calls = draw(st.lists(st.builds(ToolCall, call_id, ID, fuzz), max_size=3).map(tuple))
        return AiMessage(draw(st.one_of(st.none(), fuzz)), calls, **common)
    if kind in ("tool", "subtool"):
        cls = ToolMessage if kind == "tool" else SubTool
        return cls(
            draw(call_id),
            draw(fuzz),
            tool_name=draw(st.one_of(st.none(), ID)),
            is_error=draw(st.booleans()),
            **common,
        )
    if kind == "action":
        return AgentActionMessage(payload={"k": draw(fuzz)}, **common)
    return AgentFormMessage(payload=None, status=draw(st.one_of(st.none(), fuzz)), **common)


fuzz_history = st.lists(fuzz_message(), max_size=25)
valid_history = st.lists(fuzz_message(valid_utf8=True), max_size=25)


# -- outcomes -----------------------------------------------------------------------------------


def _outcome(fn: Callable[[], Any]) -> Any:
    """The result (arrays as lists), or ("error", class, message) for an AgentCtxError.

    Anything else raised, a pyo3 PanicException (a BaseException) included, fails the test.
    """
    try:
        result = fn()
    except AgentCtxError as error:
        return ("error", type(error), str(error))
    except BaseException as error:  # a pyo3 panic is not an Exception
        pytest.fail(f"raised {type(error).__module__}.{type(error).__name__}: {error!r}")
    if isinstance(result, tuple) and result and isinstance(result[0], np.ndarray):
        return tuple(a.tolist() for a in result)
    if isinstance(result, np.ndarray):
        return result.tolist()
    if isinstance(result, tuple):
        return tuple(result)
    return result


def _same(native_fn: Callable[[], Any], reference_fn: Callable[[], Any], what: str) -> None:
    got = _outcome(native_fn)
    expected = _outcome(reference_fn)
    assert got == expected, what


@st.composite
def select_args(
    draw: st.DrawFn, history: list[Message], valid_utf8: bool = False
) -> tuple[Any, ...]:
    turn_ids = sorted({m.turn_id for m in history if m.turn_id is not None})
    statuses = (
        st.dictionaries(st.sampled_from(turn_ids), st.sampled_from(list(TurnStatus)))
        if turn_ids
        else st.just({})
    )
    system = draw(
        st.one_of(
            st.none(),
            (VALID if valid_utf8 else FUZZ).map(lambda t: SystemMessage(t, message_id="system")),
        )
    )
    counter = draw(st.sampled_from([None, "heuristic"]))
    use_leading_system = draw(st.booleans())
    options = WindowOptions(
        max_attached_turns=draw(st.integers(0, 12)),
        max_attached_messages=draw(st.integers(0, 60)),
        compact_completed_tool_turns=draw(st.booleans()),
        compression_keep_recent_turns=draw(st.integers(0, 4)),
        max_attached_tokens=draw(st.one_of(st.none(), st.integers(0, 600))),
    )
    return (
        history,
        system,
        use_leading_system,
        options,  # compiled for each core by `_on`
        HeuristicTokenEstimator().estimate if counter else None,
        draw(st.one_of(st.none(), statuses)),
    )


# -- the main property --------------------------------------------------------------------------


def _on(module: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """``select``'s ``args`` for ``module``: the `WindowOptions` compiled for that core and a
    new estimator (one shared by both cores would answer the second call from the first call's
    cache, and fuzzed histories reuse message ids, so the two could differ)."""
    estimator = None if args[4] is None else HeuristicTokenEstimator().estimate
    return (*args[:3], compiled(module, args[3]), estimator, *args[5:])


def _check_all(native: Any, history: list[Message], args: tuple[Any, ...]) -> None:
    _same(
        lambda: native.select(*_on(native, args)),
        lambda: reference.select(*_on(reference, args)),
        "select",
    )
    for name in FUNCTIONS:
        _same(
            lambda name=name: getattr(native, name)(history),
            lambda name=name: getattr(reference, name)(history),
            name,
        )
    for end in {0, len(history) // 2, len(history)}:
        _same(
            lambda end=end: native.count_turns(history, end),
            lambda end=end: reference.count_turns(history, end),
            f"count_turns(end={end})",
        )
    for message in history:
        for text in (getattr(message, "text", None), message.message_id, message.turn_id):
            if isinstance(text, str):
                _same(
                    lambda text=text: native.count_text(text),
                    lambda text=text: reference.count_text(text),
                    f"count_text({text!r})",
                )


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_fuzzed_strings_never_panic_and_match_the_reference(
    native: Any, data: st.DataObject
) -> None:
    """Any str, lone surrogates and surrogateescape'd bytes included, in every string field."""
    history = data.draw(fuzz_history)
    _check_all(native, history, data.draw(select_args(history)))


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_fuzzed_valid_unicode_never_panics_and_matches_the_reference(
    native: Any, data: st.DataObject
) -> None:
    """The same with valid UTF-8 only, so a surrogate failure cannot hide other ones."""
    history = data.draw(valid_history)
    _check_all(native, history, data.draw(select_args(history, valid_utf8=True)))


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(st.text(ANY_CHAR), st.binary().map(lambda b: b.decode("utf-8", "surrogateescape")))
)
def test_count_text_on_any_str(native: Any, text: str) -> None:
    _same(lambda: native.count_text(text), lambda: reference.count_text(text), "count_text")
    assert isinstance(native.count_text(text), int)


@pytest.mark.parametrize("text", ["\ud800", "\udfff" * 100, "a\ud83d", "\ud83d\ude00", "\x00" * 5])
def test_count_text_on_surrogates(native: Any, text: str) -> None:
    _same(lambda: native.count_text(text), lambda: reference.count_text(text), "count_text")


@pytest.mark.parametrize("value", [None, 1, b"bytes", ["a"], object()])
def test_count_text_rejects_non_str(native: Any, value: Any) -> None:
    got = _outcome(lambda: native.count_text(value))
    expected = _outcome(lambda: reference.count_text(value))
    assert got[0] == "error", got
    assert got == expected


# -- containers that are not lists, objects that are not messages -------------------------------


def _generator() -> Iterator[Message]:
    yield UserMessage("hi", message_id="g0")


CONTAINERS: list[tuple[str, Callable[[], Any]]] = [
    ("empty-dict", lambda: {}),
    ("dict", lambda: {0: UserMessage("hi", message_id="d0")}),
    ("generator", _generator),
    ("None", lambda: None),
    ("str", lambda: "hello"),
    ("int", lambda: 3),
    ("set", lambda: {1, 2}),
]


@pytest.mark.parametrize("make", [c for _, c in CONTAINERS], ids=[n for n, _ in CONTAINERS])
@pytest.mark.parametrize("name", [*FUNCTIONS, "count_turns", "select"])
def test_non_list_containers_get_a_typed_error(
    native: Any, name: str, make: Callable[[], Any]
) -> None:
    def call(module: Any) -> Any:
        messages = make()
        if name == "count_turns":
            return module.count_turns(messages, 1)
        if name == "select":
            options = compiled(module, WindowOptions())
            return module.select(messages, None, True, options, None, None)
        return getattr(module, name)(messages)

    got = _outcome(lambda: call(native))
    assert got[0] == "error", f"native {name} accepted a non-list: {got!r}"
    expected = _outcome(lambda: call(reference))
    assert got == expected


def test_tuple_is_a_valid_sequence(native: Any) -> None:
    history = (UserMessage("hi", message_id="t0"), AiMessage("hello", message_id="t1"))
    for name in FUNCTIONS:
        _same(
            lambda name=name: getattr(native, name)(history),
            lambda name=name: getattr(reference, name)(history),
            name,
        )


@pytest.mark.parametrize("position", [0, 1, 2])
@pytest.mark.parametrize("name", [*FUNCTIONS, "count_turns", "select"])
def test_impostor_is_rejected_as_not_a_message(native: Any, name: str, position: int) -> None:
    history: list[Any] = [UserMessage("hi", message_id="i0"), AiMessage("hello", message_id="i1")]
    history.insert(position, Impostor("fake", "hi"))

    def call(module: Any) -> Any:
        if name == "count_turns":
            return module.count_turns(history, len(history))
        if name == "select":
            return module.select(history, None, True, compiled(module, WindowOptions()), None, None)
        return getattr(module, name)(history)

    got = _outcome(lambda: call(native))
    assert got[0] == "error", f"native {name} accepted an impostor: {got!r}"
    assert issubclass(got[1], TypeError)
    assert f"[{position}]" in got[2] and "not a Message" in got[2] and "Impostor" in got[2]
    assert got == _outcome(lambda: call(reference))


def test_message_subclasses_are_messages(native: Any) -> None:
    history: list[Message] = [
        SubUser("where is ORD-1?", message_id="s0"),
        AiMessage(None, (ToolCall("call_0", "get_order"),), message_id="s1"),
        SubTool("call_0", "shipped", message_id="s2"),
        AiMessage("it shipped", message_id="s3"),
        SubUser("thanks", message_id="s4"),
    ]
    plain: list[Message] = [
        UserMessage("where is ORD-1?", message_id="s0"),
        history[1],
        ToolMessage("call_0", "shipped", message_id="s2"),
        history[3],
        UserMessage("thanks", message_id="s4"),
    ]
    for name in FUNCTIONS:
        got = _outcome(lambda name=name: getattr(native, name)(history))
        assert got == _outcome(lambda name=name: getattr(reference, name)(history)), name
        assert got == _outcome(lambda name=name: getattr(native, name)(plain)), name
    options = WindowOptions(compact_completed_tool_turns=True, compression_keep_recent_turns=0)
    args = (history, None, True, options, None, None)
    got_select = _outcome(lambda: native.select(*_on(native, args)))
    assert got_select == _outcome(lambda: reference.select(*_on(reference, args)))
    assert [m.message_id for m in got_select[0]] == ["s0", "s3", "s4"]


@pytest.mark.parametrize(
    "junk",
    [None, 0, "user", b"\xff", {"role": "user"}, ["nested"], Impostor("x", "y"), UserMessage],
    ids=["None", "int", "str", "bytes", "dict", "list", "impostor", "class"],
)
def test_junk_element_in_fuzzed_history(native: Any, junk: Any) -> None:
    history: list[Any] = [
        UserMessage("\ud800 hi", message_id="j0"),
        junk,
        AiMessage("ok", message_id="j1"),
    ]
    for name in FUNCTIONS:
        got = _outcome(lambda name=name: getattr(native, name)(history))
        assert got[0] == "error"
        assert "[1]" in got[2]
        assert got == _outcome(lambda name=name: getattr(reference, name)(history)), name


S = "\ud800"
ESCAPED = b"\xff\xfe".decode("utf-8", "surrogateescape")
# Free text may hold lone surrogates; both cores count it the same way.
SURROGATE_TEXT: dict[str, list[Message]] = {
    "text": [UserMessage(S, message_id="u"), AiMessage(S, message_id="a")],
    "ToolCall.arguments": [
        UserMessage("q", message_id="u"),
        AiMessage(None, (ToolCall("c", "f", S),), message_id="a"),
        ToolMessage("c", ESCAPED, message_id="t"),
    ],
}
# Identifiers may not: they are keys in the stores and ids in model APIs.
SURROGATE_IDS: dict[str, Callable[[], object]] = {
    "message_id": lambda: UserMessage("q", message_id=S),
    "escaped-bytes-id": lambda: UserMessage("q", message_id=ESCAPED),
    "turn_id": lambda: UserMessage("q", message_id="u", turn_id=S),
    "tool_call_id": lambda: ToolMessage(S, "r", message_id="t"),
    "tool_name": lambda: ToolMessage("c", "r", tool_name=S, message_id="t"),
    "ToolCall.id": lambda: ToolCall(S, "f"),
    "ToolCall.name": lambda: ToolCall("c", S),
}


@pytest.mark.parametrize("field", list(SURROGATE_IDS))
def test_surrogate_in_an_identifier_is_rejected(field: str) -> None:
    with pytest.raises(InvalidArgumentError, match="lone surrogate"):
        SURROGATE_IDS[field]()


# NUL too: PostgreSQL text columns cannot hold it, so no store may be given it.
NUL_IDS: dict[str, tuple[str, Callable[[], object]]] = {
    "message_id": ("message_id", lambda: UserMessage("q", message_id="u\x00")),
    "turn_id": ("message 'u' turn_id", lambda: UserMessage("q", message_id="u", turn_id="\x00")),
    "tool_call_id": (
        "message 't' tool_call_id",
        lambda: ToolMessage("c\x00", "r", message_id="t"),
    ),
    "tool_name": (
        "message 't' tool_name",
        lambda: ToolMessage("c", "r", tool_name="\x00f", message_id="t"),
    ),
    "ToolCall.id": ("ToolCall.id", lambda: ToolCall("\x00", "f")),
    "ToolCall.name": ("ToolCall.name", lambda: ToolCall("c", "f\x00")),
}


@pytest.mark.parametrize("field", list(NUL_IDS))
def test_nul_in_an_identifier_is_rejected(field: str) -> None:
    what, build = NUL_IDS[field]
    with pytest.raises(InvalidArgumentError, match=rf"^{re.escape(what)} must not contain NUL"):
        build()


@pytest.mark.parametrize("field", list(SURROGATE_TEXT))
@pytest.mark.parametrize("name", [*FUNCTIONS, "count_turns", "select"])
def test_lone_surrogate_in_free_text(native: Any, name: str, field: str) -> None:
    history = SURROGATE_TEXT[field]

    def call(module: Any) -> Any:
        if name == "count_turns":
            return module.count_turns(history, len(history))
        if name == "select":
            return module.select(history, None, True, compiled(module, WindowOptions()), None, None)
        return getattr(module, name)(history)

    _same(lambda: call(native), lambda: call(reference), f"{name} with a surrogate in {field}")
