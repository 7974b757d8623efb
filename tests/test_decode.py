"""The fast decoding of message records (`serializer._fast_message`, `_native.decode_message`).

Three decoders must agree on every record: the checked path alone (`_load_message` through the
message classes, the reference), the Python fast path in front of it (the Python backend) and
the Rust fast path in front of that (the Rust backend). On valid records of every kind they give
equal objects with fields of the same types; on invalid, mutated or hostile records they raise
the same `SerializationError` (class and message), because only the checked path writes errors.
"""

from __future__ import annotations

import copy
import json
import pickle
import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import fields, replace
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentctx_fast import (
    AgentActionMessage,
    AgentFormMessage,
    AiMessage,
    AudioPart,
    FilePart,
    ImagePart,
    Message,
    SerializationError,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    Usage,
    UserMessage,
    build_window,
)
from agentctx_fast._backend import backend, native
from agentctx_fast.core.messages import _VIEW
from agentctx_fast.stores import serializer as serializer_module
from agentctx_fast.stores.serializer import JsonAgentStoreSerializer
from test_serializer import (
    ALL_TAGS,
    BASE,
    COMMON_MUTATIONS,
    DELETE,
    FUZZ_VALUES,
    INLINE,
    JSON_OBJECTS,
    TYPE_MUTATIONS,
    UNWRITABLE,
    Path_,
    _paths,
    mutated,
    record,
)

SERIALIZER = JsonAgentStoreSerializer()
needs_native = pytest.mark.skipif(native is None, reason="the Rust extension is not built")

# -- strategies: every field of every kind, text with astral characters and escapes ------------

# Valid Unicode (no lone surrogates) with astral characters, quotes, backslashes and controls.
TEXT = st.one_of(
    st.text(st.characters(codec="utf-8"), max_size=24),
    st.sampled_from(["", "订单 ORD-1", '"quoted" \\ back/slash', "tab\there\nnl", "😀𝄞\U0010ffff"]),
)
IDS = st.one_of(
    st.sampled_from(["u1", "call_0", "订单-7", "😀", "a\\b", 'q"q']),
    st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=16),
)
NAMES = st.one_of(
    st.none(),
    st.sampled_from(["alice", "bot_1", "A-B.c", "助手", "n😀", "x~!@#$%^&*()"]),
)
COUNTS = st.one_of(st.integers(0, 2**31), st.integers(0, 2**80))
VERSIONS = st.one_of(st.sampled_from([0, 1, 2**53 + 1, 2**63 - 1]), st.integers(0, 2**63 - 1))
METADATA = st.one_of(
    JSON_OBJECTS,
    st.just({"big": 2**70, "neg": -(2**70), "f": 1e300, "z": -0.0, "e": 1.5e-300, "dup": "x"}),
)


@st.composite
def media_parts(draw: st.DrawFn) -> ImagePart | AudioPart | FilePart:
    cls = draw(st.sampled_from([ImagePart, AudioPart, FilePart]))
    data = draw(st.one_of(st.none(), INLINE))
    uri = draw(st.one_of(st.none(), TEXT) if data is not None else TEXT)
    extra = {"detail": draw(st.sampled_from([None, "auto", "low", "high", "original"]))}
    return cls(  # type: ignore[no-any-return]
        uri=uri,
        mime_type=draw(st.one_of(st.none(), TEXT)),
        name=draw(st.one_of(st.none(), TEXT)),
        size_bytes=draw(st.one_of(st.none(), st.integers(-5, 2**70))),
        data=data,
        **(extra if cls is ImagePart else {}),
    )


