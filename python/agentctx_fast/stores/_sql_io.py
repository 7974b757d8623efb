"""The I/O ports of the SQL store: its one implementation awaits them, blocking or async.

A port runs one statement in its own connection (in a transaction when it writes, or on its
own in autocommit on PostgreSQL, which is as atomic) and
hands back what the statement returned, already fetched: the rows, or the number of rows
changed. Database errors become typed store errors; the transaction has rolled back by then.
``together`` runs several calls as one unit of I/O where the driver allows it (the async store
on SQLite: one worker-thread hop for the unit; the async store on
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

import sqlite3
import threading
import weakref
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from contextlib import (
    AbstractContextManager,
    contextmanager,
    nullcontext,
)
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from agentctx_fast._extras import missing_dependency, require
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
    from sqlalchemy.pool import StaticPool
except ImportError as _error:
    raise missing_dependency("sql", _error) from _error

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

T = TypeVar("T")

__all__ = [
    "MAX_OVERFLOW",
    "POOL_OPTIONS",
    "POOL_SIZE",
    "POOL_TIMEOUT",
    "BlockingSqlPort",
    "SqlPort",
    "async_engine",
    "blocking_engine",
    "check_dialect",
    "counted",
    "fetched",
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
            f"store.schema.initialize() or the DDL `agentctx schema` prints ({error})"
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
        driver allows (the async store on SQLite: one worker-thread hop for all of
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
    ``single`` and ``writer`` replace the connections single statements and write transactions
    run on, and ``checkpoint`` is called before each operation's first statement and again once a
    transaction has begun (`ThreadedSqlPort` runs this port in a worker thread)."""

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
        self._serial: AbstractContextManager[Any] = (
            shared_lock(engine.pool, threading.RLock) if shared else nullcontext()
        )
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
            return fetched(self._open(write), statement, params)

    async def changed(self, action: str, statement: Any) -> int:
        with translated(action), self._serial:
            self._checkpoint()
            return counted(self._open(True), statement)

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


# The lock of each pool of one shared connection (in-memory SQLite), whichever stores and
# engines use it: a store's transaction would otherwise take in another store's statements.
_shared_locks: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
_shared_locks_guard = threading.Lock()


def shared_lock(pool: Any, make: Callable[[], T]) -> T:
    """The one lock (made by ``make``) of every port on ``pool``, a pool of one connection."""
    with _shared_locks_guard:
        lock: T = _shared_locks.setdefault(pool, make())
        return lock


def _go_on() -> None:
    """The checkpoint of a port nobody stops."""


def fetched(
    open_connection: Callable[[], AbstractContextManager[Connection]],
    statement: Any,
    params: Mapping[str, Any] | None,
) -> Sequence[Any]:
    """The rows of ``statement`` on a connection of its own (blocking SQLAlchemy: the blocking
    port calls it, the async port runs it in a greenlet of SQLAlchemy's asyncio layer)."""
    with open_connection() as connection:
        return connection.execute(statement, params).all()


def counted(
    open_connection: Callable[[], AbstractContextManager[Connection]], statement: Any
) -> int:
    """How many rows ``statement`` changed, on a connection of its own (as `fetched`)."""
    with open_connection() as connection:
        return int(connection.execute(statement).rowcount)


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


def async_engine(url: str) -> AsyncEngine | Engine:
    """The engine an async store creates for ``url``: ``postgresql://…`` runs on psycopg's
    async mode, and ``sqlite://…`` on the blocking store's engine (`blocking_engine`), whose
    operations `ThreadedSqlPort` runs in a worker thread each."""
    parsed = _connectable_url(url, asyncio_mode=True)
    if parsed.get_backend_name() == "sqlite":
        return blocking_engine(url)
    require("sqlalchemy.ext.asyncio", "sql")
    from sqlalchemy.ext.asyncio import create_async_engine

    if parsed.get_backend_name() == "postgresql":
        return create_async_engine(parsed, **POOL_OPTIONS)
    return create_async_engine(parsed)


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
