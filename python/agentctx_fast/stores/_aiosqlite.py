"""The aiosqlite connection of an async store made from an ``sqlite://`` URL: one trip to the
connection's thread per store call (and per statement of a caller's on ``store.engine``).

aiosqlite runs each call of its connection in the connection's own thread and wakes the event
loop when it is done; on a busy machine each trip costs a thread switch both ways (some
100-250 µs here), which is most of what an SQLite statement costs. So:

- the store's own calls do not go through SQLAlchemy's asyncio layer at all: the store's port
  (`agentctx_fast.stores._sql_io.AsyncSqlPort`) sends the whole call to the thread of a pooled
  connection, where the blocking port's code runs it on that connection's own sqlite3
  connection through `thread_engines` (blocking engines whose connection, on such a thread, is
  the thread's, and whose events and logging are the async engine's). Several calls can go
  as one trip (`AsyncSqlPort.together`);
- a caller's statement on ``store.engine`` (SQLAlchemy's asyncio layer calls the connection for
  every DB-API step: cursor, execute, fetch, close, commit, the pool's rollback on return) is
  one trip too: a cursor's ``execute`` runs the statement, reads its description, fetches its
  rows and closes the SQLite cursor in one call on the thread; fetching and closing are then
  local;
- the connection is opened in SQLite's autocommit mode (``isolation_level=None``), so a single
  statement commits by itself, atomically, as on PostgreSQL's autocommit connections, and the
  ``commit`` and ``rollback`` that follow it have nothing to do: they skip the trip when no
  transaction is open and no call is still queued (a caller cancelled while its statement was
  queued leaves it queued; then the rollback goes to the thread and runs after it);
- a write transaction of the store's (a batch, a schema change) starts with ``BEGIN
  IMMEDIATE``, which the engines' ``begin`` listener issues on connections marked
  `WRITE_TRANSACTION` (or, on a connection's thread while nothing else listens on the
  engine, the thread engines' dialect, without dispatching events: `follow_listeners`; any
  other transaction begins with a deferred ``BEGIN``, and a connection marked
  `ONE_STATEMENT` runs each statement on its own): ``IMMEDIATE`` takes the
  write lock at once, waiting up to the busy timeout, so a transaction that reads before it
  writes never fails on a snapshot another writer has moved on.

Errors of the store's calls are those of the blocking store (the same sqlite3 exceptions,
wrapped by the same blocking SQLAlchemy code); a caller's on ``store.engine`` are aiosqlite's.
The connection uses aiosqlite's ``_execute`` and its queue (``_tx``, what ``_execute`` puts a
call on): aiosqlite has no public call that runs a function on the connection's thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import sqlite3
import threading
from collections.abc import Iterator
from functools import partial
from queue import SimpleQueue
from typing import Any

import aiosqlite
import sqlalchemy as sa
from sqlalchemy.pool import SingletonThreadPool

from agentctx_fast._tasks import wait_uncut
from agentctx_fast.errors import StoreError

__all__ = [
    "ONE_STATEMENT",
    "TESTED_AIOSQLITE",
    "WRITE_TRANSACTION",
    "OneTripConnection",
    "begin_immediate",
    "connect",
    "follow_listeners",
    "returning",
    "thread_engines",
]

TESTED_AIOSQLITE = ">=0.22,<0.23"
"""The aiosqlite versions whose internals `OneTripConnection` is tested on (the ``sql`` extra's
pin); another whose internals differ fails with `StoreError` when a connection is made."""
ONE_STATEMENT = "agentctx_one_statement"
"""Execution option of the engine a port runs single statements on (no ``BEGIN``)."""
WRITE_TRANSACTION = "agentctx_write_transaction"
"""Execution option of the engine a port runs its write transactions on (``BEGIN IMMEDIATE``)."""


class OneTripCursor:
    """A cursor whose ``execute`` is one call on the connection's thread."""

    def __init__(self, connection: OneTripConnection) -> None:
        self._connection = connection
        self.description: Any = None
        self.rowcount = -1
        self.lastrowid: int | None = None
        self.arraysize = 1
        self._rows: list[Any] = []

    async def __aenter__(self) -> OneTripCursor:
        return self

    async def __aexit__(self, *_: object) -> None:
        self._rows = []

    async def execute(self, sql: str, parameters: Any = None) -> OneTripCursor:
        result = await self._connection._execute(
            self._connection._statement, sql, parameters if parameters is not None else (), False
        )
        self.description, self._rows, self.rowcount, self.lastrowid = result
        return self

    async def executemany(self, sql: str, parameters: Any) -> OneTripCursor:
        result = await self._connection._execute(self._connection._statement, sql, parameters, True)
        self.description, self._rows, self.rowcount, self.lastrowid = result
        return self

    async def fetchall(self) -> list[Any]:
        rows, self._rows = self._rows, []
        return rows

    async def fetchone(self) -> Any:
        return self._rows.pop(0) if self._rows else None

    async def fetchmany(self, size: int | None = None) -> list[Any]:
        count = self.arraysize if size is None else size
        rows, self._rows = self._rows[:count], self._rows[count:]
        return rows

    async def close(self) -> None:
        self._rows = []