@st.composite
def full_messages(draw: st.DrawFn) -> Message:
    """Any message kind with every optional field drawn."""
    common: dict[str, Any] = {
        "message_id": draw(IDS),
        "metadata": draw(METADATA),
        "version": draw(VERSIONS),
        "turn_id": draw(st.one_of(st.none(), IDS)),
    }
    kind = draw(st.sampled_from(["system", "user", "parts", "ai", "tool", "action", "form"]))
    if kind == "system":
        role = draw(st.sampled_from(["system", "developer"]))
        return SystemMessage(draw(TEXT), role=role, name=draw(NAMES), **common)
    if kind == "user":
        return UserMessage(draw(TEXT), name=draw(NAMES), **common)
    if kind == "parts":
        parts = draw(st.lists(st.one_of(st.builds(TextPart, TEXT), media_parts()), max_size=4))
        return UserMessage(tuple(parts), name=draw(NAMES), **common)
    if kind == "ai":
        calls = draw(st.lists(st.builds(ToolCall, IDS, IDS, TEXT), max_size=3))
        usage = draw(st.one_of(st.none(), st.builds(Usage, COUNTS, COUNTS, COUNTS)))
        return AiMessage(
            draw(st.one_of(st.none(), TEXT)),
            tuple(calls),
            refusal=draw(st.one_of(st.none(), TEXT)),
            name=draw(NAMES),
            usage=usage,
            **common,
        )
    if kind == "tool":
        return ToolMessage(
            draw(IDS),
            draw(TEXT),
            draw(st.one_of(st.none(), IDS)),
            draw(st.booleans()),
            **common,
        )
    payload = draw(st.one_of(st.none(), METADATA))
    if kind == "action":
        return AgentActionMessage(payload, **common)
    return AgentFormMessage(payload, draw(st.one_of(st.none(), TEXT)), **common)


def writings(message: Message, rng: random.Random) -> Iterator[bytes]:
    """The record of ``message`` as `dumps` writes it and as other JSON writers could: every
    non-ASCII character escaped (astral ones as surrogate pairs), indented, keys reordered."""
    data = SERIALIZER.dumps(message)
    yield data
    fields = json.loads(data)
    yield json.dumps(fields).encode()
    yield json.dumps(
        fields, indent=rng.choice([0, 1, "\t"]), ensure_ascii=rng.random() < 0.5
    ).encode()
    keys = list(fields)
    rng.shuffle(keys)
    yield (
        " \n" + json.dumps({key: fields[key] for key in keys}, separators=(", ", " : ")) + "\r\n"
    ).encode()


def encodings(fields: object) -> tuple[bytes, bytes]:
    """``fields`` with non-ASCII escaped, and raw (a lone surrogate then written as the three
    bytes UTF-8 forbids)."""
    raw = json.dumps(fields, ensure_ascii=False).encode("utf-8", "surrogatepass")
    return json.dumps(fields).encode(), raw


# -- the three decoders ------------------------------------------------------------------------


@contextmanager
def decoder(kind: str) -> Iterator[None]:
    """``SERIALIZER.loads`` as the ``rust`` or ``python`` backend decodes, or ``checked``:
    the decoder before the fast paths (the checked path alone, ``json.loads`` for the parse)."""
    module = serializer_module
    saved = module._decode_message, module._fast_message, module._JSON
    if kind == "rust":
        assert native is not None
        module._decode_message = native.decode_message
    else:
        module._decode_message = None
    if kind == "checked":
        module._fast_message = lambda fields: None
        module._JSON = SimpleNamespace(  # the parse as the decoder before the fast paths made it
            decode=lambda text: json.loads(
                text, parse_constant=module._refuse_constant, parse_float=module._finite_float
            )
        )
    try:
        yield
    finally:
        module._decode_message, module._fast_message, module._JSON = saved


def outcome(kind: str, data: bytes) -> object:
    """What ``loads`` gives: the object, or the error's class and message."""
    with decoder(kind):
        try:
            return SERIALIZER.loads(data)
        except SerializationError as error:
            return (type(error), str(error))


DECODERS = ["checked", "python", *(["rust"] if native is not None else [])]


def assert_identical(got: object, want: object) -> None:
    """Same class, equal, and every field and JSON value of the same type, deeply (``==``
    alone says ``1 == 1.0 == True`` and ``0.0 == -0.0``)."""
    assert type(got) is type(want)
    if isinstance(want, (Message, ToolCall, Usage, TextPart, ImagePart, AudioPart, FilePart)):
        for field in fields(want):  # type: ignore[arg-type]
            assert_identical(getattr(got, field.name), getattr(want, field.name))
        assert got == want
        if isinstance(want, Message):  # a decoded message keeps no view yet
            with pytest.raises(AttributeError):
                _VIEW.__get__(got)
    elif isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for a, b in zip(got, want, strict=True):
            assert_identical(a, b)
    elif isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want)
        for key in want:
            assert_identical(got[key], want[key])
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want)
        for a, b in zip(got, want, strict=True):
            assert_identical(a, b)
    elif isinstance(want, float):
        assert repr(got) == repr(want)  # -0.0 and 0.0 differ
    else:
        assert got == want


def assert_same_outcomes(data: bytes) -> object:
    results = [outcome(kind, data) for kind in DECODERS]
    for result in results[1:]:
        if isinstance(results[0], tuple):
            assert result == results[0]
        else:
            assert_identical(result, results[0])
    return results[0]


