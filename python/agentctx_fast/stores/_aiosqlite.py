"""The aiosqlite connection of an async store made from an ``sqlite://`` URL: one trip to the
connection's thread per statement.

aiosqlite runs each call of its connection in the connection's own thread and wakes the event
loop when it is done; SQLAlchemy's asyncio layer calls it for every DB-API step (cursor,
execute, fetch, close, commit, the pool's rollback on return), some five trips per statement,
and on a busy machine each trip costs a thread switch both ways. This connection keeps aiosqlite
(its thread and queue) but makes each statement one trip:

- a cursor's ``execute`` runs the statement, reads its description, fetches its rows and closes
  the SQLite cursor in one call on the thread; fetching and closing are then local;
- the connection is opened in SQLite's autocommit mode (``isolation_level=None``), so a single
  statement commits by itself, atomically, as on PostgreSQL's autocommit connections, and the
  ``commit`` and ``rollback`` that follow it have nothing to do: they skip the trip when no
  transaction is open and no call is still queued (a caller cancelled while its statement was
  queued leaves it queued; then the rollback goes to the thread and runs after it);
- a write transaction of the store's (a batch, a schema change) starts with ``BEGIN
  IMMEDIATE``, which the engine's ``begin`` listener issues on connections marked
  `WRITE_TRANSACTION` (any other transaction on the engine begins with a deferred ``BEGIN``,
  and a connection marked `ONE_STATEMENT` runs each statement on its own): ``IMMEDIATE`` takes
  the write lock at once, waiting up to the busy timeout, so a transaction that reads before it
  writes never fails on a snapshot another writer has moved on.

Errors are those of aiosqlite's own calls (the sqlite3 exceptions, raised to SQLAlchemy, which
wraps them as usual). The connection uses aiosqlite's ``_execute`` (what its own cursor uses to
reach the thread): aiosqlite has no public call that runs a statement and returns its
description, rows and row count together.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import aiosqlite

__all__ = ["ONE_STATEMENT", "WRITE_TRANSACTION", "OneTripConnection", "begin_immediate", "connect"]

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
        if not self._settled():
            await self._execute(_rollback_open, self._conn)


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

    def connector() -> sqlite3.Connection:
        opened: sqlite3.Connection = sqlite3.connect(*args, **kwargs)
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
