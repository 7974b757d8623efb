"""The I/O ports of the SQL store: its one implementation awaits them, blocking or async.

A port runs one statement in its own connection (in a transaction when it writes, or on its
own in autocommit, which is as atomic: PostgreSQL, and the async store's SQLite engine) and
hands back what the statement returned, already fetched: the rows, or the number of rows
changed. Database errors become typed store errors; the transaction has rolled back by then.
``together`` runs several calls as one unit of I/O where the driver allows it (the async store's
SQLite engine: one trip to a connection's thread, held for the unit; the async store on
PostgreSQL: one connection, checked out and pinged once, in one greenlet); each call is still
its own statement or transaction, so a unit is not a transaction.

Otherwise a connection is held for one statement only, so one pooled engine serves every
thread (blocking store) or task (async store) of a process: a store made from a PostgreSQL
URL keeps up to `POOL_SIZE` connections open and opens at most `MAX_OVERFLOW` more under load;
a caller past that waits up to `POOL_TIMEOUT` seconds for a free one, then gets
`StoreUnavailableError`.
Connections are checked with a ping when taken from the pool (a restarted server costs one
failed ping, not a failed call; within a unit, whose connection is pinged once, the call after
the restart fails, and the unit's next calls reconnect).
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import sqlite3
import threading
import weakref
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    contextmanager,
    nullcontext,
)
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from agentctx_fast._extras import missing_dependency, require
from agentctx_fast._sync import run_sync
from agentctx_fast._tasks import wait_uncut
from agentctx_fast.errors import (
    InvalidArgumentError,
    SchemaNotInitializedError,
    StoreBusyError,
    StoreError,
    StoreUnavailableError,
)

try:
    import sqlalchemy as sa
    from sqlalchemy import exc as sa_exc
    from sqlalchemy.engine import Connection, Engine
    from sqlalchemy.pool import Pool, StaticPool
except ImportError as _error:
    raise missing_dependency("sql", _error) from _error

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

T = TypeVar("T")

__all__ = [
    "MAX_OVERFLOW",
    "POOL_OPTIONS",
    "POOL_SIZE",
    "POOL_TIMEOUT",
    "AsyncSqlPort",
    "BlockingSqlPort",
    "SqlPort",
    "async_engine",
    "blocking_engine",
    "check_dialect",
    "sa",
    "sa_exc",
    "store_error",
    "translated",
]

SUPPORTED_DIALECTS = ("sqlite", "postgresql")

POOL_SIZE = 5
"""Connections a store's own PostgreSQL engine keeps open (SQLAlchemy's ``pool_size``)."""
MAX_OVERFLOW = 10
"""Connections it may open beyond `POOL_SIZE` under load, closed when returned."""
POOL_TIMEOUT = 30.0
"""Seconds a caller waits for a connection when all ``POOL_SIZE + MAX_OVERFLOW`` are in use."""
SQLITE_BUSY_TIMEOUT = 30.0
"""Seconds a store's own SQLite connection waits for another connection's write lock (its busy
timeout) unless the URL sets ``?timeout=SECONDS``; past it the call raises
`StoreUnavailableError`, once: the store never retries a busy database itself."""
POOL_OPTIONS: dict[str, Any] = {
    "pool_size": POOL_SIZE,
    "max_overflow": MAX_OVERFLOW,
    "pool_timeout": POOL_TIMEOUT,
    "pool_pre_ping": True,
}
"""The pool of an engine a store makes from a PostgreSQL URL, blocking or async."""


@contextmanager
def translated(action: str) -> Iterator[None]:
    """Database errors become typed store errors (`store_error`)."""
    try:
        yield
    except sa_exc.SQLAlchemyError as error:
        raise store_error(error, action) from error


def store_error(error: sa_exc.SQLAlchemyError, action: str) -> StoreError:
    """The typed store error of a database error, the one place they are told apart:
    `SchemaNotInitializedError` for a missing table, `StoreUnavailableError` only when a
    later retry may succeed (`_retryable`), and `StoreError` for the rest (a constraint, a
    value too long, a syntax error: permanent, so never worth retrying)."""
    if _missing_table(getattr(error, "orig", None)):
        return SchemaNotInitializedError(
            f"database tables missing while {action}: create them with "
            f"store.schema().initialize() or the DDL `agentctx schema` prints ({error})"
        )
    if _waited(error):
        return StoreBusyError(f"database busy while {action}: {error}")
    if _retryable(error):
        return StoreUnavailableError(f"database unavailable while {action}: {error}")
    return StoreError(f"database error while {action}: {error}")


_SQLITE_BUSY, _SQLITE_LOCKED = 5, 6
# PostgreSQL SQLSTATEs worth a retry: classes 08 (connection) and 40 (serialization failure,
# deadlock); too many connections; a lock timeout; a statement timeout; the server shutting
# down, crashed or starting (57P01-57P03) or the session timed out; and a write to a read-only
# server (a standby: a failover is under way). Not a full disk or a dropped database.
_PG_RETRYABLE_CLASSES = ("08", "40")
_PG_RETRYABLE = ("53300", "55P03", "57014", "57P01", "57P02", "57P03", "57P05", "25006")
_PG_WAITED = ("55P03", "57014")
_PG_UNDEFINED_TABLE = "42P01"


def _waited(error: sa_exc.SQLAlchemyError) -> bool:
    """Whether the call waited its whole bound for a lock or a connection: the pool's
    timeout, SQLite's busy timeout, a PostgreSQL lock or statement timeout."""
    if isinstance(error, sa_exc.TimeoutError):
        return True
    orig = getattr(error, "orig", None)
    if isinstance(orig, sqlite3.Error):
        code = getattr(orig, "sqlite_errorcode", None)
        return code is not None and code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED)
    return _sqlstate(orig) in _PG_WAITED