# -- valid records -------------------------------------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(full_messages(), st.randoms(use_true_random=False))
def test_every_valid_record_decodes_identically(message: Message, rng: random.Random) -> None:
    for data in writings(message, rng):
        decoded = assert_same_outcomes(data)
        assert_identical(decoded, message)


def _fast_path_vouches_for(message: Message) -> bool:
    """What the Rust fast path must take itself among the records `dumps` writes: all but
    participant names outside printable ASCII (it leaves the Unicode name rule to Python)."""
    name = getattr(message, "name", None)
    return name is None or all(0x21 <= ord(c) < 0x7F for c in name)


@settings(max_examples=300, deadline=None)
@given(full_messages())
def test_the_fast_paths_take_every_record_dumps_writes(message: Message) -> None:
    data = SERIALIZER.dumps(message)
    fast = serializer_module._fast_message(json.loads(data))
    assert fast is not None
    assert_identical(fast, message)
    if native is not None:
        rust = native.decode_message(data)
        if _fast_path_vouches_for(message):
            assert rust is not None
        if rust is not None:
            assert_identical(rust, message)


@needs_native
def test_the_backend_in_use_decodes_with_its_fast_path() -> None:
    expected = native.decode_message if backend == "rust" else None  # type: ignore[union-attr]
    assert serializer_module._decode_message is expected


def test_decoded_messages_behave_like_constructed_ones() -> None:
    for name, obj in BASE.items():
        if not isinstance(obj, Message):
            continue
        for kind in DECODERS:
            with decoder(kind):
                decoded = SERIALIZER.loads(SERIALIZER.dumps(obj))
            assert_identical(decoded, obj)
            assert_identical(pickle.loads(pickle.dumps(decoded)), obj)
            assert_identical(copy.deepcopy(decoded), obj)
            assert replace(decoded, version=9) == replace(obj, version=9), name
            assert repr(decoded) == repr(obj)
            with pytest.raises(AttributeError):
                decoded.message_id = "other"  # type: ignore[misc]
    history = [m for m in BASE.values() if isinstance(m, Message) and m.model_visible]
    want = build_window(history, max_attached_turns=5)
    for kind in DECODERS:
        with decoder(kind):
            decoded = [SERIALIZER.loads(SERIALIZER.dumps(m)) for m in history]
        got = build_window(decoded, max_attached_turns=5)
        assert got.messages == want.messages
        assert got.estimated_tokens == want.estimated_tokens > 0


# -- invalid, mutated and hostile records ------------------------------------------------------

