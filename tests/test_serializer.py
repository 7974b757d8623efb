"""`JsonAgentStoreSerializer` and the store serialisation helpers (SPEC §3, §12, §16).

Round trips of every message type and of compression states (alone and through every store),
the closed tag registry, every malformed or hostile record, custom serializers, and corrupt data
already in a database.
"""

from __future__ import annotations

import base64
import gzip
import json
import math
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentctx_fast import (
    MAX_INLINE_BYTES,
    AgentActionMessage,
    AgentCtxError,
    AgentFormMessage,
    AiMessage,
    AudioPart,
    FilePart,
    ImagePart,
    InvalidArgumentError,
    InvalidMessageTypeError,
    Message,
    SerializationError,
    StoreError,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    UserMessage,
    VersionConflictError,
)
from agentctx_fast.compression.coordinator import CompressionState
from agentctx_fast.stores import AgentStoreSerializer, JsonAgentStoreSerializer
from agentctx_fast.stores.serializer import dump, load_message, load_state
from store_fixtures import make_store, new_conversation_id

SERIALIZER = JsonAgentStoreSerializer()
TAGS: dict[type, str] = {
    SystemMessage: "system",
    UserMessage: "user",
    AiMessage: "ai",
    ToolMessage: "tool",
    AgentActionMessage: "action",
    AgentFormMessage: "form",
    CompressionState: "compression_state",
}
Record = CompressionState | Message

# -- strategies --------------------------------------------------------------------------------

# Valid UTF-8 text only: no surrogates.
TEXT = st.text(st.characters(codec="utf-8"), max_size=30)
# Identifiers cannot hold NUL (see test_nul_in_ids_is_refused_by_every_store).
KEY_TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=12)
ID_TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=30)
IDS = st.one_of(st.sampled_from(["u1", "call_0", "ORD-2024-001", "订单-7"]), ID_TEXT)
JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    TEXT,
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(TEXT, inner, max_size=4)),
    max_leaves=12,
)
JSON_OBJECTS = st.dictionaries(TEXT, JSON_VALUES, max_size=4)
# Versions fit in 64 bits (see test_versions_from_2_63_are_refused_by_every_store); the other
# counters of a compression state are not bounded.
VERSIONS = st.integers(min_value=0, max_value=2**63 - 1)
STORE_VERSIONS = VERSIONS
COUNTS = st.integers(min_value=0, max_value=2**70)
INLINE = st.binary(max_size=64)


@st.composite
def media_parts(draw: st.DrawFn) -> ImagePart | AudioPart | FilePart:
    cls = draw(st.sampled_from([ImagePart, AudioPart, FilePart]))
    data = draw(st.one_of(st.none(), INLINE))
    uri_values = [st.sampled_from(["s3://bucket/key.png", "https://cdn.example/a.pdf"]), TEXT]
    if data is not None:
        uri_values.insert(0, st.none())
    return cls(  # type: ignore[no-any-return]
        uri=draw(st.one_of(*uri_values)),
        mime_type=draw(st.one_of(st.none(), st.sampled_from(["image/png", "audio/wav"]), TEXT)),
        name=draw(st.one_of(st.none(), TEXT)),
        size_bytes=draw(st.one_of(st.none(), st.integers(min_value=0, max_value=2**40))),
        data=data,
    )


PARTS = st.one_of(st.builds(TextPart, TEXT), media_parts())
TOOL_CALLS = st.builds(
    ToolCall,
    IDS,
    st.one_of(st.sampled_from(["lookup_order", "search"]), ID_TEXT),
    st.one_of(JSON_VALUES.map(lambda v: json.dumps(v, ensure_ascii=False)), TEXT),
)


@st.composite
def messages(
    draw: st.DrawFn,
    ids: st.SearchStrategy[str] = IDS,
    versions: st.SearchStrategy[int] = VERSIONS,
) -> Message:
    """Any message type, every field drawn."""
    common: dict[str, Any] = {
        "message_id": draw(ids),
        "metadata": draw(JSON_OBJECTS),
        "version": draw(versions),
        "turn_id": draw(st.one_of(st.none(), IDS)),
    }
    kind = draw(st.sampled_from(["system", "user", "parts", "ai", "tool", "action", "form"]))
    if kind == "system":
        return SystemMessage(draw(TEXT), **common)
    if kind == "user":
        return UserMessage(draw(TEXT), **common)
    if kind == "parts":
        return UserMessage(tuple(draw(st.lists(PARTS, max_size=4))), **common)
    if kind == "ai":
        calls = tuple(draw(st.lists(TOOL_CALLS, max_size=3)))
        return AiMessage(draw(st.one_of(st.none(), TEXT)), calls, **common)
    if kind == "tool":
        return ToolMessage(
            draw(IDS),
            draw(TEXT),
            tool_name=draw(st.one_of(st.none(), IDS)),
            is_error=draw(st.booleans()),
            **common,
        )
    payload = draw(st.one_of(st.none(), JSON_OBJECTS))
    if kind == "action":
        return AgentActionMessage(payload=payload, **common)
    return AgentFormMessage(
        payload=payload,
        status=draw(st.one_of(st.none(), st.sampled_from(["pending", "approved"]), TEXT)),
        **common,
    )


OFFSETS = st.one_of(
    st.just(UTC),
    st.integers(min_value=-23 * 60 - 59, max_value=23 * 60 + 59).map(
        lambda minutes: timezone(timedelta(minutes=minutes))
    ),
)


@st.composite
def states(
    draw: st.DrawFn,
    summary: st.SearchStrategy[Message] | None = None,
    versions: st.SearchStrategy[int] = VERSIONS,
) -> CompressionState:
    return CompressionState(
        conversation_id=draw(
            st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1)
        ),
        version=draw(versions),
        compression_version=draw(COUNTS),
        covered_until_message_id=draw(st.one_of(st.none(), IDS)),
        summary=tuple(draw(st.lists(summary or messages(), max_size=4))),
        covered_tokens=draw(COUNTS),
        covered_turns=draw(COUNTS),
        updated_at=draw(st.one_of(st.none(), st.datetimes(timezones=OFFSETS))),
    )


# -- helpers -----------------------------------------------------------------------------------


