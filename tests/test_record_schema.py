"""The record format is declared once (`stores/_schema.py`): `dumps` writes what it declares,
and the native decoder decodes by the declaration it is handed, not by a list of its own."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from agentctx_fast import Message, ToolCall, ToolMessage
from agentctx_fast._backend import native
from agentctx_fast.stores import JsonAgentStoreSerializer
from agentctx_fast.stores._schema import (
    BY_CLASS,
    MESSAGE_RECORDS,
    Field,
    Kind,
    Record,
)
from agentctx_fast.stores.serializer import _hand_schema_to_native
from test_serializer import BASE

SERIALIZER = JsonAgentStoreSerializer()
needs_native = pytest.mark.skipif(native is None, reason="the Rust extension is not built")


def test_every_declared_key_is_a_field_of_its_class() -> None:
    for cls, record in BY_CLASS.items():
        names = [field.name for field in dataclasses.fields(cls)]
        assert {field.key for field in record.fields} <= set(names), cls


@pytest.mark.parametrize("name", [n for n, obj in BASE.items() if isinstance(obj, Message)])
def test_dumps_writes_the_declared_keys_in_their_order(name: str) -> None:
    message = BASE[name]
    record = BY_CLASS[type(message)]
    written = list(json.loads(SERIALIZER.dumps(message)))
    declared = [
        field.key
        for field in record.fields
        if not (field.sparse and getattr(message, field.key) == field.default)
    ]
    assert written == ["type", *declared]


def test_a_record_leaving_out_a_field_its_class_needs_is_refused() -> None:
    record = Record(None, ToolCall, (Field("id", Kind.ID),))
    with pytest.raises(TypeError, match=r"ToolCall\.name is not in its record"):
        _ = record.unstored


@contextmanager
def native_schema(messages: tuple[Record, ...]) -> Iterator[None]:
    assert native is not None
    _hand_schema_to_native(messages)
    try:
        yield
    finally:
        _hand_schema_to_native()


@needs_native
def test_the_native_decoder_decodes_by_the_declaration_it_is_handed() -> None:
    assert native is not None
    data = SERIALIZER.dumps(ToolMessage("c1", "done", "lookup", message_id="t1"))
    assert native.decode_message(data) == SERIALIZER.loads(data)
    tool = next(r for r in MESSAGE_RECORDS if r.tag == "tool")
    text_flag = dataclasses.replace(
        tool,
        fields=tuple(
            dataclasses.replace(f, kind=Kind.TEXT) if f.key == "is_error" else f
            for f in tool.fields
        ),
    )
    with native_schema(tuple(text_flag if r is tool else r for r in MESSAGE_RECORDS)):
        assert native.decode_message(data) is None  # false is no str: left to the checked path
    assert native.decode_message(data) == SERIALIZER.loads(data)


@needs_native
def test_the_native_decoder_refuses_a_kind_it_does_not_know() -> None:
    assert native is not None
    tool = next(r for r in MESSAGE_RECORDS if r.tag == "tool")
    odd = dataclasses.replace(tool, fields=(*tool.fields, Field("colour", "colour")))
    with pytest.raises(ValueError, match='unknown field kind "colour"'), native_schema((odd,)):
        pass
    data = SERIALIZER.dumps(BASE["tool"])
    assert native.decode_message(data) == SERIALIZER.loads(data)  # the declaration in use stays
