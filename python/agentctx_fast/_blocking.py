"""One implementation, two drivers: the blocking driver of the library's async code.

Every rule that does I/O (the stores, the turn loop) is written once, as ``async`` code that
awaits an I/O port. The async API gives it a port that really awaits (SQLAlchemy asyncio,
redis.asyncio, awaited models and tools); the blocking API gives it a port whose coroutines do
their I/O synchronously and never suspend, and `run_sync` runs such a coroutine to its end in
one step, on any thread, without an event loop.

The adapters between a protocol's blocking and awaitable forms are written once too: a
`BlockingAdapter` lists each method of the protocol as ``name = blocking(AsyncProtocol.name)``
and an `AwaitableAdapter` as ``name = awaitable(Protocol.name)``; type checkers see each method
with the protocol's own signature.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar

T = TypeVar("T")
P = ParamSpec("P")
W = TypeVar("W")  # what an adapter wraps


class SuspendedError(RuntimeError):
    """A coroutine run by `run_sync` awaited something that suspends (a bug in a port)."""


def run_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """The result of ``coroutine``, whose awaits all complete without suspending.

    >>> async def add(a: int, b: int) -> int:
    ...     return a + b
    >>> run_sync(add(1, 2))
    3
    """
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coroutine.close()
    raise SuspendedError("a blocking call awaited an operation that suspends")


class BlockingAdapter(Generic[W]):
    """Base of a blocking adapter: the async implementation it drives with `run_sync` (one
    whose I/O port never suspends: a store's one implementation over its blocking port)."""

    __slots__ = ("_inner",)

    def __init__(self, inner: W) -> None:
        self._inner = inner


class AwaitableAdapter(Generic[W]):
    """Base of an awaitable adapter: the blocking object it offers to asyncio code (one that
    does not block, in process, or that the caller accepts to block on)."""

    __slots__ = ("_inner",)

    def __init__(self, inner: W) -> None:
        self._inner = inner


def blocking(
    method: Callable[Concatenate[Any, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[Any, P], T]:
    """The method of a `BlockingAdapter` that runs ``method`` of its implementation."""
    name = method.__name__

    def call(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> T:
        result: T = run_sync(getattr(self._inner, name)(*args, **kwargs))
        return result

    return _named(call, method)


def awaitable(
    method: Callable[Concatenate[Any, P], T],
) -> Callable[Concatenate[Any, P], Coroutine[Any, Any, T]]:
    """The coroutine method of an `AwaitableAdapter` that calls ``method`` of what it wraps."""
    name = method.__name__

    async def call(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> T:
        result: T = getattr(self._inner, name)(*args, **kwargs)
        return result

    return _named(call, method)


def driven(
    method: Callable[Concatenate[Any, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[Any, P], T]:
    """A blocking method that runs the coroutine method ``method`` on its own object (a
    blocking store, whose port never suspends): the async and blocking stores share one
    method."""

    def call(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return run_sync(method(self, *args, **kwargs))

    return _named(call, method)


F = TypeVar("F", bound=Callable[..., Any])


def _named(call: F, method: Callable[..., Any]) -> F:
    """``call`` under ``method``'s name and docstring, and with its signature for `inspect`
    (``__wrapped__``: ``help()`` and signature-reading tools show the protocol's parameters,
    as type checkers do)."""
    functools.update_wrapper(call, method, assigned=("__name__", "__doc__"), updated=())
    return call


def implementation(obj: object, wrap: Callable[[Any], T]) -> T:
    """``obj`` for the library's one (async) implementation: a `BlockingAdapter` gives back
    the implementation it drives (no async → blocking → async detour), anything else is
    ``wrap(obj)``."""
    if isinstance(obj, BlockingAdapter):
        inner: T = obj._inner
        return inner
    return wrap(obj)