def same_json(a: object, b: object) -> bool:
    """Equal *and* of the same JSON types (``==`` alone says ``True == 1 == 1.0``)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        assert isinstance(b, dict)
        return list(a) == list(b) and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list):
        assert isinstance(b, list)
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def assert_same_record(loaded: object, original: Record) -> None:
    assert type(loaded) is type(original)
    assert loaded == original
    if isinstance(original, CompressionState):
        assert isinstance(loaded, CompressionState)
        for got, want in zip(loaded.summary, original.summary, strict=True):
            assert_same_record(got, want)
        if original.updated_at is not None:
            assert loaded.updated_at is not None
            assert loaded.updated_at.utcoffset() == original.updated_at.utcoffset()
        return
    assert isinstance(loaded, Message)
    assert same_json(loaded.metadata, original.metadata)
    if isinstance(original, (AgentActionMessage, AgentFormMessage)):
        assert same_json(loaded.payload, original.payload)  # type: ignore[attr-defined]
    if isinstance(original, UserMessage):
        assert isinstance(loaded, UserMessage)
        assert type(loaded.content) is type(original.content)
    if isinstance(original, AiMessage):
        assert isinstance(loaded, AiMessage)
        assert type(loaded.tool_calls) is tuple


def record(obj: Record) -> dict[str, Any]:
    decoded = json.loads(SERIALIZER.dumps(obj))
    assert isinstance(decoded, dict)
    return decoded


def encode(fields: object) -> bytes:
    """JSON bytes as a foreign writer could produce them (``\\uXXXX`` escapes allowed)."""
    return json.dumps(fields).encode("utf-8")


# -- round trips -------------------------------------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(messages())
def test_every_message_round_trips(message: Message) -> None:
    data = SERIALIZER.dumps(message)
    assert isinstance(data, bytes)
    assert_same_record(SERIALIZER.loads(data), message)
    assert_same_record(load_message(SERIALIZER, data), message)


@settings(max_examples=150, deadline=None)
@given(states())
def test_every_state_round_trips(state: CompressionState) -> None:
    data = SERIALIZER.dumps(state)
    assert_same_record(SERIALIZER.loads(data), state)
    assert_same_record(load_state(SERIALIZER, data), state)


@settings(max_examples=200, deadline=None)
@given(st.one_of(messages(), states()))
def test_serialised_form_is_a_utf8_json_object_with_a_type_tag(obj: Record) -> None:
    data = SERIALIZER.dumps(obj)
    text = data.decode("utf-8")  # strict: valid UTF-8
    fields = json.loads(text)
    assert isinstance(fields, dict)
    assert fields["type"] == TAGS[type(obj)]
    assert dump(SERIALIZER, obj) == data


def test_a_known_record_is_stable_and_readable() -> None:
    message = UserMessage("订单 ORD-1", message_id="u1", metadata={"tenant": "t1"}, turn_id="t")
    assert (
        SERIALIZER.dumps(message)
        == (
            '{"type":"user","message_id":"u1","metadata":{"tenant":"t1"},"version":0,'
            '"turn_id":"t","content":"订单 ORD-1"}'
        ).encode()
    )


@pytest.mark.parametrize("size", [0, 1, MAX_INLINE_BYTES])
def test_inline_data_up_to_the_cap_round_trips(size: int) -> None:
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    message = UserMessage((ImagePart(data=data, mime_type="image/png"),), message_id="big")
    loaded = SERIALIZER.loads(SERIALIZER.dumps(message))
    assert loaded == message
    assert loaded.content[0].data == data  # type: ignore[union-attr]


def test_bytearray_and_memoryview_are_accepted() -> None:
    data = SERIALIZER.dumps(AiMessage("ok", message_id="a1"))
    assert SERIALIZER.loads(bytearray(data)) == AiMessage("ok", message_id="a1")
    assert SERIALIZER.loads(memoryview(data)) == AiMessage("ok", message_id="a1")  # type: ignore[arg-type]


def test_helpers_insist_on_the_record_kind() -> None:
    message_data = SERIALIZER.dumps(UserMessage("x", message_id="u1"))
    state_data = SERIALIZER.dumps(CompressionState("c1"))
    assert load_state(SERIALIZER, state_data) == CompressionState("c1")
    with pytest.raises(SerializationError, match="expected a compression state, got UserMessage"):
        load_state(SERIALIZER, message_data)
    with pytest.raises(SerializationError, match="expected a message record"):
        load_message(SERIALIZER, state_data)


def test_json_serializer_satisfies_the_protocol() -> None:
    assert isinstance(SERIALIZER, AgentStoreSerializer)
    assert isinstance(GzipSerializer(), AgentStoreSerializer)


# -- round trips through every store -----------------------------------------------------------


@st.composite
def store_batches(draw: st.DrawFn) -> list[Message]:
    """1-4 messages with ids unique in the whole run (stores are shared by the session)."""
    prefix = uuid.uuid4().hex
    out = []
    for index in range(draw(st.integers(1, 4))):
        suffix = draw(KEY_TEXT)
        out.append(
            draw(messages(ids=st.just(f"{prefix}-{index}-{suffix}"), versions=STORE_VERSIONS))
        )
    return out


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batch=store_batches(), state=states(versions=STORE_VERSIONS))
def test_round_trip_through_every_store(
    store: Any, batch: list[Message], state: CompressionState
) -> None:
    conversation_id = new_conversation_id()
    memory = store.chat_memory(conversation_id)
    for message in batch:
        assert memory.add_message_if_absent(message) is True
    for message in batch:
        assert memory.add_message_if_absent(message) is False
        assert_same_record(memory.get_message(message.message_id), message)
    stored = memory.get_messages()
    assert len(stored) == len(batch)
    for got, want in zip(stored, batch, strict=True):
        assert_same_record(got, want)
    assert memory.get_model_messages() == [m for m in batch if m.model_visible]

    state_store = store.compression_state_store()
    state = replace(state, conversation_id=conversation_id)
    assert state_store.save(state, 0) is True
    assert_same_record(state_store.load(conversation_id), replace(state, version=1))


# Store bugs found while round-tripping; see the final report for details.


# NUL in identifiers: PostgreSQL text columns cannot hold it while the other stores kept it, so
# the contract is now that NUL is refused in every identifier (at message construction) and in
# conversation ids, the same way on every store, before anything is written.


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgresql", "redis"])
def test_nul_in_ids_is_refused_by_every_store(kind: str, request: pytest.FixtureRequest) -> None:
    store = make_store(kind, request)
    try:
        conversation_id = new_conversation_id()
        with_nul = "conv\x00" + conversation_id
        with pytest.raises(InvalidArgumentError, match=r"conversation_id must not contain NUL"):
            store.chat_memory(with_nul)
        with pytest.raises(InvalidArgumentError, match=r"^message_id must not contain NUL"):
            UserMessage("text", message_id="id\x00with-nul")
        memory = store.chat_memory(conversation_id)
        with pytest.raises(InvalidArgumentError, match=r"^message_id must not contain NUL"):
            memory.get_message("id\x00with-nul")
        states = store.compression_state_store()
        with pytest.raises(InvalidArgumentError, match=r"conversation_id must not contain NUL"):
            states.load(with_nul)
        with pytest.raises(InvalidArgumentError, match=r"conversation_id must not contain NUL"):
            CompressionState(with_nul)
        with pytest.raises(InvalidArgumentError, match=r"covered_until_message_id must not"):
            CompressionState(conversation_id, covered_until_message_id="a\x00")
        # nothing was written anywhere
        assert memory.get_messages() == [] and memory.get_message("id") is None
        assert store.chat_memory("conv" + conversation_id).get_messages() == []
        assert states.load(conversation_id) is None
    finally:
        store.close()


# Versions: SQL stores keep them in BIGINT columns (they were 32-bit INTEGER, which PostgreSQL
# refused from 2**31, and SQLite let a bare OverflowError escape from 2**63). The contract is now
# 0 <= version <= 2**63 - 1 on every store, checked where a version enters.
LARGE_VERSIONS = [2**31, 2**53 + 1, 2**62, 2**63 - 2]


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgresql", "redis"])
def test_large_versions_round_trip_through_every_store(
    kind: str, request: pytest.FixtureRequest
) -> None:
    store = make_store(kind, request)
    try:
        memory = store.chat_memory(new_conversation_id())
        for index, version in enumerate([*LARGE_VERSIONS, 2**63 - 1]):
            message = UserMessage("x", message_id=f"v{index}", version=version)
            assert memory.add_message_if_absent(message) is True
            assert memory.get_message(f"v{index}") == message
        for index, version in enumerate(LARGE_VERSIONS):
            # Two updates in a row: the second needs the exact stored version (Redis scripts
            # once computed it as a Lua double, losing every version above 2**53).
            changed = UserMessage("y", message_id=f"v{index}", version=version)
            assert memory.update_message(changed, version).version == version + 1
            stored = version + 1
            if stored < 2**63 - 1:
                assert memory.update_message(changed, stored).version == stored + 1
                stored += 1
            assert memory.get_message(f"v{index}") == replace(changed, version=stored)
            with pytest.raises(VersionConflictError, match=f"is at version {stored}, not"):
                memory.update_message(changed, version)
    finally:
        store.close()


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgresql", "redis"])
def test_versions_from_2_63_are_refused_by_every_store(
    kind: str, request: pytest.FixtureRequest
) -> None:
    for version in (2**63, 2**64, 2**70):
        with pytest.raises(InvalidArgumentError, match=r"^message 'v': version must be an int"):
            UserMessage("x", message_id="v", version=version)
        with pytest.raises(InvalidArgumentError, match=r"^version must be an int from 0"):
            CompressionState("c1", version=version)
    store = make_store(kind, request)
    try:
        conversation_id = new_conversation_id()
        memory = store.chat_memory(conversation_id)
        top = UserMessage("x", message_id="top", version=2**63 - 1)
        assert memory.add_message_if_absent(top) is True
        # The stored version becomes expected_version + 1, which must fit in 64 bits.
        for expected in (2**63 - 1, 2**63, -1):
            with pytest.raises(InvalidArgumentError, match=r"^expected_version must be an int"):
                memory.update_message(top, expected)
        assert memory.get_messages() == [top]
        states = store.compression_state_store()
        with pytest.raises(InvalidArgumentError, match=r"^expected_version must be an int"):
            states.save(CompressionState(conversation_id), 2**63 - 1)
        assert states.load(conversation_id) is None
    finally:
        store.close()


# -- the closed tag registry -------------------------------------------------------------------

USER = UserMessage(
    (
        TextPart("look at 这个"),
        ImagePart(uri="s3://b/k.png", mime_type="image/png", name="k.png", size_bytes=1234),
        AudioPart(data=b"\x00\x01\xff", mime_type="audio/wav"),
        FilePart(uri="https://x.example/y.pdf", data=b"abc", name="y.pdf", size_bytes=3),
    ),
    message_id="u1",
    metadata={"tenant": "t1", "n": [1, 2.5, None, True, {"deep": "x"}]},
    version=2,
    turn_id="t1",
)
BASE: dict[str, Record] = {
    "system": SystemMessage("be precise", message_id="s1", metadata={"k": 1}, version=3),
    "user_text": UserMessage("订单 ORD-2024-001 在哪里？", message_id="u0", turn_id="t1"),
    "user_parts": USER,
    "ai": AiMessage(
        "calling tools",
        (ToolCall("c1", "lookup", '{"id": 1}'), ToolCall("c2", "search", "{}")),
        message_id="a1",
        metadata={"model": "m"},
    ),
    "tool": ToolMessage("c1", '{"ok": true}', tool_name="lookup", is_error=True, message_id="r1"),
    "action": AgentActionMessage(payload={"button": "ok", "n": [1, {"x": None}]}, message_id="x1"),
    "form": AgentFormMessage(payload={"approve": None}, status="pending", message_id="f1"),
    "state": CompressionState(
        "conv-1",
        version=2,
        compression_version=2,
        covered_until_message_id="a9",
        summary=(UserMessage("summary", message_id="s-u"), AiMessage("ok", message_id="s-a")),
        covered_tokens=900,
        covered_turns=3,
        updated_at=datetime(2026, 1, 2, 3, 4, 5, 678, tzinfo=timezone(timedelta(hours=8))),
    ),
}


def test_base_records_round_trip() -> None:
    for obj in BASE.values():
        assert_same_record(SERIALIZER.loads(encode(record(obj))), obj)


@pytest.mark.parametrize(
    "tag",
    [
        "__import__",
        "os.system",
        "builtins.eval",
        "agentctx_fast.core.messages.UserMessage",
        "agentctx_fast.core.messages:UserMessage",
        "UserMessage",
        "USER",
        " user",
        "user\x00",
        "",
        "text",  # a part tag, not a message tag
        "compression_State",
        1,
        0,
        None,
        True,
        ["user"],
        {"user": 1},
    ],
)
def test_unknown_and_malicious_tags_are_refused(tag: object) -> None:
    fields = record(BASE["user_text"])
    fields["type"] = tag
    with pytest.raises(SerializationError):
        SERIALIZER.loads(encode(fields))


def test_missing_tag_is_refused() -> None:
    for name in ("user_text", "ai", "state"):
        fields = record(BASE[name])
        del fields["type"]
        with pytest.raises(SerializationError, match="unknown message type tag None"):
            SERIALIZER.loads(encode(fields))


@pytest.mark.parametrize("tag", ["__import__", "os.system", "user", "ImagePart", 1, None])
def test_unknown_part_tags_are_refused(tag: object) -> None:
    fields = record(USER)
    fields["content"][1]["type"] = tag
    with pytest.raises(SerializationError, match="unknown content part type"):
        SERIALIZER.loads(encode(fields))


# -- malformed bytes ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["user_parts", "ai", "form", "state"])
def test_every_truncation_is_refused(name: str) -> None:
    data = SERIALIZER.dumps(BASE[name])
    assert len(data) > 50
    for end in range(len(data)):
        with pytest.raises(SerializationError):
            SERIALIZER.loads(data[:end])


@pytest.mark.parametrize(
    "data",
    [
        b"\xff\xfe\x00",
        b'{"type":"system","message_id":"s\xff","metadata":{},"version":0,"turn_id":null,'
        b'"text":"x"}',
        "{}".encode("utf-16"),
        b"\xef\xbb\xbf" + SERIALIZER.dumps(UserMessage("x", message_id="bom")),
        b"\xed\xa0\x80",  # an encoded surrogate: not UTF-8
        b"",
        b" ",
        b"null",
        b"[]",
        b'[{"type":"user"}]',
        b"42",
        b"4.2e1",
        b'"user"',
        b"true",
        b"{",
        b"{}",
        b'{"type":"user"}',
        b"[" * 100_000,
        b'{"a":' * 100_000,
        SERIALIZER.dumps(UserMessage("x", message_id="u1")) + b"{}",
        SERIALIZER.dumps(UserMessage("x", message_id="u1")) + b"\x00",
    ],
)
def test_malformed_bytes_are_refused(data: bytes) -> None:
    with pytest.raises(SerializationError):
        SERIALIZER.loads(data)


@pytest.mark.parametrize("data", ["{}", SERIALIZER.dumps(BASE["ai"]).decode(), None, 1, [], {}])
def test_loads_of_non_bytes_is_refused(data: object) -> None:
    with pytest.raises(SerializationError, match="expected bytes"):
        SERIALIZER.loads(data)  # type: ignore[arg-type]


# -- wrong field types -------------------------------------------------------------------------

DELETE = object()
Path_ = tuple[str | int, ...]

COMMON_MUTATIONS: list[tuple[Path_, object]] = [
    (("message_id",), 7),
    (("message_id",), None),
    (("message_id",), ["u1"]),
    (("message_id",), DELETE),
    (("message_id",), "\ud800"),  # a lone surrogate escape in the JSON
    (("message_id",), "ok\udfffok"),
    (("metadata",), []),
    (("metadata",), "x"),
    (("metadata",), None),
    (("metadata",), 1),
    (("metadata",), DELETE),
    (("version",), "1"),
    (("version",), True),
    (("version",), 1.0),
    (("version",), -1),
    (("version",), None),
    (("version",), DELETE),
    (("turn_id",), 5),
    (("turn_id",), ["t"]),
    (("turn_id",), "\ud800"),
    (("extra_field",), 1),
    (("__class__",), "os.system"),
]
OVER_CAP = base64.b64encode(bytes(MAX_INLINE_BYTES + 1)).decode()
TYPE_MUTATIONS: dict[str, list[tuple[Path_, object]]] = {
    "system": [(("text",), None), (("text",), 1), (("text",), DELETE), (("text",), ["x"])],
    "user_text": [
        (("content",), 1),
        (("content",), None),
        (("content",), True),
        (("content",), {"text": "x"}),
        (("content",), DELETE),
        (("content",), ["x"]),
    ],
    "user_parts": [
        (("content", 0), "look"),
        (("content", 0), None),
        (("content", 0, "text"), 1),
        (("content", 0, "text"), None),
        (("content", 0, "text"), DELETE),
        (("content", 0, "type"), DELETE),
        (("content", 0, "uri"), "s3://x"),  # a field a text part does not have
        (("content", 1, "uri"), 5),
        (("content", 1, "uri"), None),  # neither a uri nor inline data
        (("content", 1, "mime_type"), 5),
        (("content", 1, "name"), []),
        (("content", 1, "size_bytes"), "1234"),
        (("content", 1, "size_bytes"), True),
        (("content", 1, "size_bytes"), 1.5),
        (("content", 1, "extra"), 1),
        (("content", 2, "data"), "!!!not base64"),
        (("content", 2, "data"), "AAE"),  # missing padding
        (("content", 2, "data"), "AA E="),
        (("content", 2, "data"), "AAE=\n"),
        (("content", 2, "data"), "AAE=AAE="),
        (("content", 2, "data"), 5),
        (("content", 2, "data"), [0, 1]),
        (("content", 2, "data"), OVER_CAP),  # ContentTooLargeError inside
        (("content", 3, "data"), OVER_CAP),
    ],
    "ai": [
        (("text",), 1),
        (("text",), []),
        (("tool_calls",), {}),
        (("tool_calls",), {"id": "c1", "name": "lookup", "arguments": "{}"}),
        (("tool_calls",), "c1"),
        (("tool_calls",), None),
        (("tool_calls",), DELETE),
        (("tool_calls", 0), "c1"),
        (("tool_calls", 0), ["c1", "lookup", "{}"]),
        (("tool_calls", 0, "id"), DELETE),  # a tool call without an id
        (("tool_calls", 0, "id"), 1),
        (("tool_calls", 0, "id"), None),
        (("tool_calls", 0, "id"), "\ud800"),
        (("tool_calls", 0, "name"), DELETE),
        (("tool_calls", 0, "name"), False),
        (("tool_calls", 0, "arguments"), {"id": 1}),
        (("tool_calls", 0, "arguments"), DELETE),
        (("tool_calls", 1, "extra"), 1),
    ],
    "tool": [
        (("tool_call_id",), DELETE),
        (("tool_call_id",), 1),
        (("tool_call_id",), None),
        (("tool_call_id",), "\ud800"),
        (("text",), None),
        (("text",), DELETE),
        (("text",), {"ok": True}),
        (("tool_name",), 1),
        (("tool_name",), "\ud800"),
        (("is_error",), "false"),
        (("is_error",), 0),
        (("is_error",), None),
        (("is_error",), DELETE),
    ],
    "action": [(("payload",), []), (("payload",), "x"), (("payload",), 1), (("payload",), True)],
    "form": [
        (("payload",), [1]),
        (("payload",), "approve"),
        (("status",), 1),
        (("status",), {"s": 1}),
        (("status",), True),
    ],
    "state": [
        (("conversation_id",), DELETE),
        (("conversation_id",), ""),
        (("conversation_id",), 1),
        (("conversation_id",), None),
        (("version",), "2"),
        (("version",), True),
        (("version",), -1),
        (("version",), DELETE),
        (("compression_version",), None),
        (("compression_version",), 1.5),
        (("compression_version",), -3),
        (("covered_until_message_id",), 9),
        (("covered_until_message_id",), ["a9"]),
        (("summary",), {}),
        (("summary",), None),
        (("summary",), "s-u"),
        (("summary",), DELETE),
        (("summary", 0), 1),
        (("summary", 0, "type"), "compression_state"),
        (("summary", 0, "type"), "__import__"),
        (("summary", 0, "version"), "1"),
        (("summary", 1, "extra"), 0),
        (("covered_tokens",), -1),
        (("covered_tokens",), "900"),
        (("covered_tokens",), DELETE),
        (("covered_turns",), 3.0),
        (("covered_turns",), False),
        (("updated_at",), "yesterday"),
        (("updated_at",), 1),
        (("updated_at",), "2026-13-01T00:00:00"),
        (("updated_at",), {"iso": "2026-01-01"}),
        (("extra",), None),
    ],
}
MUTATION_CASES = [
    pytest.param(name, path, value, id=f"{name}-{'.'.join(map(str, path))}-{index}")
    for name, extra in TYPE_MUTATIONS.items()
    for index, (path, value) in enumerate(extra + (COMMON_MUTATIONS if name != "state" else []))
]


def mutated(fields: dict[str, Any], path: Path_, value: object) -> dict[str, Any]:
    copy = json.loads(json.dumps(fields))
    target: Any = copy
    for step in path[:-1]:
        target = target[step]
    if value is DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return copy  # type: ignore[no-any-return]


@pytest.mark.parametrize(("name", "path", "value"), MUTATION_CASES)
def test_wrong_field_types_are_refused(name: str, path: Path_, value: object) -> None:
    fields = mutated(record(BASE[name]), path, value)
    with pytest.raises(SerializationError) as raised:
        SERIALIZER.loads(encode(fields))
    # A typed library error underneath, never a stray TypeError/KeyError/binascii.Error.
    cause = raised.value.__cause__
    assert cause is None or isinstance(cause, (AgentCtxError, ValueError))


def test_inline_data_over_the_cap_is_a_serialization_error() -> None:
    fields = record(USER)
    fields["content"][2]["data"] = OVER_CAP
    with pytest.raises(SerializationError, match="over the") as raised:
        SERIALIZER.loads(encode(fields))
    assert type(raised.value.__cause__).__name__ == "ContentTooLargeError"


def test_errors_name_the_field() -> None:
    fields = mutated(record(BASE["ai"]), ("tool_calls", 0, "id"), DELETE)
    with pytest.raises(SerializationError, match=r"tool_calls\[0\]: missing field 'id'"):
        SERIALIZER.loads(encode(fields))
    fields = mutated(record(BASE["tool"]), ("is_error",), "false")
    with pytest.raises(SerializationError, match="field 'is_error' has type str"):
        SERIALIZER.loads(encode(fields))
    fields = mutated(record(BASE["system"]), ("colour",), "red")
    with pytest.raises(SerializationError, match=r"unknown field\(s\) \['colour'\]"):
        SERIALIZER.loads(encode(fields))


# Records `dumps` can never have written: `loads` must refuse them, or the object that comes out
# could not be stored again (an `update_message` of it would fail).
UNWRITABLE = [
    pytest.param("user_text", ("metadata",), {"x": math.nan}, id="metadata-NaN"),
    pytest.param("action", ("payload",), {"n": [math.inf]}, id="payload-Infinity"),
    pytest.param("form", ("payload",), {"n": {"m": -math.inf}}, id="payload-minus-Infinity"),
    pytest.param("system", ("text",), "bad \ud800 text", id="text-lone-surrogate"),
    pytest.param("user_text", ("content",), "\udfff", id="content-lone-surrogate"),
    pytest.param("user_parts", ("content", 0, "text"), "\ud800", id="part-lone-surrogate"),
    pytest.param("ai", ("tool_calls", 0, "arguments"), '"\ud800"', id="arguments-surrogate"),
    pytest.param("user_text", ("metadata",), {"\ud800": 1}, id="metadata-key-surrogate"),
    pytest.param("state", ("covered_until_message_id",), "\ud800", id="covered-id-lone-surrogate"),
    pytest.param("form", ("status",), "\udc80", id="status-lone-surrogate"),
    pytest.param("user_parts", ("content", 1, "uri"), "s3://\ud800", id="uri-lone-surrogate"),
    pytest.param("form", ("payload",), {"k": ["\udfff"]}, id="payload-nested-surrogate"),
]


@pytest.mark.parametrize(("name", "path", "value"), UNWRITABLE)
def test_loads_refuses_what_dumps_cannot_write(name: str, path: Path_, value: object) -> None:
    data = json.dumps(mutated(record(BASE[name]), path, value)).encode()
    with pytest.raises(SerializationError):
        SERIALIZER.loads(data)


@pytest.mark.parametrize("literal", ["1e400", "-1e400", "NaN", "Infinity", "-Infinity"])
def test_loads_refuses_numbers_dumps_cannot_write(literal: str) -> None:
    data = SERIALIZER.dumps(UserMessage("x", message_id="u1", metadata={"n": 1.5}))
    with pytest.raises(SerializationError, match="not valid UTF-8 JSON"):
        SERIALIZER.loads(data.replace(b"1.5", literal.encode()))


def test_a_valid_surrogate_pair_escape_loads() -> None:
    # The escape gate only sends the record to the text walk; a pair is one valid character.
    data = SERIALIZER.dumps(UserMessage("x", message_id="u1", metadata={"e": "PAIR"}))
    loaded = SERIALIZER.loads(data.replace(b"PAIR", b"\\ud83d\\ude00 and \\\\ud800"))
    assert loaded.metadata == {"e": "\U0001f600 and \\ud800"}


# -- dumps of what cannot be stored ------------------------------------------------------------


class Opaque:
    pass


NON_JSON = [
    {"s": {1, 2}},
    {"t": (1, 2)},
    {"o": Opaque()},
    {"nan": math.nan},
    {"inf": math.inf},
    {"deep": [{"x": [-math.inf]}]},
    {1: "int key"},
    {"nested": {2: "int key"}},
    {("a", "b"): 1},
    {None: 1},
    {"b": b"bytes"},
    {"d": datetime(2026, 1, 1, tzinfo=UTC)},
    {"f": frozenset()},
    {"fn": len},
    {"surrogate \ud800": 1},
    {"v": "lone \udfff"},
]


@pytest.mark.parametrize("value", NON_JSON, ids=repr)
@pytest.mark.parametrize(
    "build",
    [
        lambda v: UserMessage("x", message_id="u1", metadata=v),
        lambda v: AiMessage("x", message_id="a1", metadata=v),
        lambda v: AgentActionMessage(payload=v, message_id="x1"),
        lambda v: AgentFormMessage(payload=v, status="s", message_id="f1"),
        lambda v: CompressionState("c1", summary=(UserMessage("x", message_id="u1", metadata=v),)),
    ],
    ids=["user-metadata", "ai-metadata", "action-payload", "form-payload", "state-summary"],
)
def test_non_json_values_on_dumps_are_refused(
    build: Callable[[object], Record], value: object
) -> None:
    obj = build(value)
    with pytest.raises(SerializationError):
        SERIALIZER.dumps(obj)
    with pytest.raises(SerializationError):
        dump(SERIALIZER, obj)


# Fields of the wrong type: the message classes refuse them at construction (naming the message
# and the field), and `dumps` checks what `loads` requires, so a record `loads` refuses is never
# written and one bad message cannot make a stored conversation unreadable.
UNREADABLE: dict[str, tuple[str, Callable[[], Record]]] = {
    "action-payload-list": (
        "message 'x': payload must be a dict or None, got list",
        lambda: AgentActionMessage(payload=[1, 2], message_id="x"),  # type: ignore[arg-type]
    ),
    "action-payload-str": (
        "message 'x': payload must be a dict or None, got str",
        lambda: AgentActionMessage(payload="t", message_id="x"),  # type: ignore[arg-type]
    ),
    "form-payload-list": (
        "message 'f': payload must be a dict or None, got list",
        lambda: AgentFormMessage(payload=[1], message_id="f"),  # type: ignore[arg-type]
    ),
    "form-status-int": (
        "message 'f': status must be a str or None, got int",
        lambda: AgentFormMessage(status=1, message_id="f"),  # type: ignore[arg-type]
    ),
    "part-uri-int": (
        "ImagePart.uri must be a str or None, got int",
        lambda: UserMessage((ImagePart(uri=5),), message_id="u"),  # type: ignore[arg-type]
    ),
    "part-mime-int": (
        "ImagePart.mime_type must be a str or None, got int",
        lambda: UserMessage((ImagePart(uri="s", mime_type=5),), message_id="u"),  # type: ignore[arg-type]
    ),
    "part-name-list": (
        "FilePart.name must be a str or None, got list",
        lambda: UserMessage((FilePart(uri="s", name=["n"]),), message_id="u"),  # type: ignore[arg-type]
    ),
    "part-size-str": (
        "AudioPart.size_bytes must be an int or None, got str",
        lambda: UserMessage((AudioPart(uri="s", size_bytes="12"),), message_id="u"),  # type: ignore[arg-type]
    ),
    "part-size-bool": (
        "ImagePart.size_bytes must be an int or None, got bool",
        lambda: UserMessage((ImagePart(uri="s", size_bytes=True),), message_id="u"),
    ),
    "part-size-float": (
        "ImagePart.size_bytes must be an int or None, got float",
        lambda: UserMessage((ImagePart(uri="s", size_bytes=1.5),), message_id="u"),  # type: ignore[arg-type]
    ),
    "tool-is-error-str": (
        "message 't': is_error must be a bool, got str",
        lambda: ToolMessage("c", "t", is_error="yes", message_id="t"),  # type: ignore[arg-type]
    ),
    "tool-is-error-int": (
        "message 't': is_error must be a bool, got int",
        lambda: ToolMessage("c", "t", is_error=1, message_id="t"),  # type: ignore[arg-type]
    ),
}


@pytest.mark.parametrize("case", list(UNREADABLE.values()), ids=list(UNREADABLE))
def test_wrong_field_types_are_refused_at_construction(
    case: tuple[str, Callable[[], Record]],
) -> None:
    expected, build = case
    with pytest.raises(InvalidMessageTypeError, match=f"^{re.escape(expected)}$"):
        build()


# The same wrong values forced into built objects (as an object rebuilt without __post_init__
# would hold them): `dumps` itself refuses what `loads` would.
FORCED: list[tuple[Record, str, object, str]] = [
    (AgentActionMessage(message_id="x"), "payload", [1, 2], "message 'x' payload"),
    (AgentFormMessage(message_id="f"), "payload", "t", "message 'f' payload"),
    (AgentFormMessage(message_id="f"), "status", 1, "message 'f' status"),
    (ToolMessage("c", "t", message_id="t"), "is_error", 1, "message 't' is_error"),
    (ImagePart(uri="s"), "uri", 5, "message 'u' content[0] uri"),
    (ImagePart(uri="s"), "mime_type", 5, "message 'u' content[0] mime_type"),
    (FilePart(uri="s"), "name", ["n"], "message 'u' content[0] name"),
    (AudioPart(uri="s"), "size_bytes", "12", "message 'u' content[0] size_bytes"),
    (ImagePart(uri="s"), "size_bytes", True, "message 'u' content[0] size_bytes"),
    (TextPart("x"), "text", 5, "message 'u' content[0] text"),
]


@pytest.mark.parametrize(("target", "name", "value", "where"), FORCED)
def test_dumps_never_writes_a_record_loads_refuses(
    target: Any, name: str, value: object, where: str
) -> None:
    object.__setattr__(target, name, value)  # bypasses the frozen dataclass and its checks
    obj = target if isinstance(target, Message) else UserMessage((target,), message_id="u")
    with pytest.raises(SerializationError, match=f"^{re.escape(where)} has type"):
        SERIALIZER.dumps(obj)


def test_one_bad_ui_message_does_not_poison_a_stored_conversation() -> None:
    from agentctx_fast.stores.sql import SqlAgentStore

    store = SqlAgentStore("sqlite://")
    store.schema.initialize()
    memory = store.chat_memory("c1")
    memory.add_message(UserMessage("hi", message_id="u1"))
    with pytest.raises(InvalidMessageTypeError, match="payload must be a dict"):
        memory.add_message(AgentActionMessage(payload=["a", "b"], message_id="x1"))  # type: ignore[arg-type]
    forced = AgentActionMessage(message_id="x2")
    object.__setattr__(forced, "payload", ["a", "b"])
    with pytest.raises(SerializationError, match="payload has type list"):
        memory.add_message(forced)
    assert memory.get_messages() == [UserMessage("hi", message_id="u1")]


def _cyclic() -> dict[str, Any]:
    cycle: dict[str, Any] = {}
    cycle["self"] = cycle
    return cycle


def _deep(depth: int) -> dict[str, Any]:
    root: dict[str, Any] = {}
    node = root
    for _ in range(depth):
        node["k"] = {}
        node = node["k"]
    return root


@pytest.mark.parametrize("metadata", [_cyclic(), _deep(5000)], ids=["cyclic", "deep-5000"])
def test_cyclic_or_too_deep_metadata_is_a_serialization_error(metadata: dict[str, Any]) -> None:
    with pytest.raises(SerializationError):
        SERIALIZER.dumps(UserMessage("x", message_id="u1", metadata=metadata))


def test_store_helper_wraps_a_recursion_error() -> None:
    with pytest.raises(SerializationError):
        dump(SERIALIZER, UserMessage("x", message_id="u1", metadata=_cyclic()))


class CustomUser(UserMessage):
    pass


@pytest.mark.parametrize(
    "obj",
    [
        None,
        "text",
        b"bytes",
        1,
        {"type": "user", "content": "x"},
        [UserMessage("x")],
        Message(message_id="base"),
        CustomUser("x", message_id="sub"),  # not in the closed registry
        ToolCall("c1", "lookup"),
        TextPart("x"),
        ImagePart(uri="s3://x"),
        Opaque(),
    ],
    ids=lambda obj: type(obj).__name__,
)
def test_dumps_of_a_non_message_is_refused(obj: object) -> None:
    with pytest.raises(SerializationError, match=type(obj).__name__):
        SERIALIZER.dumps(obj)


# -- fuzzing -----------------------------------------------------------------------------------

ALL_TAGS = st.sampled_from(
    [*TAGS.values(), "text", "image", "audio", "file", "__import__", None, 1]
)
FUZZ_VALUES = st.one_of(JSON_VALUES, st.lists(st.dictionaries(TEXT, JSON_VALUES), max_size=2))


def check_loads_outcome(data: bytes) -> None:
    try:
        obj = SERIALIZER.loads(data)
    except SerializationError:
        return
    assert isinstance(obj, (Message, CompressionState))
    assert SERIALIZER.loads(SERIALIZER.dumps(obj)) == obj


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_load_or_raise_serialization_error(data: bytes) -> None:
    check_loads_outcome(data)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        JSON_VALUES,
        st.dictionaries(
            st.sampled_from(["type", "message_id", "metadata", "version", "text", "content"]),
            FUZZ_VALUES,
        ).flatmap(lambda d: ALL_TAGS.map(lambda tag: {**d, "type": tag})),
    )
)
def test_random_json_loads_or_raises_serialization_error(value: object) -> None:
    check_loads_outcome(json.dumps(value).encode())


@settings(max_examples=500, deadline=None)
@given(
    name=st.sampled_from(sorted(BASE)),
    edits=st.lists(
        st.tuples(st.integers(0, 10**6), st.one_of(st.just(DELETE), FUZZ_VALUES, ALL_TAGS)),
        min_size=1,
        max_size=3,
    ),
)
def test_mutated_records_load_or_raise_serialization_error(
    name: str, edits: list[tuple[int, object]]
) -> None:
    fields = record(BASE[name])
    for selector, value in edits:
        paths = list(_paths(fields))
        path = paths[selector % len(paths)]
        fields = mutated(fields, path, value)
    check_loads_outcome(json.dumps(fields).encode())


def _paths(value: Any, prefix: Path_ = ()) -> Iterator[Path_]:
    """Every key path inside ``value`` (objects and arrays)."""
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in items:
        yield (*prefix, key)
        if isinstance(item, (dict, list)) and item:
            yield from _paths(item, (*prefix, key))


# -- custom serializers ------------------------------------------------------------------------


class GzipSerializer:
    """A pickle-free custom serializer: the JSON serializer's bytes, gzipped."""

    def __init__(self) -> None:
        self.inner = JsonAgentStoreSerializer()

    def dumps(self, obj: object) -> bytes:
        return gzip.compress(self.inner.dumps(obj), mtime=0)

    def loads(self, data: bytes) -> Any:
        return self.inner.loads(gzip.decompress(data))


