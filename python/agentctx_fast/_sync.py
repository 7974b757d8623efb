"""One implementation, two drivers: the blocking driver of the library's async code.

Every rule that does I/O (the stores, the turn loop) is written once, as ``async`` code that
awaits an I/O port. The async API gives it a port that really awaits (SQLAlchemy asyncio,
redis.asyncio, awaited models and tools); the blocking API gives it a port whose coroutines do
their I/O synchronously and never suspend, and `run_sync` runs such a coroutine to its end in
one step, on any thread, without an event loop.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


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
