"""The async I/O ports of the SQL store: `ThreadedSqlPort` (a blocking engine, each operation
in a worker thread: SQLite) and `AsyncSqlPort` (SQLAlchemy's asyncio engine: PostgreSQL on
psycopg's async mode). Both run `BlockingSqlPort`'s code for each statement (see
`agentctx_fast.stores._sql_io`)."""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from agentctx_fast._blocking import run_sync
from agentctx_fast._tasks import in_thread, wait_uncut
from agentctx_fast.stores._sql_io import (
    BlockingSqlPort,
    SqlPort,
    check_dialect,
    counted,
    fetched,
    sa,
    shared_lock,
    translated,
)

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, Engine
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

T = TypeVar("T")
P = ParamSpec("P")


def routed(
    method: Callable[Concatenate[Any, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[Any, P], Coroutine[Any, Any, T]]:
    """The `SqlPort` call ``method`` of an async port, which sends all four calls one way
    (its ``_route``), written once per port."""
    name = method.__name__

    async def call(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> T:
        result: T = await self._route(name, *args, **kwargs)
        return result

    call.__name__ = name
    call.__doc__ = method.__doc__
    return call


class ThreadedSqlPort:
    """The async port over a blocking engine (the async store made from an ``sqlite://`` URL,
    whose engine is the blocking store's): each operation is the blocking port's code run
    whole in one worker thread (`agentctx_fast._tasks.in_thread`, `asyncio.to_thread`'s
    call), and `together` runs several operations in one. SQLite's statements cost a few
    microseconds each; one thread hop per operation costs less than aiosqlite's one per
    DB-API call (cursor, execute, fetch, close, commit).

    A caller cancelled meanwhile waits for its operation to end (a transaction never stays
    open, the one connection of an in-memory database is never dropped); the operations of a
    unit that have not started are skipped, and the caller is then cancelled. The runner's
    turn is such a caller only when its own task is cancelled: a cancelled caller of the
    runner cancels no store call."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._port = BlockingSqlPort(engine, checkpoint=self._checkpoint)
        self.dialect = self._port.dialect
        self._unit = threading.local()  # on a worker thread during a unit: its `_Unit`

    rows = routed(SqlPort.rows)
    changed = routed(SqlPort.changed)
    run = routed(SqlPort.run)
    many = routed(SqlPort.many)

    async def _route(self, name: str, action: str, *args: Any, **kwargs: Any) -> Any:
        """The blocking port's call ``name``, in a worker thread (`together`)."""
        call = getattr(self._port, name)
        return await self.together(action, lambda: call(action, *args, **kwargs))

    async def together(self, action: str, work: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """``work()``, whose awaits are this port's calls, in one worker thread."""
        if getattr(self._unit, "current", None) is not None:
            return await work()  # in a unit already, on its thread: run as it comes
        unit = _Unit()
        done = in_thread(self._in_unit, unit, work)
        while not done.done():
            try:
                await asyncio.wait((done,))
            except asyncio.CancelledError:
                unit.cancelled = True  # its next call, or a transaction's start, stops
        if unit.cancelled:
            if not done.cancelled():
                done.exception()  # the caller left: the unit's own failure is not reported
            raise asyncio.CancelledError
        result: T = done.result()
        return result

    def _in_unit(self, unit: _Unit, work: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """On the worker thread: ``work`` driven by the blocking driver."""
        self._unit.current = unit
        try:
            return run_sync(work())
        finally:
            self._unit.current = None

    def _checkpoint(self) -> None:
        """In a unit: stop if its caller was cancelled."""
        unit: _Unit | None = getattr(self._unit, "current", None)
        if unit is not None and unit.cancelled:
            raise asyncio.CancelledError


class _Unit:
    """One unit of `ThreadedSqlPort.together`; ``cancelled`` once its caller was."""

    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False


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
    """The port over an SQLAlchemy `AsyncEngine` (psycopg's async mode, or a caller's engine
    on aiosqlite); on PostgreSQL each statement runs on its own in autocommit, as in
    `BlockingSqlPort`."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.dialect = check_dialect(engine.dialect.name)
        # One shared connection (an in-memory SQLite engine of the caller's): one operation at
        # a time, or the tasks' transactions would interleave on it.
        self._shared = isinstance(engine.sync_engine.pool, sa.pool.StaticPool)
        self._serial: AbstractAsyncContextManager[Any] = (
            shared_lock(engine.sync_engine.pool, asyncio.Lock) if self._shared else nullcontext()
        )
        single: AsyncEngine | None = None
        self._writer = engine  # where `run` and `many` begin their transactions
        if self.dialect == "postgresql":
            single = engine.execution_options(isolation_level="AUTOCOMMIT")
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

    rows = routed(SqlPort.rows)
    changed = routed(SqlPort.changed)
    run = routed(SqlPort.run)
    many = routed(SqlPort.many)

    async def _route(self, name: str, action: str, *args: Any, **kwargs: Any) -> Any:
        """The call ``name``: in a unit, run by the unit's blocking port on its connection;
        otherwise its own statement (`_rows`, `_changed`, `_run`, `_many`), run whole."""
        unit = self._unit()
        if unit is not None:
            return await getattr(unit, name)(action, *args, **kwargs)
        return await self._whole(getattr(self, "_" + name)(action, *args, **kwargs))

    async def together(self, action: str, work: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """``work()``, whose awaits are this port's calls: on PostgreSQL, all of them on one
        connection, checked out (and pinged) once, in one greenlet; elsewhere, each as it
        comes."""
        if not self._connected:
            await self._first_connection(action)
        if self._held is None or self._held.current() is not None:
            return await work()  # not PostgreSQL, or already in a unit: run as it comes
        return await _greenlet_spawn(self._hold, action, work)

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

    async def _whole(self, operation: Coroutine[Any, Any, T]) -> T:
        """``operation``; on SQLite, never cut in the middle: a cancelled statement makes
        SQLAlchemy drop its connection, which on the shared connection of an in-memory database
        is the database itself, and on a file leaves the dropped connection's transaction
        holding the write lock (every later write failed as busy). A cancelled caller waits for
        the statement, then is cancelled."""
        if not self._connected:
            try:
                await self._first_connection("connecting")
            except BaseException:
                operation.close()
                raise
        if not self._shared and self.dialect != "sqlite":
            return await operation
        task = asyncio.ensure_future(operation)
        if await wait_uncut(task):
            if not task.cancelled():
                task.exception()  # the caller left: the operation's own failure is not reported
            raise asyncio.CancelledError
        return task.result()

    async def _rows(
        self,
        action: str,
        statement: Any,
        *,
        write: bool = False,
        params: Mapping[str, Any] | None = None,
    ) -> Sequence[Any]:
        with translated(action):
            async with self._serial:
                if self._single is not None:
                    return await _greenlet_spawn(fetched, self._single.connect, statement, params)
                async with self._open(write) as connection:
                    return (await connection.execute(statement, params)).all()

    async def _changed(self, action: str, statement: Any) -> int:
        with translated(action):
            async with self._serial:
                if self._single is not None:
                    return await _greenlet_spawn(counted, self._single.connect, statement)
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


async def _greenlet_spawn(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``, blocking SQLAlchemy code, in a greenlet of SQLAlchemy's asyncio layer."""
    from sqlalchemy.util import greenlet_spawn

    result: T = await greenlet_spawn(fn, *args)
    return result