class ExplodingSerializer(GzipSerializer):
    """Raises ``error`` from ``dumps`` (or ``loads``) when armed."""

    def __init__(self, error: BaseException, *, on: str = "dumps") -> None:
        super().__init__()
        self.error = error
        self.on = on
        self.armed = False

    def dumps(self, obj: object) -> bytes:
        if self.armed and self.on == "dumps":
            raise self.error
        return super().dumps(obj)

    def loads(self, data: bytes) -> Any:
        if self.armed and self.on == "loads":
            raise self.error
        return super().loads(data)


def custom_store(kind: str, serializer: Any, request: pytest.FixtureRequest) -> Any:
    if kind == "sqlite":
        from agentctx_fast.stores.sql import SqlAgentStore

        sql = SqlAgentStore("sqlite://", serializer=serializer)
        sql.schema.initialize()
        return sql
    from agentctx_fast.stores.redis import RedisAgentStore

    server = request.getfixturevalue("redis_server")
    return RedisAgentStore(server.url, key_prefix=f"t{uuid.uuid4().hex}:", serializer=serializer)


def raw_message(store: Any, conversation_id: str, message_id: str) -> bytes:
    """The bytes a store holds for a message, read past the serializer."""
    if hasattr(store, "engine"):
        table = sa.Table(f"{store.table_prefix}messages", sa.MetaData(), autoload_with=store.engine)
        with store.engine.connect() as connection:
            return bytes(
                connection.execute(
                    sa.select(table.c.data).where(
                        table.c.conversation_id == conversation_id,
                        table.c.message_id == message_id,
                    )
                ).scalar_one()
            )
    keys = f"{store.key_prefix}conv:{{{conversation_id}}}"
    position = int(store.client.hget(f"{keys}:i", message_id).split()[0])
    return bytes(store.client.lindex(f"{keys}:r", position))


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_custom_serializer_is_used_by_the_store(kind: str, request: pytest.FixtureRequest) -> None:
    store = custom_store(kind, GzipSerializer(), request)
    try:
        conversation_id = new_conversation_id()
        memory = store.chat_memory(conversation_id)
        history = [BASE["user_parts"], BASE["ai"], BASE["tool"], BASE["form"]]
        for message in history:
            assert memory.add_message_if_absent(message) is True  # type: ignore[arg-type]
        raw = raw_message(store, conversation_id, "a1")
        assert raw[:2] == b"\x1f\x8b"  # gzip magic: the custom serializer wrote it
        assert SERIALIZER.loads(gzip.decompress(raw)) == BASE["ai"]
        assert memory.get_messages() == history
        assert memory.get_message("u1") == USER
        updated = memory.update_message(replace(BASE["form"], status="approved"), 0)  # type: ignore[type-var]
        assert memory.get_message("f1") == updated
        states_store = store.compression_state_store()
        state = replace(BASE["state"], conversation_id=conversation_id)
        assert states_store.save(state, 0) is True
        assert states_store.load(conversation_id) == replace(state, version=1)
    finally:
        store.close()