def _retryable(error: sa_exc.SQLAlchemyError) -> bool:
    """Whether ``error`` says "retry later": the pool had no connection in time, the
    connection failed or was lost, the database was busy or locked past its timeout, or the
    server is failing over or shutting down."""
    if isinstance(error, sa_exc.TimeoutError | sa_exc.DisconnectionError):
        return True
    if not isinstance(error, sa_exc.DBAPIError):
        return False  # an error on the client side (a statement it cannot build, say)
    if error.connection_invalidated:  # SQLAlchemy saw the connection go
        return True
    orig = error.orig
    if isinstance(orig, sqlite3.Error):
        code = getattr(orig, "sqlite_errorcode", None)
        return code is not None and code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED)
    sqlstate = _sqlstate(orig)
    if sqlstate is None:  # no answer from the server: the connection failed or broke
        return isinstance(error, sa_exc.OperationalError | sa_exc.InterfaceError)
    return sqlstate[:2] in _PG_RETRYABLE_CLASSES or sqlstate in _PG_RETRYABLE


def _missing_table(orig: object) -> bool:
    """Whether the driver's error ``orig`` says a table does not exist."""
    if isinstance(orig, sqlite3.OperationalError):
        return str(orig).startswith("no such table")
    return _sqlstate(orig) == _PG_UNDEFINED_TABLE


def _sqlstate(orig: object) -> str | None:
    """The SQLSTATE of a PostgreSQL driver's error (psycopg: ``sqlstate``, psycopg2:
    ``pgcode``), None when the server sent none."""
    code = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    return code if isinstance(code, str) and len(code) == 5 else None


class Connects(Protocol):
    """What a port opens a single statement's connection with: an `Engine`, or the
    connection a unit of `AsyncSqlPort` holds (`_Held`)."""

    def connect(self) -> AbstractContextManager[Connection]: ...


class Begins(Protocol):
    """What a port begins a transaction with: an `Engine`, or the connection a unit of
    `AsyncSqlPort` holds (`_Held`)."""

    def begin(self) -> AbstractContextManager[Connection]: ...


