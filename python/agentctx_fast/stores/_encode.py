"""An object to its JSON record, as `_schema` declares it.

Every field is checked against what the checked decoder requires before it is written:
`dumps` must never write a record that `loads` refuses (the classes check most of these too,
but an object can be forced past its checks), so one bad message cannot make a stored
conversation unreadable. A place in an object is kept as a path and named only in an error.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Callable
from datetime import datetime
from operator import attrgetter
from typing import Any

from agentctx_fast.core.messages import Message
from agentctx_fast.errors import SerializationError
from agentctx_fast.stores._schema import (
    AS_IS,
    BY_CLASS,
    BY_TAG,
    JSON_TYPES,
    Field,
    Kind,
    Record,
)

Path = tuple[object, ...]
"""A place in an object being written: a message (or a str) then keys and list indices."""


def _where(path: Path) -> str:
    head, *rest = path
    out = f"message {head.message_id!r}" if isinstance(head, Message) else str(head)
    return out + "".join(f"[{p}]" if isinstance(p, int) else f" {p}" for p in rest)


def _check_json_value(value: object, path: Path) -> None:
    """Metadata and payloads must round-trip exactly: JSON types only, str keys, finite floats."""
    if value is None or isinstance(value, (str, bool, int)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise SerializationError(f"{_where(path)}: {value!r} is not valid JSON")
        return
    if isinstance(value, list):
        for item in value:
            _check_json_value(item, path)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise SerializationError(f"{_where(path)}: key {key!r} is not a str")
            _check_json_value(item, path)
        return
    raise SerializationError(f"{_where(path)}: {type(value).__name__} is not JSON-serialisable")


def _expect(value: object, kinds: tuple[type, ...], path: Path) -> None:
    """What the checked decoder requires of the field at ``path``."""
    if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
        raise SerializationError(f"{_where(path)} has type {type(value).__name__}")


def _json_types(kind: str) -> tuple[type, ...]:
    json_type = JSON_TYPES[kind]
    return json_type if isinstance(json_type, tuple) else (json_type,)


def _plain(kind: str) -> Callable[[Any, Path], object]:
    kinds = _json_types(kind)

    def dump(value: Any, path: Path) -> object:
        _expect(value, kinds, path)
        return value

    return dump


def _object(value: Any, path: Path) -> object:
    if type(value) is not dict:
        _expect(value, (dict,), path)
    if value:
        _check_json_value(value, path)
    return value


def _content(value: Any, path: Path) -> object:
    if isinstance(value, str):
        return value
    return _records(value, path)


def _records(value: Any, path: Path) -> object:
    if type(value) is not tuple:
        _expect(value, (tuple, list), path)
    return [_nested(item, path, index) for index, item in enumerate(value)]


def _data(value: Any, path: Path) -> object:
    _expect(value, (bytes,), path)
    return base64.b64encode(value).decode("ascii")


def _items(value: Any, path: Path) -> object:
    _expect(value, (tuple, list), path)
    items = list(value)
    _check_json_value(items, path)
    return items


def _datetime(value: Any, path: Path) -> object:
    _expect(value, (datetime,), path)
    return value.isoformat()


# How each kind is written when its value is not simply of its JSON type (or None).
_DUMPERS: dict[str, Callable[[Any, Path], object]] = {
    **{kind: _plain(kind) for kind in AS_IS},
    Kind.OBJECT: _object,
    Kind.CONTENT: _content,
    Kind.CALLS: _records,
    Kind.USAGE: lambda value, path: _nested(value, path, None),
    Kind.DATA: _data,
    Kind.ITEMS: _items,
    Kind.MESSAGES: lambda value, path: [dump_message(message) for message in value],
    Kind.DATETIME: _datetime,
}
# The exact types written as they are, without a call (metadata and payloads are walked).
_AS_IS = {kind: _json_types(kind) for kind in AS_IS}
_AS_IS[Kind.CONTENT] = (str,)  # a list of parts is written part by part


def _as_is(field: Field) -> tuple[type, ...]:
    as_is = _AS_IS.get(field.kind, ())
    return (*as_is, type(None)) if field.nullable else as_is


def _plan(record: Record) -> tuple[Callable[[object], tuple[Any, ...]], tuple[Any, ...]]:
    """Reads every field of an object in one call, and per field what `dump` needs."""
    keys = [f.key for f in record.fields]
    read = attrgetter(*keys) if len(keys) > 1 else lambda obj: (getattr(obj, keys[0]),)
    plan = tuple((f.key, f.sparse, f.default, _as_is(f), _DUMPERS[f.kind]) for f in record.fields)
    return read, plan


_PLANS = {record: _plan(record) for record in BY_CLASS.values()}


def dump(record: Record, obj: object, path: Path) -> dict[str, Any]:
    """The JSON object of ``obj`` as ``record`` declares it (at ``path``, for errors)."""
    out: dict[str, Any] = {"type": record.tag} if record.tag else {}
    read, plan = _PLANS[record]
    for (key, sparse, default, as_is, dumper), value in zip(plan, read(obj), strict=True):
        if sparse and value == default:
            continue
        if type(value) not in as_is:
            value = dumper(value, (*path, key))
        out[key] = value
    return out


def _nested(obj: object, path: Path, index: int | None) -> dict[str, Any]:
    """The record of ``obj`` at ``path`` (item ``index`` of a list there)."""
    path = path if index is None else (*path, index)
    record = BY_CLASS.get(type(obj))
    if record is None:
        raise SerializationError(f"{_where(path)} has type {type(obj).__name__}")
    return dump(record, obj, path)


def dump_message(message: Message) -> dict[str, Any]:
    """The JSON object of a message."""
    record = BY_CLASS.get(type(message))
    if record is None or record.tag not in BY_TAG:
        raise SerializationError(f"no type tag for {type(message).__name__}")
    return dump(record, message, (message,))