class CustomFailure(Exception):
    pass


ERRORS = st.sampled_from(
    [
        RuntimeError("boom"),
        KeyError("k"),
        ValueError("v"),
        TypeError("t"),
        ZeroDivisionError("z"),
        AttributeError("a"),
        UnicodeError("u"),
        RecursionError("r"),
        CustomFailure("custom"),
        StoreError("a library error of the wrong kind"),
    ]
)


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(error=ERRORS)
def test_custom_serializer_failure_in_dumps_writes_nothing(
    kind: str, error: Exception, request: pytest.FixtureRequest
) -> None:
    serializer = ExplodingSerializer(error)
    store = custom_store(kind, serializer, request)
    try:
        conversation_id = new_conversation_id()
        memory = store.chat_memory(conversation_id)
        first = AgentFormMessage(payload={"a": 1}, status="pending", message_id="f1")
        memory.add_message(first)
        serializer.armed = True
        with pytest.raises(SerializationError) as raised:
            memory.add_message_if_absent(UserMessage("never stored", message_id="u2"))
        assert raised.value.__cause__ is error
        with pytest.raises(SerializationError):
            memory.update_message(replace(first, status="approved"), 0)
        states_store = store.compression_state_store()
        with pytest.raises(SerializationError):
            states_store.save(CompressionState(conversation_id), 0)
        serializer.armed = False
        assert memory.get_messages() == [first]
        assert memory.message_count() == 1
        assert memory.get_message("u2") is None
        assert memory.get_message("f1") == first
        assert states_store.load(conversation_id) is None
        # Nothing half-written: the ids are still free.
        assert memory.add_message_if_absent(UserMessage("now", message_id="u2")) is True
        assert states_store.save(CompressionState(conversation_id), 0) is True
    finally:
        store.close()


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_custom_serializer_bad_results_are_serialization_errors(
    kind: str, request: pytest.FixtureRequest
) -> None:
    class Wrong(GzipSerializer):
        returns: object = "not bytes"
        mode = "dumps"

        def dumps(self, obj: object) -> bytes:
            if self.mode == "dumps":
                return self.returns  # type: ignore[return-value]
            return super().dumps(obj)

        def loads(self, data: bytes) -> Any:
            if self.mode == "loads":
                return self.returns
            return super().loads(data)

    serializer = Wrong()
    store = custom_store(kind, serializer, request)
    try:
        conversation_id = new_conversation_id()
        memory = store.chat_memory(conversation_id)
        with pytest.raises(SerializationError, match="returned str, not bytes"):
            memory.add_message(UserMessage("x", message_id="u1"))
        serializer.mode = "none"
        memory.add_message(UserMessage("x", message_id="u1"))
        store.compression_state_store().save(CompressionState(conversation_id), 0)
        serializer.mode = "loads"
        serializer.returns = {"type": "user"}
        with pytest.raises(SerializationError, match="expected a message record, got dict"):
            memory.get_message("u1")
        serializer.returns = UserMessage("x", message_id="u1")
        with pytest.raises(SerializationError, match="expected a compression state"):
            store.compression_state_store().load(conversation_id)
    finally:
        store.close()


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_custom_serializer_failure_in_loads_is_a_serialization_error(
    kind: str, request: pytest.FixtureRequest
) -> None:
    serializer = ExplodingSerializer(KeyError("lost"), on="loads")
    store = custom_store(kind, serializer, request)
    try:
        memory = store.chat_memory(new_conversation_id())
        memory.add_message(UserMessage("x", message_id="u1"))
        serializer.armed = True
        for read in (lambda: memory.get_message("u1"), memory.get_messages):
            with pytest.raises(SerializationError, match="lost"):
                read()
    finally:
        store.close()