class SqlPort(Protocol):
    """What the store's one implementation needs from a database connection."""

    dialect: str

    async def rows(
        self,
        action: str,
        statement: Any,
        *,
        write: bool = False,
        params: Mapping[str, Any] | None = None,
    ) -> Sequence[Any]:
        """The rows ``statement`` returns (in a committed transaction when ``write``), with
        ``params`` bound to its bind parameters."""
        ...

    async def changed(self, action: str, statement: Any) -> int:
        """How many rows the write ``statement`` changed, committed."""
        ...

    async def run(self, action: str, work: Callable[[Connection], Any]) -> None:
        """``work`` on a blocking connection in a committed transaction (schema changes)."""
        ...

    async def many(
        self, action: str, statement: Any, params: Sequence[Mapping[str, Any]]
    ) -> Sequence[Any]:
        """The rows ``statement`` returns, run once per ``params`` entry (batched into
        multi-row statements by the driver layer) in one committed transaction."""
        ...

    async def together(self, action: str, work: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """``work()``, whose awaits are this port's calls, as one unit of I/O where the
        driver allows (the async SQLite engine: one trip to a connection's thread for all of
        them); each call is still a statement or transaction of its own."""
        ...


def check_dialect(name: str) -> str:
    if name not in SUPPORTED_DIALECTS:
        raise InvalidArgumentError(
            f"SqlAgentStore supports SQLite and PostgreSQL, not {name!r}: its compare-and-set "
            "and lease statements use their INSERT … ON CONFLICT"
        )
    return name


class BlockingSqlPort:
    """The port over a blocking `Engine`; an engine with one shared connection (in-memory
    SQLite) is used by one thread at a time.

    On PostgreSQL every statement runs on its own in autocommit: a single statement is atomic
    by itself, and skipping ``BEGIN`` and ``COMMIT`` halves the round trips of each call.
    ``single`` and ``writer`` replace the engines single statements and write transactions run
    on, and ``checkpoint`` is called before each operation's first statement and again once a
    transaction has begun (`AsyncSqlPort` runs this port on its SQLite connection's thread)."""

    def __init__(
        self,
        engine: Engine,
        *,
        single: Connects | None = None,
        writer: Begins | None = None,
        checkpoint: Callable[[], None] | None = None,
    ) -> None:
        self.engine = engine
        self.dialect = check_dialect(engine.dialect.name)
        shared = isinstance(engine.pool, StaticPool)
        self._serial: AbstractContextManager[Any] = threading.RLock() if shared else nullcontext()
        if single is None and self.dialect == "postgresql":
            single = engine.execution_options(isolation_level="AUTOCOMMIT")
        self._single: Connects | None = single
        self._writer: Begins = writer or engine
        self._checkpoint = checkpoint or _go_on

    async def rows(
        self,
        action: str,
        statement: Any,
        *,
        write: bool = False,
        params: Mapping[str, Any] | None = None,
    ) -> Sequence[Any]:
        with translated(action), self._serial:
            self._checkpoint()
            return _fetched(self._open(write), statement, params)

    async def changed(self, action: str, statement: Any) -> int:
        with translated(action), self._serial:
            self._checkpoint()
            return _counted(self._open(True), statement)

    async def run(self, action: str, work: Callable[[Connection], Any]) -> None:
        with translated(action), self._serial:
            self._checkpoint()
            with self._writer.begin() as connection:
                self._checkpoint()
                work(connection)

    async def many(
        self, action: str, statement: Any, params: Sequence[Mapping[str, Any]]
    ) -> Sequence[Any]:
        with translated(action), self._serial:
            self._checkpoint()
            with self._writer.begin() as connection:
                self._checkpoint()
                return connection.execute(statement, params).all()

    async def together(self, action: str, work: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """``work()``, whose awaits are this port's calls (each runs as it comes)."""
        return await work()

    def _open(self, write: bool) -> Callable[[], AbstractContextManager[Connection]]:
        if self._single is not None:
            return self._single.connect
        return self.engine.begin if write else self.engine.connect


def _go_on() -> None:
    """The checkpoint of a port nobody stops."""


def _fetched(
    open_connection: Callable[[], AbstractContextManager[Connection]],
    statement: Any,
    params: Mapping[str, Any] | None,
) -> Sequence[Any]:
    """The rows of ``statement`` on a connection of its own (blocking SQLAlchemy: the blocking
    port calls it, the async port runs it in a greenlet of SQLAlchemy's asyncio layer)."""
    with open_connection() as connection:
        return connection.execute(statement, params).all()


def _counted(
    open_connection: Callable[[], AbstractContextManager[Connection]], statement: Any
) -> int:
    """How many rows ``statement`` changed, on a connection of its own (as `_fetched`)."""
    with open_connection() as connection:
        return int(connection.execute(statement).rowcount)


# The first connection of each engine, made once for every port on it (two stores on one
# engine of the caller's would otherwise make it at once, from two loops: the hang
# `AsyncSqlPort._first_connection` is there to avoid).
_first_locks: weakref.WeakKeyDictionary[Engine, threading.Lock] = weakref.WeakKeyDictionary()
_first_locks_guard = threading.Lock()
_connected_engines: weakref.WeakSet[Engine] = weakref.WeakSet()


def _first_lock(engine: Engine) -> threading.Lock:
    """The lock under which ``engine``'s first connection is made."""
    with _first_locks_guard:
        return _first_locks.setdefault(engine, threading.Lock())


class AsyncSqlPort:
    """The port over an SQLAlchemy `AsyncEngine` (aiosqlite, psycopg's async mode); on
    PostgreSQL each statement runs on its own in autocommit, as in `BlockingSqlPort`.

    On the SQLite engine `async_engine` makes (`agentctx_fast.stores._aiosqlite`) each call
    is one trip to the thread of a pooled aiosqlite connection, where the blocking port's code
    runs it on that connection's own sqlite3 connection (single statements in autocommit,
    transactions begun with ``BEGIN IMMEDIATE`` and ended within the trip), and `together`
    runs several calls in that one trip. A caller of the port cancelled meanwhile leaves the
    trip to end (a transaction never stays open, the connection is never dropped, which for an
    in-memory database is the database), and its remaining calls and any transaction not yet
    begun are skipped: it is cancelled when the trip is over and its connection is back in the
    pool or kept for the next unit (`_keep`; a return that waits for another task's calls on
    the one connection of an in-memory database is waited for too). The runner's turn is such
    a caller only when its own task is cancelled: a cancelled caller of the runner cancels no
    store call, so the trip runs whole.

    There the statements run through `_aiosqlite.thread_engines`, whose events and logging
    are those of ``engine.sync_engine`` (dispatched only while a listener other than the
    store's own is there: `_aiosqlite.follow_listeners`, at the start of each trip); a trip
    runs in a copy of its caller's context."""

    def __init__(self, engine: AsyncEngine, *, keep: bool = False) -> None:
        self.engine = engine
        self.dialect = check_dialect(engine.dialect.name)
        # One shared connection (an in-memory SQLite engine of the caller's): one operation at
        # a time, or the tasks' transactions would interleave on it (on the engine
        # `async_engine` makes, each call is whole on the connection's thread instead).
        self._shared = isinstance(engine.sync_engine.pool, StaticPool)
        self._serial: AbstractAsyncContextManager[Any] = (
            asyncio.Lock() if self._shared else nullcontext()
        )
        single: AsyncEngine | None = None
        self._writer = engine  # where `run` and `many` begin their transactions
        self._on_thread: BlockingSqlPort | None = None  # the port a trip runs
        self._trip = threading.local()  # on a connection's thread during a trip: its `_Trip`
        # Connections out of the pool between units, taken by the next (see `_keep`): at most
        # as many as the pool keeps open, and only on an engine the store made (``keep``: a
        # caller's engine is the caller's to share, and a store on it needs no closing), and
        # none on the one connection of an in-memory database.
        self._kept: list[_Kept] = []
        self._thread_engines: tuple[Engine, ...] = ()
        self._keep_at_most = 0
        if self.dialect == "postgresql":
            single = engine.execution_options(isolation_level="AUTOCOMMIT")
        elif _one_trip(engine):
            from agentctx_fast.stores._aiosqlite import follow_listeners, thread_engines

            self._follow_listeners = follow_listeners
            blocking, on_its_own, writing = thread_engines(engine.sync_engine)
            self._thread_engines = (blocking, on_its_own, writing)
            self._on_thread = BlockingSqlPort(
                blocking, single=on_its_own, writer=writing, checkpoint=self._checkpoint
            )
            if keep and not self._shared:  # a file database: its pool's connections, one a unit
                pool: Any = engine.sync_engine.pool
                self._keep_at_most = int(pool.size())
        # Elsewhere a single statement is the blocking port's code run in one greenlet of
        # SQLAlchemy's asyncio layer (`greenlet_spawn`, what `AsyncConnection` runs each call
        # in): the checkout, the statement and the return to the pool in one, where
        # `AsyncConnection` spends one greenlet on each and a task on the return.
        self._single: Engine | None = None if single is None else single.sync_engine
        # On PostgreSQL a unit (`together`) holds one connection of ``_single`` in one
        # greenlet, where the blocking port's code runs each call on it (`_Held`).
        self._held: _Held | None = None
        self._connected = False  # its engine's first connection is made (`_first_connection`)
        self._first = _first_lock(engine.sync_engine)  # held by worker threads, never by a loop
        self._in_unit: BlockingSqlPort | None = None
        if self._single is not None and not self._shared:  # not one connection all tasks share
            # A batch in a unit begins at the isolation level the caller's engine asks for.
            isolation = engine.sync_engine.get_execution_options().get("isolation_level")
            self._held = _Held(isolation)
            self._in_unit = BlockingSqlPort(
                engine.sync_engine, single=self._held, writer=self._held
            )

    async def rows(
        self,
        action: str,
        statement: Any,
        *,
        write: bool = False,
        params: Mapping[str, Any] | None = None,
    ) -> Sequence[Any]:
        inner = self._on_thread
        if inner is not None:
            return await self.together(
                action, lambda: inner.rows(action, statement, write=write, params=params)
            )
        unit = self._unit()
        if unit is not None:
            return await unit.rows(action, statement, write=write, params=params)
        return await self._whole(self._rows(action, statement, write, params))

    async def changed(self, action: str, statement: Any) -> int:
        inner = self._on_thread
        if inner is not None:
            return await self.together(action, lambda: inner.changed(action, statement))
        unit = self._unit()
        if unit is not None:
            return await unit.changed(action, statement)
        return await self._whole(self._changed(action, statement))

    async def run(self, action: str, work: Callable[[Connection], Any]) -> None:
        inner = self._on_thread
        if inner is not None:
            return await self.together(action, lambda: inner.run(action, work))
        unit = self._unit()
        if unit is not None:
            return await unit.run(action, work)
        await self._whole(self._run(action, work))

    async def many(
        self, action: str, statement: Any, params: Sequence[Mapping[str, Any]]
    ) -> Sequence[Any]:
        inner = self._on_thread
        if inner is not None:
            return await self.together(action, lambda: inner.many(action, statement, params))
        unit = self._unit()
        if unit is not None:
            return await unit.many(action, statement, params)
        return await self._whole(self._many(action, statement, params))

    async def together(self, action: str, work: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """``work()``, whose awaits are this port's calls: on the async SQLite engine, all of
        them in one trip to a connection's thread; on PostgreSQL, all of them on one
        connection, checked out (and pinged) once, in one greenlet; elsewhere, each as it
        comes."""
        if not self._connected:
            await self._first_connection(action)
        if self._held is not None:
            if self._held.current() is not None:
                return await work()  # already in a unit: run as it comes
            return await _greenlet_spawn(self._hold, action, work)
        if self._on_thread is None or getattr(self._trip, "current", None) is not None:
            return await work()  # not SQLite, or already on the trip: run as it comes
        pool = self.engine.sync_engine.pool
        kept = self._kept.pop() if self._kept else None
        if kept is not None and not kept.usable(pool):
            await kept.discard()
            kept = None
        if kept is None:
            with translated(action):
                connection = await _greenlet_spawn(self.engine.sync_engine.connect)
        else:
            connection = kept.connection
        driver: Any = connection.connection.driver_connection  # a OneTripConnection
        try:
            trip = _Trip()
            # in a copy of the caller's context, as a call on the loop would see it (tracing)
            done = driver.send(contextvars.copy_context().run, self._travel, trip, work)
            try:
                result: T = await done
            except asyncio.CancelledError:
                trip.cancelled = True  # its next call, or a transaction's start, stops
                if done.cancelled():
                    # The trip goes on; the connection goes back once it is over: the thread
                    # runs its calls in order, so the end of a call queued now is the trip's.
                    await wait_uncut(driver.send(_nothing))
                else:
                    # Not cut off (the caller was cancelled before it first waited, or after
                    # the trip ended): the connection goes back once the trip is over.
                    await wait_uncut(done)
                    done.exception()  # the caller left: the trip's own failure is not reported
                raise
            return result
        finally:
            if not self._keep(connection, pool, driver):
                await _returned(connection)

    async def _first_connection(self, action: str) -> None:
        """The engine's first connection, made once, in a worker thread running an event loop
        of its own. SQLAlchemy sets a new engine's dialect up on its first connection under
        an `asyncio.Lock`; two event loops making their first connections at once (two
        threads each running ``asyncio.run``, say) hang on it, each waiting for a lock bound
        to the other's loop. Here loops only wait for the thread (a thread at a time makes
        it, under a `threading.Lock` no loop holds), and later connections find the dialect
        set up. The connection is then dropped (it was made on a loop that is gone), unless
        it is the in-memory database itself."""
        with translated(action):
            await asyncio.to_thread(self._connect_first)

    def _connect_first(self) -> None:
        with self._first:
            if self.engine.sync_engine not in _connected_engines:
                asyncio.run(self._connect_once())
                _connected_engines.add(self.engine.sync_engine)
        self._connected = True

    async def _connect_once(self) -> None:
        connection = await self.engine.connect()
        try:
            if not self._shared:
                await connection.invalidate()
        finally:
            await connection.close()

    def _keep(self, connection: Connection, pool: Pool, driver: Any) -> bool:
        """Whether ``connection``, whose trip is over, is kept for the next unit instead of
        going back to ``pool``, its pool: when this port keeps connections (a file
        database's pool), has room, ``pool`` is still the engine's (not disposed since) and
        it has nothing left to reset (no transaction open, no call queued: what the pool's
        rollback on return would do is done). Keeping it skips a checkout and a return (two
        runs of SQLAlchemy's pool code in greenlets) on each unit.

        Only while the pool has no more out than the kept ones could be (its size): a pool
        under pressure gets its connections back, so no caller of the engine ever waits for
        one that sits idle here."""
        if (
            len(self._kept) >= self._keep_at_most
            or connection.closed
            or connection.invalidated
            or pool is not self.engine.sync_engine.pool
            or pool.checkedout() > self._keep_at_most  # type: ignore[attr-defined]
            or not driver._running
            or driver._connection is None
            or not driver._settled()
        ):
            return False
        self._kept.append(_Kept(connection, pool))
        return True

    async def aclose(self) -> None:
        """The connections this port keeps (`together`) back to their pool (closed, if the
        pool was disposed since)."""
        pool = self.engine.sync_engine.pool
        while self._kept:
            kept = self._kept.pop()
            if kept.usable(pool):
                await _returned(kept.connection)
            else:
                await kept.discard()

    def _hold(self, action: str, work: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """In a greenlet of SQLAlchemy's asyncio layer: ``work`` driven by the blocking driver,
        its port calls run by `BlockingSqlPort` on one autocommit connection checked out
        here, each its own statement (or, for `run` and `many`, a transaction on it: a unit
        never waits for a second connection while it holds one). The connection goes back to
        the pool when ``work`` ends, however it ends: a caller cancelled meanwhile is cancelled
        inside the greenlet, at the I/O it waits on, which SQLAlchemy treats as it does for a
        single call (the connection is dropped rather than returned in use), and its
        remaining calls never start; cancelled while autocommit is set on it, the connection
        is dropped here. (A cancellation inside the pool's checkout and ping is SQLAlchemy's
        to clean up, as for a single call.) A store on one connection every task shares
        (``StaticPool``) holds none: its calls take turns on it (`_serial`)."""
        held = self._held
        assert held is not None and self._in_unit is not None
        with translated(action):
            connection = self.engine.sync_engine.connect()
            try:  # the connection is nobody's until it is lent: a cancellation here drops it
                connection.execution_options(isolation_level="AUTOCOMMIT")
            except BaseException:
                connection.invalidate()
                connection.close()
                raise
        with held.lent(connection):
            return run_sync(work())

    def _unit(self) -> BlockingSqlPort | None:
        """In a unit of this port (PostgreSQL): the port that runs its calls."""
        held = self._held
        if held is None or held.current() is None:
            return None
        return self._in_unit

    def _travel(self, trip: _Trip, work: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """On the connection's thread: ``work`` driven by the blocking driver, its port calls
        run by `BlockingSqlPort` on this thread's connection."""
        self._follow_listeners(self.engine.sync_engine, self._thread_engines)
        self._trip.current = trip
        try:
            return run_sync(work())
        finally:
            self._trip.current = None

    def _checkpoint(self) -> None:
        """On a trip: stop if its caller was cancelled."""
        trip: _Trip | None = getattr(self._trip, "current", None)
        if trip is not None and trip.cancelled:
            raise asyncio.CancelledError

    async def _whole(self, operation: Coroutine[Any, Any, T]) -> T:
        """``operation``; on the shared connection of an in-memory database, never cut in the
        middle: a cancelled statement makes SQLAlchemy drop its connection, which there is the
        database itself. A cancelled caller waits for the statement, then is cancelled."""
        if not self._connected:
            try:
                await self._first_connection("connecting")
            except BaseException:
                operation.close()
                raise
        if not self._shared:
            return await operation
        task = asyncio.ensure_future(operation)
        if await wait_uncut(task):
            if not task.cancelled():
                task.exception()  # the caller left: the operation's own failure is not reported
            raise asyncio.CancelledError
        return task.result()

    async def _rows(
        self, action: str, statement: Any, write: bool, params: Mapping[str, Any] | None
    ) -> Sequence[Any]:
        with translated(action):
            async with self._serial:
                if self._single is not None:
                    return await _greenlet_spawn(_fetched, self._single.connect, statement, params)
                async with self._open(write) as connection:
                    return (await connection.execute(statement, params)).all()

    async def _changed(self, action: str, statement: Any) -> int:
        with translated(action):
            async with self._serial:
                if self._single is not None:
                    return await _greenlet_spawn(_counted, self._single.connect, statement)
                async with self._open(True) as connection:
                    return int((await connection.execute(statement)).rowcount)

    def _open(self, write: bool) -> AbstractAsyncContextManager[AsyncConnection]:
        return self.engine.begin() if write else self.engine.connect()

    async def _run(self, action: str, work: Callable[[Connection], Any]) -> None:
        with translated(action):
            async with self._serial, self._writer.begin() as connection:
                await connection.run_sync(work)

    async def _many(
        self, action: str, statement: Any, params: Sequence[Mapping[str, Any]]
    ) -> Sequence[Any]:
        with translated(action):
            async with self._serial, self._writer.begin() as connection:
                return (await connection.execute(statement, params)).all()


async def _returned(connection: Connection) -> None:
    """``connection`` (of a `OneTripConnection`) back to its pool, never cut off: a close
    cancelled while its rollback is on a trip makes SQLAlchemy drop the connection, which for
    an in-memory database is the database. A caller cancelled meanwhile (alone, or with every
    task, as `asyncio.run` does on its way out) waits for the close, then is cancelled."""
    from agentctx_fast.stores._aiosqlite import returning

    with returning() as cut:
        await _greenlet_spawn(connection.close)
    if cut:
        raise asyncio.CancelledError


def _nothing() -> None:
    """A call whose end on a connection's thread says every call queued before it ended."""


class _Kept:
    """A connection `AsyncSqlPort` keeps between units, with the pool and the process it came
    from."""

    __slots__ = ("connection", "pid", "pool")

    def __init__(self, connection: Connection, pool: Pool) -> None:
        self.connection = connection
        self.pool = pool
        self.pid = os.getpid()

    def usable(self, pool: Pool) -> bool:
        """Whether the next unit can take it: ``pool`` (the engine's now) is still the one it
        came from, and this is still the process that kept it."""
        return self.pool is pool and self.pid == os.getpid()

    async def discard(self) -> None:
        """Closed, when its pool was disposed since (returned to that pool, it would stay
        open with its thread for good); forgotten in a forked child, which has no thread to
        serve it (as SQLAlchemy's pool forgets the parent's after ``dispose(close=False)``)."""
        if self.pid != os.getpid():
            return
        await _greenlet_spawn(self.connection.invalidate)
        await _returned(self.connection)


class _Held:
    """The connections the units of an `AsyncSqlPort` on PostgreSQL hold, by the greenlet each
    unit runs in; as `Connects` and `Begins`, the current greenlet's (a call's ``with``
    neither opens nor closes it; a call that fails rolls it back, so the next one starts
    clean, reconnecting if the failure dropped the connection)."""

    __slots__ = ("_by_greenlet", "_greenlet", "_isolation")

    def __init__(self, isolation: str | None) -> None:
        from greenlet import getcurrent  # type: ignore[import-untyped]  # SQLAlchemy's asyncio

        self._greenlet: Callable[[], Any] = getcurrent
        self._by_greenlet: dict[Any, Connection] = {}
        self._isolation = isolation  # a batch's, when the caller's engine sets one

    def current(self) -> Connection | None:
        return self._by_greenlet.get(self._greenlet()) if self._by_greenlet else None

    @contextmanager
    def lent(self, connection: Connection) -> Iterator[None]:
        """``connection`` held by the current greenlet, then closed (back to its pool)."""
        me = self._greenlet()
        self._by_greenlet[me] = connection
        try:
            yield
        finally:
            del self._by_greenlet[me]
            connection.close()

    @contextmanager
    def begin(self) -> Iterator[Connection]:
        """A transaction on the held connection, at the isolation level of the caller's engine
        (the database's default unless it sets one); autocommit again after it."""
        with self.connect() as connection:
            connection.commit()  # SQLAlchemy's own record of autocommit statements only
            isolation = self._isolation or connection.default_isolation_level
            connection.execution_options(isolation_level=isolation)
            try:
                with connection.begin():
                    yield connection
            finally:
                # A dropped connection is left to the next call (`connect`) to reconnect:
                # reconnecting here would check out another while a cancellation unwinds.
                if not connection.invalidated:
                    connection.execution_options(isolation_level="AUTOCOMMIT")

    @contextmanager
    def connect(self) -> Iterator[Connection]:
        connection = self.current()
        assert connection is not None, "a unit's call outside its greenlet"
        if connection.invalidated:  # dropped by an earlier call: it reconnects, and SQLAlchemy
            # sets an engine's isolation level on a new `Connection` only, not on a reconnect
            connection.execution_options(isolation_level="AUTOCOMMIT")
        try:
            yield connection
        except BaseException:
            try:
                connection.rollback()
            except Exception:
                pass  # the call's own failure is reported; the next call meets the connection's
            raise


class _Trip:
    """One trip of `AsyncSqlPort.together`; ``cancelled`` once its caller was."""

    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False


def database_url(url: str, asyncio_mode: bool = False) -> sa.engine.URL:
    """``url`` parsed, with ``postgres://`` read as ``postgresql://`` (the spelling libpq and
    many hosting services give) and PostgreSQL on psycopg, the driver the ``postgresql`` extra
    installs, unless the URL names another."""
    parsed = sa.engine.make_url(url)
    backend, _, driver = parsed.drivername.partition("+")
    if backend == "postgres":
        parsed = parsed.set(drivername="postgresql" + ("+" + driver if driver else ""))
    # psycopg2 has no asyncio mode: the async store runs that URL on psycopg too.
    if parsed.drivername == "postgresql" or (
        asyncio_mode and parsed.drivername == "postgresql+psycopg2"
    ):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def _connectable_url(url: str, asyncio_mode: bool) -> sa.engine.URL:
    """`database_url`, its driver checked: a missing psycopg names the ``postgresql`` extra."""
    parsed = database_url(url, asyncio_mode)
    if parsed.drivername == "postgresql+psycopg":
        require("psycopg", "postgresql")
    return parsed


def blocking_engine(url: str) -> Engine:
    """The engine a blocking store creates for ``url``."""
    parsed = _connectable_url(url, asyncio_mode=False)
    if parsed.get_backend_name() != "sqlite":
        return sa.create_engine(parsed, **POOL_OPTIONS)
    if parsed.database in (None, "", ":memory:"):
        # One shared connection, or every connection would see its own empty database.
        return sa.create_engine(
            parsed, poolclass=StaticPool, connect_args={"check_same_thread": False}
        )
    engine = sa.create_engine(parsed, connect_args=_busy_timeout(parsed))
    sa.event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def async_engine(url: str) -> AsyncEngine:
    """The engine an async store creates for ``url``: ``sqlite://…`` runs on aiosqlite and
    ``postgresql://…`` on psycopg's async mode."""
    require("sqlalchemy.ext.asyncio", "sql")
    from sqlalchemy.ext.asyncio import create_async_engine

    parsed = _connectable_url(url, asyncio_mode=True)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        require("aiosqlite", "sql")
        parsed = parsed.set(drivername="sqlite+aiosqlite")
        from agentctx_fast.stores import _aiosqlite

        connect_args: dict[str, Any] = {}

        async def connect() -> Any:
            return await _aiosqlite.connect(*connect_args["args"], **connect_args["kwargs"])

        if parsed.database in (None, "", ":memory:"):
            engine = create_async_engine(parsed, poolclass=StaticPool, async_creator=connect)
        else:
            engine = create_async_engine(parsed, async_creator=connect)
            sa.event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        args, kwargs = engine.dialect.create_connect_args(parsed)
        if parsed.database not in (None, "", ":memory:"):
            kwargs.update(_busy_timeout(parsed))
        connect_args.update(args=args, kwargs=kwargs)
        sa.event.listen(engine.sync_engine, "begin", _aiosqlite.begin_immediate)
        return engine
    if backend == "postgresql":
        return create_async_engine(parsed, **POOL_OPTIONS)
    return create_async_engine(parsed)


async def _greenlet_spawn(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``, blocking SQLAlchemy code, in a greenlet of SQLAlchemy's asyncio layer."""
    from sqlalchemy.util import greenlet_spawn

    result: T = await greenlet_spawn(fn, *args)
    return result


def _one_trip(engine: AsyncEngine) -> bool:
    """Whether ``engine`` is an SQLite engine `async_engine` made (its connections commit each
    statement by themselves; its transactions begin explicitly)."""
    from agentctx_fast.stores._aiosqlite import begin_immediate

    return bool(sa.event.contains(engine.sync_engine, "begin", begin_immediate))


def _busy_timeout(parsed: sa.engine.URL) -> dict[str, float]:
    """The connect argument of a store's own SQLite connections: the busy timeout
    `SQLITE_BUSY_TIMEOUT`, unless the URL sets its own (``?timeout=SECONDS``, which SQLAlchemy
    passes to the driver)."""
    return {} if "timeout" in parsed.query else {"timeout": SQLITE_BUSY_TIMEOUT}


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    """WAL (readers and the writer do not block each other). The busy timeout is the driver's
    ``timeout`` connect argument (`_busy_timeout`), the one setting of it."""
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()
