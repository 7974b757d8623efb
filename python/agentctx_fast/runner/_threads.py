"""The worker threads of the async runner's plain (blocking) models and tools.

A call is one byte written to an idle worker's pipe (the worker waits on its end) and one
``call_soon_threadsafe`` back to the caller's loop: about half of what ``run_in_executor`` costs
(its work item, its lock-guarded queue and the chained asyncio future), which a tool turn pays
for every plain tool call. The write lets go of the GIL, and a short call often runs to its end
in the worker before the caller has left `_Workers.submit`: the caller then takes the answer
itself, and the call costs neither the loop's wake-up nor a round of the loop (a long call in
Python code holds the caller back for a switch interval at most, as it would whenever the
loop woke meanwhile). A pipe rather than a lock wakes the worker: the write lets go of the GIL
while it wakes the worker (a lock's release keeps it), and the kernel treats a pipe wake-up,
like a socket's, as a hand-over, tending to run the worker where the caller is about to wait.
A pipe's write costs less than a socket's send: some 5-10 µs of the 30 µs the hop adds to the
fastest plain-tool turns on a shared two-CPU VM (`benches/bench_async_runner.py`).

A worker counts itself idle before it answers, so the next call, made as soon as the caller
has the answer, finds it: calls in a row use one thread. As with the loop's default executor,
at most ``min(32, cpus + 4)`` threads run calls at once and more calls wait for one; a thread
starts only when no worker is idle, so a call never waits behind another one while the limit
allows a new thread. Workers are daemon threads that live as long as the process (a call in
flight when the interpreter exits does not hold it).

The future of a call cannot be cancelled (`_Call`): the call runs to its end whatever its
caller does, and the caller awaits it directly, without `asyncio.shield`'s extra future and
round of the loop.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

MAX_WORKERS = min(32, (os.cpu_count() or 1) + 4)

_Outcome = tuple[Any, BaseException | None]  # (result, None) or (None, error)


class _Job:
    """One call: run by a worker, answered through the caller's loop, or left for the caller
    when it is done before the caller has left `_Workers.submit` (``detached`` still False)."""

    __slots__ = ("args", "context", "detached", "fn", "future", "loop", "outcome")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        future: asyncio.Future[Any],
        fn: Callable[..., Any],
        args: tuple[Any, ...],
    ) -> None:
        self.loop = loop
        self.future = future
        self.context = contextvars.copy_context()
        self.fn = fn
        self.args = args
        self.outcome: _Outcome | None = None
        self.detached = False


class _Worker:
    """One worker thread and the pipe that wakes it; ``job`` is what it runs next."""

    __slots__ = ("_waiting", "_wake", "job")

    def __init__(self, job: _Job) -> None:
        self.job: _Job | None = job
        self._waiting, self._wake = os.pipe()

    def give(self, job: _Job) -> None:
        self.job = job
        os.write(self._wake, b"\0")

    def next_job(self) -> _Job:
        while self.job is None:  # a job found before its byte was read leaves that byte
            os.read(self._waiting, 1)
        job, self.job = self.job, None
        return job

    def close(self) -> None:
        os.close(self._wake)
        os.close(self._waiting)


class _Workers:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []  # waiting for a job, the one that ran last at the end
        self._backlog: collections.deque[_Job] = collections.deque()  # every worker busy
        self._threads = 0
        self._workers: list[_Worker] = []  # every worker started, idle or busy

    def submit(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = _Call(loop=loop)
        job = _Job(loop, future, fn, args)
        with self._lock:
            worker = self._idle.pop() if self._idle else None
            start = worker is None and self._threads < MAX_WORKERS
            if start:
                self._threads += 1
            elif worker is None:
                self._backlog.append(job)  # the next worker to finish takes it
        if worker is not None:
            worker.give(job)
        elif start:
            new = _Worker(job)
            try:
                threading.Thread(
                    target=self._work, args=(new,), name="agentctx-worker", daemon=True
                ).start()
            except BaseException:
                new.close()
                with self._lock:
                    self._threads -= 1
                raise
            with self._lock:
                self._workers.append(new)
        with self._lock:
            outcome, job.detached = job.outcome, True
        if outcome is not None:  # done while we woke the worker: no round of the loop
            _settle(future, *outcome)
        return future

    def _work(self, worker: _Worker) -> None:
        job: _Job | None = worker.next_job()
        while job is not None:
            try:
                outcome: _Outcome = (job.context.run(job.fn, *job.args), None)
            except BaseException as error:  # handed to the caller, as an executor does
                outcome = (None, error)
            # Counted idle before it answers: a call made as soon as the caller is woken finds
            # this worker, which is about to wait (and a pipe write never misses it).
            with self._lock:
                nxt = self._backlog.popleft() if self._backlog else None
                if nxt is None:
                    self._idle.append(worker)
                post = job.detached
                if not post:
                    job.outcome = outcome  # the caller is still in `submit`: it answers
            if post:
                try:
                    job.loop.call_soon_threadsafe(_settle, job.future, *outcome)
                except RuntimeError:
                    pass  # the loop is closed: nobody waits for the result
            del outcome
            job = nxt
            if job is None:
                job = worker.next_job()


class _Call(asyncio.Future[T]):
    """The future of a call in a worker thread, which runs to its end whatever its caller
    does: it cannot be cancelled. A task cancelled while it awaits one is woken when the call
    has ended and gets its `asyncio.CancelledError` then, the result still in the future.

    Awaiting it directly spares the extra future, callbacks and event-loop round that
    ``await asyncio.shield(future)`` costs, for the same outcome.
    """

    def cancel(self, msg: Any = None) -> bool:
        return False


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


_workers = _Workers()


def _forked() -> None:
    """In a forked child, which has none of the parent's threads: new workers, and the
    pipes of the parent's closed (nothing would ever read them)."""
    global _workers
    parents, _workers = _workers._workers, _Workers()
    for worker in parents:
        worker.close()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_forked)


def in_worker(fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
    """A future of ``fn(*args)``, run in a worker thread (on the running loop) in a copy of the
    caller's context, as `asyncio.to_thread` does (a tracing span or request id set in a
    context variable is seen by a plain tool)."""
    return _workers.submit(fn, *args)