# -- corrupt data already in the store ---------------------------------------------------------

GARBAGE = [
    b"\x00\xff garbage",
    b"not json",
    b"",
    b"[]",
    b'{"type":"__import__","message_id":"u1"}',
    b'{"type":"os.system"}',
    SERIALIZER.dumps(BASE["user_parts"])[:-7],
    SERIALIZER.dumps(BASE["state"]),  # a valid record of the wrong kind
]


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[Any]:
    from agentctx_fast.stores.sql import SqlAgentStore

    sql = SqlAgentStore(f"sqlite:///{tmp_path / 'corrupt.db'}", table_prefix="corrupt_")
    sql.schema.initialize()
    try:
        yield sql
    finally:
        sql.close()


@pytest.mark.parametrize("garbage", GARBAGE, ids=repr)
def test_corrupt_sqlite_message_is_a_serialization_error(sqlite_store: Any, garbage: bytes) -> None:
    conversation_id = new_conversation_id()
    memory = sqlite_store.chat_memory(conversation_id)
    memory.add_message(UserMessage("fine", message_id="u0"))
    table = sa.Table("corrupt_messages", sa.MetaData(), autoload_with=sqlite_store.engine)
    with sqlite_store.engine.begin() as connection:
        connection.execute(
            sa.insert(table).values(
                conversation_id=conversation_id,
                message_id="bad",
                kind="UserMessage",
                model_visible=True,
                version=0,
                data=garbage,
            )
        )
    assert memory.get_message("u0") == UserMessage("fine", message_id="u0")
    with pytest.raises(SerializationError):
        memory.get_message("bad")
    with pytest.raises(SerializationError):
        memory.get_messages()
    with pytest.raises(SerializationError):
        memory.get_model_messages()
    assert memory.get_messages(1, offset=1) == [UserMessage("fine", message_id="u0")]