TARGETED = [
    pytest.param(name, path, value, id=f"{name}-{'.'.join(map(str, path))}-{index}")
    for name, extra in TYPE_MUTATIONS.items()
    if name != "state"
    for index, (path, value) in enumerate(extra + COMMON_MUTATIONS)
] + [
    pytest.param(*param.values, id=f"unwritable-{param.id}")
    for param in UNWRITABLE
    if param.values[0] != "state"
]
EXTRA_MUTATIONS: list[tuple[str, Path_, object]] = [
    ("system", ("role",), "developer"),
    ("system", ("role",), "user"),
    ("system", ("role",), None),
    ("system", ("role",), 1),
    ("system", ("name",), "bot"),
    ("system", ("name",), "a b"),
    ("system", ("name",), ""),
    ("system", ("name",), "a\x00b"),
    ("system", ("name",), "a\x1cb"),  # whitespace to Python's \s
    ("system", ("name",), "a\u00a0b"),
    ("system", ("name",), "助手"),
    ("system", ("name",), "a|b"),
    ("user_text", ("name",), 5),
    ("user_text", ("content",), []),
    ("user_parts", ("content", 1, "detail"), "low"),
    ("user_parts", ("content", 1, "detail"), "huge"),
    ("user_parts", ("content", 1, "detail"), None),
    ("user_parts", ("content", 1, "detail"), 1),
    ("user_parts", ("content", 2, "detail"), "low"),  # audio has no detail
    ("user_parts", ("content", 2, "data"), "AB=="),  # non-zero bits under the padding
    ("user_parts", ("content", 2, "data"), ""),
    ("user_parts", ("content", 2, "data"), "AA=="),
    ("user_parts", ("content", 1, "size_bytes"), -1),
    ("user_parts", ("content", 1, "size_bytes"), 2**70),
    ("user_parts", ("content", 1, "size_bytes"), None),
    ("user_parts", ("content", 3, "uri"), None),
    ("user_parts", ("content", 0), {"type": "text", "text": "x", "text ": "y"}),
    ("ai", ("usage",), {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}),
    ("ai", ("usage",), {"prompt_tokens": -1, "completion_tokens": 2, "total_tokens": 3}),
    ("ai", ("usage",), {"prompt_tokens": 1, "completion_tokens": 2}),
    ("ai", ("usage",), {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3, "x": 0}),
    ("ai", ("usage",), {"prompt_tokens": True, "completion_tokens": 2, "total_tokens": 3}),
    ("ai", ("usage",), {"prompt_tokens": 1.0, "completion_tokens": 2, "total_tokens": 3}),
    ("ai", ("usage",), [1, 2, 3]),
    ("ai", ("usage",), None),
    ("ai", ("refusal",), "no"),
    ("ai", ("refusal",), 1),
    ("ai", ("text",), None),
    ("ai", ("text",), DELETE),
    ("ai", ("tool_calls", 0, "name"), "a\x00"),
    ("ai", ("tool_calls",), []),
    ("tool", ("tool_name",), None),
    ("tool", ("tool_name",), DELETE),
    ("tool", ("tool_name",), "x\x00"),
    ("tool", ("tool_call_id",), ""),
    ("tool", ("version",), 2**63 - 1),
    ("tool", ("version",), 2**63),
    ("tool", ("version",), -(2**63)),
    ("tool", ("turn_id",), "t\x00"),
    ("tool", ("message_id",), "\x00"),
    ("tool", ("tool_call_id",), "c\x00"),
    ("ai", ("tool_calls", 0, "id"), "\x00c"),
    ("action", ("payload",), DELETE),
    ("action", ("payload",), {"n": 2**70, "f": -0.0}),
    ("form", ("status",), DELETE),
    ("form", ("metadata",), {"k": {"k": {"k": [[[[]]]]}}}),
]


@pytest.mark.parametrize(("name", "path", "value"), TARGETED)
def test_every_targeted_mutation_gives_the_same_outcome(
    name: str, path: Path_, value: object
) -> None:
    fields = mutated(record(BASE[name]), path, value)
    for data in encodings(fields):
        assert isinstance(assert_same_outcomes(data), tuple)  # each of these is refused


@pytest.mark.parametrize(("name", "path", "value"), EXTRA_MUTATIONS, ids=repr)
def test_more_mutations_give_the_same_outcome(name: str, path: Path_, value: object) -> None:
    fields = mutated(record(BASE[name]), path, value)
    for data in encodings(fields):
        assert_same_outcomes(data)


# Text edits no structured mutation makes: escapes, numbers and literals only some parsers
# take, whitespace JSON does not allow, duplicate keys, raw control characters, bad UTF-8.
SNIPPETS = [
    b"\\ud800",
    b"\\udc00",
    b"\\ud83d\\ude00",
    b"\\ud83d",
    b"\\u0000",
    b"\\x41",
    b"\\/",
    b"\x01",
    b"\x00",
    b"\xff",
    b"\xc3",
    b"\xed\xa0\x80",
    b"NaN",
    b"-Infinity",
    b"1e400",
    b"1E5",
    b"-0",
    b"01",
    b"1.",
    b".5",
    b"1" * 5000,
    b"9223372036854775808",
    b"-9223372036854775809",
    b"true",
    b"null",
    b",",
    b":",
    b"{",
    b"}",
    b"[",
    b"]",
    b'"',
    b" ",
    b"\t",
    b"\x0b",
    b"\xc2\xa0",
    b"\xef\xbb\xbf",
    b'"type":"user",',
    b'"message_id":"dup",',
    b'"version":1,',
    b'"version":0,',
    b'"metadata":{},',
    b'"content":"x",',
    b'"turn_id":null,',
    b'"x":1,',
]


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from([n for n, obj in BASE.items() if isinstance(obj, Message)]),
    edits=st.lists(
        st.tuples(
            st.integers(0, 10**6),
            st.integers(0, 3),
            st.one_of(st.sampled_from(SNIPPETS), st.binary(max_size=3)),
        ),
        min_size=1,
        max_size=3,
    ),
)
def test_text_edits_give_the_same_outcome(name: str, edits: list[tuple[int, int, bytes]]) -> None:
    data = SERIALIZER.dumps(BASE[name])
    for where, cut, snippet in edits:
        where %= len(data) + 1
        data = data[:where] + snippet + data[where + cut :]
    assert_same_outcomes(data)


