"""Waiting for work that must not be cut in the middle (a store write, a closing turn), and
`Cancelled`, how a cancelled turn stops (the runner raises it, tracing does not count it as a
failure)."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class Cancelled(Exception):
    """The turn was cancelled (here, or elsewhere through the store)."""


def in_thread(fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
    """The future of ``fn(*args)`` in a worker thread: `asyncio.to_thread`'s call (the loop's
    default executor, in a copy of the caller's context) made for its future, which no task
    owns. Awaiting `asyncio.to_thread` would put the call in a task, which a loop shutting
    down cancels with the others, losing what the call did; this future is only ever done
    when the call is (nothing here cancels it)."""
    loop = asyncio.get_running_loop()
    return loop.run_in_executor(None, contextvars.copy_context().run, fn, *args)


async def wait_uncut(task: asyncio.Future[Any]) -> bool:
    """Waits until ``task`` is done, through any cancellations of the caller meanwhile (which
    never reach ``task``); True if the caller was cancelled, which it should then raise."""
    cancelled = False
    while not task.done():
        try:
            await asyncio.wait((task,))
        except asyncio.CancelledError:
            cancelled = True
    return cancelled