@pytest.mark.parametrize("garbage", [*GARBAGE[:-1], SERIALIZER.dumps(BASE["ai"])], ids=repr)
def test_corrupt_sqlite_state_is_a_serialization_error(sqlite_store: Any, garbage: bytes) -> None:
    conversation_id = new_conversation_id()
    table = sa.Table("corrupt_compression_states", sa.MetaData(), autoload_with=sqlite_store.engine)
    with sqlite_store.engine.begin() as connection:
        connection.execute(
            sa.insert(table).values(conversation_id=conversation_id, version=1, data=garbage)
        )
    with pytest.raises(SerializationError):
        sqlite_store.compression_state_store().load(conversation_id)


@pytest.fixture
def redis_store(request: pytest.FixtureRequest) -> Iterator[Any]:
    from agentctx_fast.stores.redis import RedisAgentStore

    server = request.getfixturevalue("redis_server")
    store = RedisAgentStore(server.url, key_prefix=f"corrupt{uuid.uuid4().hex}:")
    try:
        yield store
    finally:
        store.close()


@pytest.mark.parametrize("garbage", GARBAGE, ids=repr)
def test_corrupt_redis_message_is_a_serialization_error(redis_store: Any, garbage: bytes) -> None:
    conversation_id = new_conversation_id()
    memory = redis_store.chat_memory(conversation_id)
    memory.add_message(UserMessage("fine", message_id="u0"))
    memory.add_message(UserMessage("soon corrupt", message_id="bad"))
    keys = f"{redis_store.key_prefix}conv:{{{conversation_id}}}"
    assert redis_store.client.hget(f"{keys}:i", "bad") == b"1 0 UserMessage"  # documented layout
    redis_store.client.lset(f"{keys}:r", 1, garbage)
    assert memory.get_message("u0") == UserMessage("fine", message_id="u0")
    with pytest.raises(SerializationError):
        memory.get_message("bad")
    with pytest.raises(SerializationError):
        memory.get_messages()
    with pytest.raises(SerializationError):
        memory.get_model_messages()


@pytest.mark.parametrize(
    ("version", "data"),
    [
        (b"1", b"garbage"),
        (b"1", SERIALIZER.dumps(BASE["ai"])),
        (b"1", b'{"type":"compression_state"}'),
        (b"one", SERIALIZER.dumps(CompressionState("c"))),
    ],
    ids=["garbage", "a-message", "empty-state", "bad-version"],
)
def test_corrupt_redis_state_is_a_serialization_error(
    redis_store: Any, version: bytes, data: bytes
) -> None:
    conversation_id = new_conversation_id()
    key = f"{redis_store.key_prefix}compression:{{{conversation_id}}}"
    redis_store.client.hset(key, mapping={"version": version, "data": data})
    with pytest.raises(SerializationError):
        redis_store.compression_state_store().load(conversation_id)