class OneTripConnection(aiosqlite.Connection):
    """An aiosqlite connection whose statements cost one trip to its thread each."""

    def __init__(self, connector: Any, iter_chunk_size: int) -> None:
        super().__init__(connector, iter_chunk_size)
        _check_internals(self)
        # Calls sent to the thread and calls it finished: written by one side each, so the
        # loop can tell, without a trip, that nothing is queued.
        self._sent = 0
        self._done = 0

    async def _execute(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        def counted() -> Any:
            try:
                return fn(*args, **kwargs)
            finally:
                self._done += 1

        if self._running and self._connection is not None:
            self._sent += 1  # queued (otherwise aiosqlite raises: the connection is closed)
        return await super()._execute(counted)  # type: ignore[no-untyped-call]

    def send(self, fn: Any, *args: Any) -> asyncio.Future[Any]:
        """``fn(*args)`` queued for the connection's thread (one trip), as ``_execute`` does,
        without awaiting it: the future is done when the call is, and cancelling the future
        does not stop the call."""
        if not self._running or self._connection is None:
            raise ValueError("Connection closed")  # as aiosqlite's own calls
        function = partial(fn, *args)

        def counted() -> Any:
            try:
                return function()
            finally:
                self._done += 1

        future = asyncio.get_running_loop().create_future()
        self._sent += 1
        self._tx.put_nowait((future, counted))
        return future

    def _statement(self, sql: str, parameters: Any, many: bool) -> tuple[Any, list[Any], int, Any]:
        """On the connection's thread: run, describe, fetch and close in one call."""
        cursor = self._conn.cursor()
        try:
            if many:
                cursor.executemany(sql, parameters)
            else:
                cursor.execute(sql, parameters)
            description = cursor.description
            rows = cursor.fetchall() if description else []
            return description, rows, cursor.rowcount, cursor.lastrowid
        finally:
            cursor.close()

    def cursor(self) -> OneTripCursor:  # type: ignore[override]
        return OneTripCursor(self)

    def _settled(self) -> bool:
        """No transaction open and nothing queued: commit and rollback have nothing to do."""
        return self._sent == self._done and not self.in_transaction

    async def commit(self) -> None:
        if not self._settled():
            await self._execute(_commit_open, self._conn)

    async def rollback(self) -> None:
        if self._settled():
            return
        cut = RETURNING.get()
        if cut is None:
            await self._execute(_rollback_open, self._conn)
        elif await wait_uncut(self.send(_rollback_open, self._conn)):
            # Going back to its pool (`returning`): a rollback cut off makes SQLAlchemy drop
            # the connection, which for an in-memory database is the database. The rollback is
            # a plain future, which no cancellation of tasks reaches; the caller's cancellation
            # is raised once the connection is back.
            cut.append(True)


# Set while a connection goes back to its pool (`returning`): the cancellations its rollback
# waited through, raised once it is back.
RETURNING: contextvars.ContextVar[list[bool] | None] = contextvars.ContextVar(
    "agentctx_fast_returning", default=None
)


@contextlib.contextmanager
def returning() -> Iterator[list[bool]]:
    """While in it, a connection's rollback (the pool's reset on return) is never cut off;
    yields the list of cancellations it waited through."""
    cut: list[bool] = []
    token = RETURNING.set(cut)
    try:
        yield cut
    finally:
        RETURNING.reset(token)


def _check_internals(connection: aiosqlite.Connection) -> None:
    """A clear error, before the connection's thread starts, if this aiosqlite's internals are
    not those `OneTripConnection` uses (a call put on a queue of another shape would never be
    answered: the caller would hang)."""
    queue = getattr(connection, "_tx", None)
    missing = [
        name
        for name, present in (
            ("_tx (a SimpleQueue of (future, function) pairs)", isinstance(queue, SimpleQueue)),
            ("_running", isinstance(getattr(connection, "_running", None), bool)),
            ("_connection", hasattr(connection, "_connection")),
            ("_execute", inspect.iscoroutinefunction(getattr(connection, "_execute", None))),
        )
        if not present
    ]
    if missing:
        version = getattr(aiosqlite, "__version__", "?")
        raise StoreError(
            f"aiosqlite {version} is not supported by AsyncSqlAgentStore's SQLite connections "
            f"(tested: {TESTED_AIOSQLITE}): it lacks {', '.join(missing)}"
        )


def _commit_open(connection: sqlite3.Connection) -> None:
    if connection.in_transaction:
        connection.commit()


def _rollback_open(connection: sqlite3.Connection) -> None:
    if connection.in_transaction:
        connection.rollback()


def connect(*args: Any, **kwargs: Any) -> OneTripConnection:
    """What ``aiosqlite.connect`` returns, as a `OneTripConnection` in autocommit mode (awaited
    by SQLAlchemy, which starts its thread and opens the database there)."""
    kwargs["isolation_level"] = None

    def connector() -> sqlite3.Connection:  # on the connection's own thread
        opened: sqlite3.Connection = sqlite3.connect(*args, **kwargs)
        _THREAD.connection = opened
        return opened

    connection = OneTripConnection(connector, 64)
    # As SQLAlchemy does for the connections it makes: the thread never keeps a process alive.
    thread: Any = getattr(connection, "_thread", connection)
    thread.daemon = True
    return connection


def begin_immediate(connection: Any) -> None:
    """The engine's ``begin`` listener: the store's own write transactions (`WRITE_TRANSACTION`)
    start with ``BEGIN IMMEDIATE``, a caller's transactions on ``store.engine`` with a plain
    (deferred) ``BEGIN``, which takes no lock until it writes, and a connection that runs one
    statement at a time (`ONE_STATEMENT`, autocommit) with none."""
    options = connection.get_execution_options()
    if options.get(ONE_STATEMENT):
        return
    connection.exec_driver_sql("BEGIN IMMEDIATE" if options.get(WRITE_TRANSACTION) else "BEGIN")


_THREAD = threading.local()
"""On a `OneTripConnection`'s thread: its sqlite3 connection (``connection``)."""


class _Lent:
    """The sqlite3 connection of the thread it is used on, as `thread_engines`' DB-API
    connection: every call goes to it, but closing is its `OneTripConnection`'s."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection
        # what every statement calls, bound once (the rest goes through `__getattr__`)
        self.cursor = connection.cursor
        self.commit = connection.commit
        self.rollback = connection.rollback

    def __getattr__(self, name: str) -> Any:
        return getattr(self._connection, name)

    def close(self) -> None:
        pass


def _this_threads_connection() -> _Lent:
    connection = getattr(_THREAD, "connection", None)
    if connection is None:
        raise RuntimeError("thread_engines are used only on a OneTripConnection's thread")
    return _Lent(connection)


def thread_engines(
    parent: sa.engine.Engine,
) -> tuple[sa.engine.Engine, sa.engine.Engine, sa.engine.Engine]:
    """Blocking engines whose connection, on a `OneTripConnection`'s thread, is that
    connection's own sqlite3 connection (in autocommit: a single statement commits itself; a
    transaction begins by the ``begin`` listener of ``parent``, the async engine's sync engine,
    or, while nothing else listens there, by the engine's dialect, and commits or rolls back
    within the call): the engine, and its engines for single statements (`ONE_STATEMENT`) and
    write transactions (`WRITE_TRANSACTION`). The async store runs its statements through
    them, each call whole in one trip to the thread.

    They share ``parent``'s events (a listener on ``store.engine.sync_engine``, such as a
    tracer's, sees the store's statements, with the caller's context variables) and its
    logging (``echo``, set before or after), as SQLAlchemy's own option engines do; each
    trip calls `follow_listeners` first."""
    _check_dispatch(parent)
    engines = []
    for option, begin in (
        (None, "BEGIN"),
        (ONE_STATEMENT, None),
        (WRITE_TRANSACTION, "BEGIN IMMEDIATE"),
    ):
        engine = sa.create_engine(
            "sqlite://",
            creator=_this_threads_connection,
            poolclass=SingletonThreadPool,
            pool_size=64,  # threads whose connection is remembered (forgetting one closes nothing)
            hide_parameters=parent.hide_parameters,
        )
        if option is not None:
            engine.update_execution_options(**{option: True})
        # The transaction's start when the ``begin`` event is not dispatched (`follow_listeners`):
        # what `begin_immediate` would issue, unless it did.
        engine.dialect.do_begin = partial(_begin, begin)  # type: ignore[method-assign]
        engine._has_events = True  # until a trip's `follow_listeners` says otherwise
        engine.url = parent.url  # what a listener reads of the engine (a tracer: the database)
        # ``parent``'s events, those added later too: its own listener collections, shared
        # rather than joined (as an option engine joins its engine's), since nothing listens on
        # these engines themselves. Each join is one more level every event of every
        # statement goes through (a connection joins its engine's once more).
        engine.dispatch = parent.dispatch
        engine.logger = _LoggerOf(parent)  # type: ignore[assignment]
        engines.append(engine)
    return engines[0], engines[1], engines[2]


def _check_dispatch(parent: sa.engine.Engine) -> None:
    """A clear error, before the first trip, if this SQLAlchemy's internals are not those
    `thread_engines` and `follow_listeners` use (events would be missed, or a write
    transaction begin without ``IMMEDIATE``, with no error)."""
    dispatch: Any = parent.dispatch
    names = getattr(dispatch, "_event_names", None)
    missing = [
        name
        for name, present in (
            ("Engine.dispatch._event_names", isinstance(names, list) and "begin" in names),
            ("Engine._has_events", isinstance(getattr(parent, "_has_events", None), bool)),
            ("Dialect.do_begin", callable(getattr(parent.dialect, "do_begin", None))),
            ("Engine._should_log_info", callable(getattr(parent, "_should_log_info", None))),
        )
        if not present
    ]
    if missing:
        raise StoreError(
            f"SQLAlchemy {sa.__version__} is not supported by AsyncSqlAgentStore's SQLite "
            f"connections: it lacks {', '.join(missing)}"
        )


def follow_listeners(parent: sa.engine.Engine, engines: tuple[sa.engine.Engine, ...]) -> None:
    """Before a trip's statements on ``engines`` (of `thread_engines`): they dispatch events
    only while something other than `begin_immediate` listens on ``parent``. Nothing else
    listening (the common case), each statement skips SQLAlchemy's event dispatch (some
    tens of µs a statement: a dozen event points, each walking empty listener collections)
    and a transaction begins by the engine's dialect instead of the ``begin`` listener."""
    dispatch: Any = parent.dispatch
    # Logging statements (``echo``) is listening too: the log shows the ``BEGIN IMMEDIATE``
    # that `begin_immediate` issues, where the dialect's is the DB-API's own.
    listening = bool(parent._should_log_info())
    for name in () if listening else dispatch._event_names:
        listeners = getattr(dispatch, name)
        if name == "begin":
            if any(listener is not begin_immediate for listener in listeners):
                listening = True
                break
        elif listeners:
            listening = True
            break
    for engine in engines:
        engine._has_events = listening


def _begin(statement: str | None, dbapi_connection: Any) -> None:
    """A thread engine's dialect's ``do_begin``: ``statement`` (``BEGIN`` or ``BEGIN
    IMMEDIATE``; none for single statements) unless a transaction is open already (issued by
    `begin_immediate`, when events are dispatched)."""
    if statement is not None and not dbapi_connection.in_transaction:
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(statement)
        finally:
            cursor.close()


class _LoggerOf:
    """The logger of an engine, looked up at each use (``echo`` replaces it)."""

    __slots__ = ("_engine",)

    def __init__(self, engine: sa.engine.Engine) -> None:
        self._engine = engine

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine.logger, name)
