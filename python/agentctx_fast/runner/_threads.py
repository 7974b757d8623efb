"""The worker threads of the async runner's plain (blocking) models and tools.

A call is one put on a queue that an idle worker is already waiting on, and one
``call_soon_threadsafe`` back to the caller's loop: about half of what ``run_in_executor`` costs
(its work item, its lock-guarded queue and the chained asyncio future), which a tool turn pays
for every plain tool call.

As with the loop's default executor, at most ``min(32, cpus + 4)`` threads run calls at once
and more calls wait for one; a thread starts only when no worker is idle, so a call never
waits behind another one while the limit allows a new thread. Workers are daemon threads that
live as long as the process (a call in flight when the interpreter exits does not hold it).
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

MAX_WORKERS = min(32, (os.cpu_count() or 1) + 4)

_Job = tuple[
    asyncio.AbstractEventLoop,
    "asyncio.Future[Any]",
    contextvars.Context,
    Callable[..., Any],
    tuple[Any, ...],
]


class _Workers:
    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0  # workers waiting for a job no call has claimed yet
        self._waiting = 0  # jobs queued while every worker was busy, claimed by none yet
        self._threads = 0

    def submit(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._lock:
            start = False
            if self._idle:
                self._idle -= 1  # this job is that worker's: the next call looks further
            elif self._threads < MAX_WORKERS:
                self._threads += 1
                start = True
            else:
                self._waiting += 1  # the next worker to finish takes it
        if start:
            try:
                threading.Thread(target=self._work, name="agentctx-worker", daemon=True).start()
            except BaseException:
                with self._lock:
                    self._threads -= 1
                raise
        self._jobs.put((loop, future, contextvars.copy_context(), fn, args))
        return future

    def _work(self) -> None:
        jobs = self._jobs
        while True:
            loop, future, context, fn, args = jobs.get()
            try:
                outcome: tuple[Any, BaseException | None] = (context.run(fn, *args), None)
            except BaseException as error:  # handed to the caller, as an executor does
                outcome = (None, error)
            try:
                loop.call_soon_threadsafe(_settle, future, *outcome)
            except RuntimeError:
                pass  # the loop is closed: nobody waits for the result
            del loop, future, context, fn, args, outcome
            with self._lock:
                if self._waiting:
                    self._waiting -= 1  # goes on with a job queued meanwhile
                else:
                    self._idle += 1


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


_workers = _Workers()


def _forked() -> None:
    global _workers
    _workers = _Workers()  # the child has none of the parent's threads


os.register_at_fork(after_in_child=_forked)


def in_worker(fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
    """A future of ``fn(*args)``, run in a worker thread (on the running loop) in a copy of the
    caller's context, as `asyncio.to_thread` does (a tracing span or request id set in a
    context variable is seen by a plain tool)."""
    return _workers.submit(fn, *args)
