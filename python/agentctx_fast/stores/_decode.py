"""A parsed record to its object, as `_schema` declares it: a fast path and a checked path.

`load_message` and `load_state` are the checked path: every field is read with its JSON type
checked and built through the class, so a corrupt or hostile record is a `SerializationError`
(or the class's own error) naming what is wrong. `fast_message` is the fast path for message
records: it checks every rule the checked path and the classes apply, builds the object from the
checked values without running the classes' checks again, and gives None for anything it is not
sure of, which the checked path then decodes again: it alone writes errors, so a bad record gets
the same error whichever path saw it first. `_native.decode_message` is `fast_message` in Rust
(with the JSON parse), set up from the same tables.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from datetime import datetime
from typing import Any, cast

from agentctx_fast._ids import MAX_VERSION, PARTICIPANT_NAME
from agentctx_fast.core.messages import (
    IMAGE_DETAILS,
    MAX_INLINE_BYTES,
    SYSTEM_ROLES,
    Message,
    Part,
)
from agentctx_fast.errors import SerializationError
from agentctx_fast.stores._schema import (
    AS_IS,
    BY_CLASS,
    BY_TAG,
    CALL_RECORD,
    JSON_TYPES,
    PART_BY_TAG,
    REQUIRED,
    STATE_RECORD,
    USAGE_RECORD,
    Kind,
    Record,
)

# -- the checked path ----------------------------------------------------------------------------


class _Reader:
    """Typed access to one decoded JSON object; every mistake is a `SerializationError`."""

    __slots__ = ("_fields", "_tag", "_used")

    def __init__(self, fields: object, tag: str) -> None:
        if not isinstance(fields, dict):
            raise SerializationError(f"{tag}: expected a JSON object, got {type(fields).__name__}")
        self._fields: dict[str, Any] = fields
        self._tag = tag
        self._used = {"type"}

    def get(self, name: str, kinds: tuple[type, ...], default: object) -> Any:
        self._used.add(name)
        if name not in self._fields:
            if default is REQUIRED:
                raise SerializationError(f"{self._tag}: missing field {name!r}")
            return default
        value = self._fields[name]
        if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
            raise SerializationError(f"{self._tag}: field {name!r} has type {type(value).__name__}")
        return value

    def done(self) -> None:
        unknown = sorted(set(self._fields) - self._used)
        if unknown:
            raise SerializationError(f"{self._tag}: unknown field(s) {unknown}")


def _kinds(kind: str, nullable: bool) -> tuple[type, ...]:
    json_type = JSON_TYPES[kind]
    kinds = json_type if isinstance(json_type, tuple) else (json_type,)
    return (*kinds, type(None)) if nullable else kinds


# Per record: each field's key, the JSON types it may have, its default and its kind.
_PLANS: dict[Record, tuple[tuple[str, tuple[type, ...], object, str], ...]] = {
    record: tuple((f.key, _kinds(f.kind, f.nullable), f.default, f.kind) for f in record.fields)
    for record in BY_CLASS.values()
}
# Kinds whose checked JSON value is what the class takes.
_PLAIN = frozenset((*AS_IS, Kind.OBJECT))


def _load(record: Record, fields: object, label: str, where: str) -> Any:
    """``record``'s object from ``fields``, every error labelled ``label`` (nested ones,
    ``where``: the message they are in)."""
    reader = _Reader(fields, label)
    values: dict[str, object] = {}
    for key, kinds, default, kind in _PLANS[record]:
        value = reader.get(key, kinds, default)
        if value is not None and kind not in _PLAIN:
            value = _convert(kind, value, values, label, key, where)
        values[key] = value
    obj = record.cls(**values)
    reader.done()
    return obj


def _convert(
    kind: str, value: Any, values: dict[str, object], label: str, key: str, where: str
) -> object:
    """A checked JSON value as the class takes it."""
    if kind == Kind.CONTENT:
        if isinstance(value, str):
            return value
        here = f"message {values['message_id']!r}"
        return tuple(load_part(part, here) for part in value)
    if kind == Kind.CALLS:
        return tuple(_load(CALL_RECORD, c, f"tool_calls[{i}]", where) for i, c in enumerate(value))
    if kind == Kind.USAGE:
        return _load(USAGE_RECORD, value, "usage", where)
    if kind == Kind.DATA:
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError) as error:
            raise SerializationError(f"{where}: part data is not base64") from error
    if kind == Kind.ITEMS:
        return tuple(value)
    if kind == Kind.MESSAGES:
        return tuple(load_message(m, f"summary[{i}]") for i, m in enumerate(value))
    if kind == Kind.DATETIME:
        try:
            return datetime.fromisoformat(value)
        except ValueError as error:
            raise SerializationError(f"{label}: bad {key} {value!r}") from error
    return value


def load_message(fields: object, where: str = "message") -> Message:
    """The message record ``fields`` holds, through the checked path."""
    if not isinstance(fields, dict):
        raise SerializationError(f"{where}: expected a JSON object")
    tag = fields.get("type")
    if not isinstance(tag, str) or tag not in BY_TAG:
        raise SerializationError(f"{where}: unknown message type tag {tag!r}")
    message: Message = _load(BY_TAG[tag], fields, f"{where} {tag!r}", where)
    return message


def load_part(fields: object, where: str) -> Part:
    """The content part ``fields`` holds, in the message ``where``."""
    if not isinstance(fields, dict):
        raise SerializationError(f"{where}: a content part must be a JSON object")
    tag = fields.get("type")
    if not isinstance(tag, str) or tag not in PART_BY_TAG:
        raise SerializationError(f"{where}: unknown content part type {tag!r}")
    part: Part = _load(PART_BY_TAG[tag], fields, f"{where} part {tag!r}", where)
    return part


def load_state(fields: object) -> Any:
    """The compression state ``fields`` holds."""
    return _load(STATE_RECORD, fields, "compression_state", "compression_state")


# -- the fast path -------------------------------------------------------------------------------
# Each kind's check of a present, non-null value: the value as the object holds it, or _BAD.

_BAD: Any = object()
_ABSENT = object()


def _text(value: object) -> object:
    return value if type(value) is str else _BAD


def _identifier(value: object) -> object:
    # Lone surrogates were refused for the whole record before this path runs.
    return value if type(value) is str and "\x00" not in value else _BAD


def _name(value: object) -> object:
    fine = type(value) is str and "\x00" not in value and PARTICIPANT_NAME.fullmatch(value)
    return value if fine else _BAD


def _one_of(allowed: tuple[str, ...]) -> Callable[[object], object]:
    return lambda value: value if type(value) is str and value in allowed else _BAD


def _version(value: object) -> object:
    return value if type(value) is int and 0 <= value <= MAX_VERSION else _BAD


def _count(value: object) -> object:
    return value if type(value) is int and value >= 0 else _BAD


def _data(value: object) -> object:
    if type(value) is not str:
        return _BAD
    try:
        data = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return _BAD
    return data if len(data) <= MAX_INLINE_BYTES else _BAD


def _content(value: object) -> object:
    if type(value) is str:
        return value
    if type(value) is not list:
        return _BAD
    parts = []
    for part in value:
        tag = part.get("type") if type(part) is dict else None
        build = _FAST_PARTS.get(tag) if type(tag) is str else None
        built = None if build is None else build(part)
        if built is None:
            return _BAD
        parts.append(built)
    return tuple(parts)


def _calls(value: object) -> object:
    if type(value) is not list:
        return _BAD
    calls = tuple(map(_fast_call, value))
    return _BAD if None in calls else calls


def _usage(value: object) -> object:
    usage = _fast_usage(value)
    return _BAD if usage is None else usage


_CHECKS: dict[str, Callable[[object], object]] = {
    Kind.TEXT: _text,
    Kind.ID: _identifier,
    Kind.NAME: _name,
    Kind.ROLE: _one_of(SYSTEM_ROLES),
    Kind.DETAIL: _one_of(IMAGE_DETAILS),
    Kind.VERSION: _version,
    Kind.COUNT: _count,
    Kind.INT: lambda value: value if type(value) is int else _BAD,
    Kind.BOOL: lambda value: value if type(value) is bool else _BAD,
    Kind.OBJECT: lambda value: value if type(value) is dict else _BAD,
    Kind.CONTENT: _content,
    Kind.CALLS: _calls,
    Kind.USAGE: _usage,
    Kind.DATA: _data,
    Kind.ITEMS: lambda value: _BAD,  # each item is checked on the checked path
}


def _fast(record: Record) -> Callable[[object], Any]:
    """The fast path of ``record``: its object from a parsed record, or None."""
    cls = record.cls
    # A message class's `__new__` is its native base's.
    new = cast("Callable[[type], Any]", cls.__new__)
    keys = frozenset(f.key for f in record.fields) | ({"type"} if record.tag else set())
    plan = tuple(
        (f.key, _CHECKS[f.kind], f.default, f.nullable, getattr(cls, f.key).__set__)
        for f in record.fields
    )
    # Set as the class's __init__ sets them.
    unstored = tuple((getattr(cls, name).__set__, value) for name, value in record.unstored)
    needs_one_of = record.needs_one_of

    def build(fields: object) -> Any:
        if type(fields) is not dict or not fields.keys() <= keys:
            return None
        obj: Any = new(cls)
        get = fields.get
        for key, check, default, nullable, setter in plan:
            value = get(key, _ABSENT)
            if value is _ABSENT:
                if default is REQUIRED:
                    return None
                value = default
            elif value is None:
                if not nullable:
                    return None
            elif (value := check(value)) is _BAD:
                return None
            setter(obj, value)
        for setter, value in unstored:
            setter(obj, value)
        if needs_one_of and all(get(key) is None for key in needs_one_of):
            return None
        return obj

    return build


_FAST_PARTS = {tag: _fast(record) for tag, record in PART_BY_TAG.items()}
_fast_call = _fast(CALL_RECORD)
_fast_usage = _fast(USAGE_RECORD)
_FAST_MESSAGES = {tag: _fast(record) for tag, record in BY_TAG.items()}


def fast_message(fields: dict[str, Any]) -> Message | None:
    """The message ``fields`` (a parsed record, lone surrogates refused) holds, or None to
    leave it to the checked path."""
    tag = fields.get("type")
    build = _FAST_MESSAGES.get(tag) if type(tag) is str else None
    return None if build is None else build(fields)
