"""Units of store I/O: a turn's store calls run as one unit when its turn store and chat
memory are handles of one database store whose port can run them together (on the async
SQLite store, one worker-thread hop instead of one per call).

A database store marks its handle classes with `unit_handle` (each offers its store's port as
the ``_io_port`` property); the runner asks `shared_port` before each unit of a turn's store
calls. The stores and the runner share this contract, so it lives at the package root.
"""

from __future__ import annotations

import operator
from typing import Any, TypeVar

__all__ = ["shared_port", "unit_handle"]

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