@settings(max_examples=400, deadline=None)
@given(
    message=full_messages(),
    edits=st.lists(
        st.tuples(st.integers(0, 10**6), st.one_of(st.just(DELETE), FUZZ_VALUES, ALL_TAGS)),
        min_size=1,
        max_size=3,
    ),
)
def test_structured_mutations_give_the_same_outcome(
    message: Message, edits: list[tuple[int, object]]
) -> None:
    fields = json.loads(SERIALIZER.dumps(message))
    for selector, value in edits:
        paths = list(_paths(fields))
        fields = mutated(fields, paths[selector % len(paths)], value)
    assert_same_outcomes(json.dumps(fields).encode())


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"null",
        b"[]",
        b"{}",
        b'{"type":"compression_state"}',
        SERIALIZER.dumps(BASE["state"]),
        b"[" * 100_000,
        b'{"type":"user","message_id":"u","version":0,"content":"x","metadata":'
        + b'{"a":' * 200
        + b"1"
        + b"}" * 200
        + b"}",
        b'{"type":"user","message_id":"u","version":0,"content":"x","metadata":'
        + b'{"a":' * 5000
        + b"1"
        + b"}" * 5000
        + b"}",
        b'{"type":"user","message_id":"u","version":0,"content":"x","metadata":{"n":'
        + b"7" * 5000
        + b"}}",
    ],
    ids=[
        "empty",
        "null",
        "array",
        "object",
        "state-tag",
        "state",
        "deep-array",
        "deep-200",
        "deep-5000",
        "digits-5000",
    ],
)
def test_edge_records_give_the_same_outcome(data: bytes) -> None:
    assert_same_outcomes(data)


def test_a_byte_order_mark_is_refused_as_json_loads_refuses_it() -> None:
    data = b"\xef\xbb\xbf" + SERIALIZER.dumps(BASE["ai"])
    with pytest.raises(json.JSONDecodeError) as expected:
        json.loads(data.decode("utf-8"))
    for kind in DECODERS:
        assert outcome(kind, data) == (
            SerializationError,
            f"stored record is not valid UTF-8 JSON: {expected.value}",
        )


@needs_native
def test_decode_message_takes_only_bytes() -> None:
    assert native is not None
    for bad in ("{}", bytearray(b"{}"), memoryview(b"{}"), None, 1):
        with pytest.raises(TypeError):
            native.decode_message(bad)  # type: ignore[arg-type]
    assert native.decode_message(b"{}") is None


def test_a_custom_serializer_keeps_its_own_loads() -> None:
    seen: list[bytes] = []

    class Counting(JsonAgentStoreSerializer):
        def loads(self, data: bytes) -> Any:
            seen.append(data)
            return super().loads(data)

    from agentctx_fast.stores.serializer import load_message

    data = SERIALIZER.dumps(BASE["ai"])
    assert load_message(Counting(), data) == BASE["ai"]
    assert seen == [data]


@needs_native
def test_replacing_library_names_after_import_changes_neither_decoder() -> None:
    # Both decoders build the classes they captured on import: a module attribute replaced
    # later (as a hostile caller might) is not a class either one loads.
    import agentctx_fast.core.messages as messages_module

    class Fake(AiMessage):
        pass

    data = SERIALIZER.dumps(BASE["ai"])
    saved = messages_module.AiMessage
    messages_module.AiMessage = Fake  # type: ignore[misc]
    try:
        for kind in DECODERS:
            assert type(outcome(kind, data)) is AiMessage
    finally:
        messages_module.AiMessage = saved  # type: ignore[misc]


def test_patched_class_checks_change_neither_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    # A valid record is built from its checked fields on both fast paths, never through the
    # class's __init__: a caller patching a class's checks sees the same objects on both.
    calls: list[str] = []

    def spy(self: Any) -> None:
        calls.append(type(self).__name__)

    for cls in (AiMessage, ToolCall, UserMessage, ImagePart):
        monkeypatch.setattr(cls, "__post_init__", spy)
    records = [SERIALIZER.dumps(BASE[name]) for name in ("ai", "user_parts")]
    for kind in [k for k in DECODERS if k != "checked"]:
        for data in records:
            assert_identical(outcome(kind, data), SERIALIZER.loads(data))
    assert calls == []
    outcome("checked", records[0])  # the checked path builds through the classes
    assert calls == ["ToolCall", "ToolCall", "AiMessage"]
