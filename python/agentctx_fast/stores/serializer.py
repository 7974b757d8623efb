"""`JsonAgentStoreSerializer`: messages and compression states as tagged UTF-8 JSON.

The type is a tag from a closed registry; an unknown tag is an error, never a class to load.
Every field is checked on the way in, so a corrupt or hostile record is a `SerializationError`
and never a half-built object. The record format is declared once, in `_schema`; `_encode`
writes it and `_decode` reads it; this module holds the JSON parse and the one decoding entry.

>>> from agentctx_fast import UserMessage
>>> serializer = JsonAgentStoreSerializer()
>>> data = serializer.dumps(UserMessage("hi", message_id="u1"))
>>> data[:16]
b'{"type":"user","'
>>> serializer.loads(data).text
'hi'
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from agentctx_fast._backend import backend, native
from agentctx_fast._ids import is_unicode_text
from agentctx_fast.compression.coordinator import CompressionState
from agentctx_fast.core.messages import IMAGE_DETAILS, MAX_INLINE_BYTES, SYSTEM_ROLES, Message
from agentctx_fast.errors import AgentCtxError, SerializationError
from agentctx_fast.stores import _decode
from agentctx_fast.stores._encode import dump as dump_record
from agentctx_fast.stores._encode import dump_message
from agentctx_fast.stores._schema import (
    CALL_RECORD,
    MESSAGE_RECORDS,
    PART_RECORDS,
    STATE_RECORD,
    USAGE_RECORD,
    Record,
)


@runtime_checkable
class AgentStoreSerializer(Protocol):
    """What a store needs: bytes for messages and compression states, and back."""

    def dumps(self, obj: object) -> bytes: ...

    def loads(self, data: bytes) -> Any: ...


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):  # e.g. 1e400: `dumps` could not write it back
        raise ValueError(f"number {literal} is out of range")
    return value


# `json.loads(text, parse_constant=..., parse_float=...)` without a new decoder on every call.
_JSON = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite_float)

# Raw UTF-8 cannot hold a surrogate, so a lone one can only come from a \uD800-\uDFFF escape;
# records without such an escape (everything `dumps` writes) skip the walk below.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _check_no_lone_surrogate(value: object, where: str = "record") -> None:
    """`dumps` cannot write a lone surrogate (it is not Unicode text), so `loads` refuses it."""
    try:
        _walk_texts(value, where)
    except RecursionError as error:
        raise SerializationError("stored record is nested too deeply") from error


def _walk_texts(value: object, where: str) -> None:
    if isinstance(value, str):
        if not is_unicode_text(value):
            raise SerializationError(
                f"{where}: {value!r} holds a lone surrogate, not valid Unicode text"
            )
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _walk_texts(item, f"{where}[{index}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            _walk_texts(key, f"{where} key")
            _walk_texts(item, f"{where}.{key}")


class JsonAgentStoreSerializer:
    """The default serializer: a UTF-8 JSON object with a top-level ``"type"`` tag."""

    def dumps(self, obj: object) -> bytes:
        """``obj`` (a message or a compression state) as bytes."""
        try:
            if isinstance(obj, Message):
                fields = dump_message(obj)
            elif isinstance(obj, CompressionState):
                fields = dump_record(STATE_RECORD, obj, ("compression_state",))
            else:
                raise SerializationError(f"cannot serialise {type(obj).__name__}")
            return json.dumps(
                fields, ensure_ascii=False, allow_nan=False, separators=(",", ":")
            ).encode("utf-8")
        except (ValueError, TypeError, UnicodeEncodeError) as error:
            raise SerializationError(f"cannot serialise {type(obj).__name__}: {error}") from error
        except RecursionError as error:  # cyclic or absurdly deep metadata
            raise SerializationError(
                f"cannot serialise {type(obj).__name__}: metadata is cyclic or nested too deeply"
            ) from error

    def loads(self, data: bytes) -> Message | CompressionState:
        """The object ``data`` holds; `SerializationError` for anything but a valid record."""
        if isinstance(data, (bytearray, memoryview)):
            data = bytes(data)
        if not isinstance(data, bytes):
            raise SerializationError(f"expected bytes, got {type(data).__name__}")
        if _decode_message is not None:
            message = _decode_message(data)
            if message is not None:
                return message
        try:
            text = data.decode("utf-8")
            if text.startswith("\ufeff"):  # what `json.loads` says of it
                raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
            fields = _JSON.decode(text)
        except (UnicodeDecodeError, ValueError, RecursionError) as error:
            raise SerializationError(f"stored record is not valid UTF-8 JSON: {error}") from error
        if not isinstance(fields, dict):
            raise SerializationError("stored record is not a JSON object")
        if _SURROGATE_ESCAPE.search(text):
            _check_no_lone_surrogate(fields)
        try:
            if fields.get("type") == "compression_state":
                return _load_state(fields)  # type: ignore[no-any-return]
            message = _fast_message(fields)
            return _load_message(fields) if message is None else message
        except SerializationError:
            raise
        except AgentCtxError as error:  # a field value the message classes refuse
            raise SerializationError(f"stored record is invalid: {error}") from error


# `loads` is the one decoding entry: the Rust fast path (bytes in) when the Rust backend is in
# use, else the parse and the Python fast path, and the checked path for whatever a fast path
# is not sure of. Each step is a module name here, so the tests and benches/bench_decode.py can
# run one path alone and compare them.
_fast_message = _decode.fast_message
_load_message = _decode.load_message
_load_state = _decode.load_state


def _hand_schema_to_native(messages: tuple[Record, ...] = MESSAGE_RECORDS) -> None:
    """Hands the record tables to the Rust fast path (``messages`` in place of the message
    records, for a test of the native decoder on another schema)."""
    if native is not None:
        native.set_record_schema(
            messages,
            PART_RECORDS,
            CALL_RECORD,
            USAGE_RECORD,
            MAX_INLINE_BYTES,
            SYSTEM_ROLES,
            IMAGE_DETAILS,
        )


# The Rust fast path reads the same tables (set on the Python backend too: its tests compare it).
_hand_schema_to_native()
_decode_message: Callable[[bytes], Message | None] | None = (
    native.decode_message if backend == "rust" and native is not None else None
)
"""The Rust fast path (`_fast_message` with the JSON parse) when the Rust backend is in use."""


def load_message(serializer: AgentStoreSerializer, data: bytes) -> Message:
    """``serializer.loads`` for a record that must be a message."""
    obj = _loads(serializer, data)
    if not isinstance(obj, Message):
        raise SerializationError(f"expected a message record, got {type(obj).__name__}")
    return obj


def load_state(serializer: AgentStoreSerializer, data: bytes) -> CompressionState:
    """``serializer.loads`` for a record that must be a compression state."""
    obj = _loads(serializer, data)
    if not isinstance(obj, CompressionState):
        raise SerializationError(f"expected a compression state, got {type(obj).__name__}")
    return obj


def dump(serializer: AgentStoreSerializer, obj: object) -> bytes:
    """``serializer.dumps``, held to returning bytes and raising only `SerializationError`."""
    try:
        data = serializer.dumps(obj)
    except SerializationError:
        raise
    except Exception as error:
        raise SerializationError(f"serializer failed on {type(obj).__name__}: {error}") from error
    if not isinstance(data, bytes):
        raise SerializationError(f"serializer.dumps returned {type(data).__name__}, not bytes")
    return data


def _loads(serializer: AgentStoreSerializer, data: bytes) -> object:
    try:
        return serializer.loads(data)
    except SerializationError:
        raise
    except Exception as error:
        raise SerializationError(f"serializer failed to load a record: {error}") from error
