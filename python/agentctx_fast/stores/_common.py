"""Argument checks shared by the stores."""

from __future__ import annotations

import operator
import re
from typing import Any, TypeVar

from agentctx_fast.errors import InvalidArgumentError

__all__ = [
    "check_key_prefix",
    "check_table_prefix",
    "shared_port",
    "unit_handle",
]

_TABLE_PREFIX = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Braces too: Redis Cluster hashes a key by its first {…}, which must be the conversation's tag.
_KEY_PREFIX_FORBIDDEN = re.compile(r"[\s*?\[\]\\{}]|[\x00-\x1f\x7f]")
MAX_TABLE_PREFIX = 40  # leaves room for the table and index names under PostgreSQL's 63 bytes


def check_table_prefix(prefix: object) -> str:
    """A table prefix: ``[A-Za-z_][A-Za-z0-9_]*``, at most 40 characters."""
    if (
        not isinstance(prefix, str)
        or not _TABLE_PREFIX.fullmatch(prefix)
        or len(prefix) > MAX_TABLE_PREFIX
    ):
        raise InvalidArgumentError(
            f"table_prefix must match [A-Za-z_][A-Za-z0-9_]* (at most {MAX_TABLE_PREFIX} "
            f"characters), got {prefix!r}"
        )
    return prefix


def check_key_prefix(prefix: object) -> str:
    """A Redis key prefix: 1 to 128 characters, no whitespace, wildcards, braces or control
    characters."""
    if (
        not isinstance(prefix, str)
        or not 1 <= len(prefix) <= 128
        or _KEY_PREFIX_FORBIDDEN.search(prefix)
    ):
        raise InvalidArgumentError(
            f"key_prefix must be 1-128 characters without whitespace, wildcards (* ? [ ]), "
            f"braces (the conversation's cluster hash tag), backslashes or control characters, "
            f"got {prefix!r}"
        )
    return prefix


_PRISTINE: dict[type, dict[str, object]] = {}
"""The methods of each `unit_handle` class, and of the library's serializer, as the library
defined them."""

H = TypeVar("H", bound=type)


def unit_handle(cls: H) -> H:
    """Class decorator: ``cls`` (a database store's turn store or chat memory) offers its
    store's port as the ``_io_port`` property, for `shared_port`."""
    from agentctx_fast.stores.serializer import JsonAgentStoreSerializer

    for kind in (cls, JsonAgentStoreSerializer):
        if kind not in _PRISTINE:
            _PRISTINE[kind] = {name: value for name, value in vars(kind).items() if callable(value)}
    return cls


def _library_own(obj: object) -> bool:
    """``obj`` is of a class in `_PRISTINE`, exactly, with none of its methods replaced (on
    the class or on ``obj``)."""
    cls = type(obj)
    pristine = _PRISTINE.get(cls)
    if pristine is None:
        return False
    # (the runner asks before each unit of store I/O: the loops run in C)
    if not all(map(operator.is_, map(vars(cls).get, pristine), pristine.values())):
        return False
    mine = getattr(obj, "__dict__", None)
    return not mine or mine.keys().isdisjoint(pristine)


def shared_port(*handles: object) -> Any:
    """The I/O port of the one database store behind every handle (a turn store, a chat
    memory) given, or None: calls on that port can then run as one unit (its ``together``:
    on the async SQLite store, one worker-thread hop). Only a handle of a
    `unit_handle` class whose methods are the library's own offers its port: a subclass, or a
    class or instance with a method replaced, may await other things, and runs call by call.
    So does a handle whose store has a serializer of the user's (a unit may run on another
    thread, outside the caller's context, and no user code runs there). None among
    ``handles`` is skipped."""
    port: Any = None
    for handle in handles:
        if handle is None:
            continue
        if not _library_own(handle):
            return None
        serializer = getattr(getattr(handle, "_store", None), "serializer", None)
        if serializer is not None and not _library_own(serializer):
            return None
        found = getattr(handle, "_io_port", None)
        if found is None or (port is not None and found is not port):
            return None
        port = found
    return port
