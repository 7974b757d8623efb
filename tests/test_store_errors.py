"""`StoreUnavailableError` means "retry later"; a permanent database error is a plain
`StoreError`, and a missing table a `SchemaNotInitializedError` (SPEC §20, §22), on real
servers, blocking and async. (A stopped server is still `StoreUnavailableError`: see
test_store_reliability.py and test_sql_pool.py.)"""

from __future__ import annotations

import asyncio
import inspect
import secrets
import sqlite3
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa

from agentctx_fast import (
    Agent,
    AgentCtxError,
    AgentRunner,
    AiMessage,
    AsyncAgentRunner,
    AsyncScriptedChatModel,
    SchemaNotInitializedError,
    ScriptedChatModel,
    StoreError,
    StoreUnavailableError,
    TurnStatus,
    UserMessage,
)
from agentctx_fast.stores.redis import AsyncRedisAgentStore, RedisAgentStore
from agentctx_fast.stores.sql import AsyncSqlAgentStore, SqlAgentStore
from agentctx_fast.stores.turn_store import AgentTurnSnapshot
from store_fixtures import store_url

MODES = ("blocking", "async")


def _prefix() -> str:
    return f"e{uuid.uuid4().hex[:10]}_"


def _each_call(store: Any, calls: Callable[[Any], list[Callable[[], Any]]], mode: str) -> list[Any]:
    """Runs every call ``calls(store)`` lists (awaiting it on the async store); returns the
    errors they raised (None for a call that returned), then closes the store."""

    async def run_async() -> list[Any]:
        try:
            return [await _outcome_async(call) for call in calls(store)]
        finally:
            await store.aclose()

    if mode == "async":
        return asyncio.run(run_async())
    try:
        return [_outcome(call) for call in calls(store)]
    finally:
        store.close()


def _outcome(call: Callable[[], Any]) -> Any:
    try:
        call()
    except AgentCtxError as error:
        return error
    return None


async def _outcome_async(call: Callable[[], Any]) -> Any:
    try:
        result = call()
        if inspect.isawaitable(result):
            await result
    except AgentCtxError as error:
        return error
    return None


def _sql_store(kind: str, mode: str, request: pytest.FixtureRequest, prefix: str) -> Any:
    url = store_url(kind, request)
    assert url is not None
    if mode == "async":
        return lambda: AsyncSqlAgentStore(url, table_prefix=prefix)
    return lambda: SqlAgentStore(url, table_prefix=prefix)


def _store_calls(store: Any) -> list[Callable[[], Any]]:
    """Every operation of a memory and of a turn store, and a runner's turn."""
    memory = store.chat_memory("c1")
    turns = store.turn_store()
    message = UserMessage("hi", message_id="u1")
    if isinstance(store, AsyncSqlAgentStore):
        agent = Agent("a", AsyncScriptedChatModel([AiMessage("ok")]))
        runner: Any = AsyncAgentRunner(store)
    else:
        agent = Agent("a", ScriptedChatModel([AiMessage("ok")]))
        runner = AgentRunner(store)
    return [
        lambda: memory.add_message_if_absent(message),
        lambda: memory.add_messages_if_absent([message]),
        lambda: memory.add_message(message),
        lambda: memory.get_messages(),
        lambda: memory.get_messages(2, offset=1),
        lambda: memory.get_model_messages(5),
        lambda: memory.get_message("u1"),
        lambda: memory.update_message(message, 1),
        lambda: memory.message_count(),
        lambda: memory.clear(),
        lambda: store.compression_state_store().load("c1"),
        lambda: turns.load_turn("c1", "t1"),
        lambda: turns.save_turn(AgentTurnSnapshot("c1", "t1", "a", TurnStatus.RUNNING), 0),
        lambda: turns.open_turn("c1"),
        lambda: turns.acquire_conversation("c1", "t1", "me", 30.0, 1.0),
        lambda: turns.renew_lease("c1", "t1", "me", 30.0, 1.0),
        lambda: turns.suspend_conversation("c1", "t1", "me"),
        lambda: turns.reacquire_conversation("c1", "t1", "me", 30.0, 1.0),
        lambda: turns.request_cancel("c1", "t1", 1.0),
        lambda: turns.release_conversation("c1", "t1", "me", 1.0),
        lambda: runner.run(agent, "c1", "hi"),
    ]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_missing_tables_raise_schema_not_initialized(
    kind: str, mode: str, request: pytest.FixtureRequest
) -> None:
    make = _sql_store(kind, mode, request, _prefix())  # never initialized

    async def made() -> Any:  # an async store is made on the loop that uses it
        return make()

    store = asyncio.run(made()) if mode == "async" else make()
    errors = _each_call(store, _store_calls, mode)
    assert len(errors) == 21
    for error in errors:
        assert isinstance(error, SchemaNotInitializedError), repr(error)
        assert not isinstance(error, StoreUnavailableError)
        assert "store.schema.initialize()" in str(error) and "agentctx schema" in str(error)


def _break_schema(kind: str, request: pytest.FixtureRequest, prefix: str) -> None:
    """What an operator may do to a store's tables that no retry undoes: on SQLite a column
    the store writes is dropped (a permanent "no such column", which sqlite3 reports as an
    OperationalError); on PostgreSQL an index on the records makes a large one too long for
    an index row (SQLSTATE 54000, which psycopg reports as an OperationalError)."""
    SqlAgentStore(str(store_url(kind, request)), table_prefix=prefix).schema.initialize()
    url = str(store_url(kind, request))
    engine = sa.create_engine(url)
    try:
        with engine.begin() as connection:
            if kind == "sqlite":
                connection.exec_driver_sql(f"ALTER TABLE {prefix}messages DROP COLUMN kind")
            else:
                connection.exec_driver_sql(f"CREATE INDEX ON {prefix}messages (data)")
    finally:
        engine.dispose()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_permanent_database_error_is_not_unavailable(
    kind: str, mode: str, request: pytest.FixtureRequest
) -> None:
    prefix = _prefix()
    _break_schema(kind, request, prefix)
    make = _sql_store(kind, mode, request, prefix)
    # PostgreSQL compresses a record before indexing it: random text does not shrink.
    large = secrets.token_hex(8_000)

    def calls(store: Any) -> list[Callable[[], Any]]:
        memory = store.chat_memory("c1")
        return [
            lambda: memory.add_message_if_absent(UserMessage(large, message_id="big")),
            lambda: memory.message_count(),  # the store goes on working
        ]

    async def made() -> Any:
        return make()

    store = asyncio.run(made()) if mode == "async" else make()
    refused, after = _each_call(store, calls, mode)
    assert isinstance(refused, StoreError), repr(refused)
    assert type(refused) is StoreError, repr(refused)  # neither unavailable nor schema
    assert "database error while adding message 'big'" in str(refused)
    assert after is None


@pytest.mark.parametrize("mode", MODES)
def test_wrong_redis_credentials_are_not_unavailable(
    mode: str, request: pytest.FixtureRequest
) -> None:
    """An AUTH refusal is a redis-py ConnectionError, but no retry fixes it."""
    url = str(request.getfixturevalue("redis_server").url).replace(
        "redis://", "redis://nobody:wrong@"
    )

    async def made() -> Any:
        return AsyncRedisAgentStore(url)

    store = asyncio.run(made()) if mode == "async" else RedisAgentStore(url)
    (error,) = _each_call(store, lambda s: [lambda: s.chat_memory("c1").get_messages()], mode)
    assert type(error) is StoreError, repr(error)
    assert "invalid username-password pair" in str(error)


def _dbapi_error(orig: Exception) -> sa.exc.DBAPIError:
    return sa.exc.DBAPIError.instance("SELECT 1", None, orig, type(orig))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("sqlstate", "retryable"),
    [
        ("08006", True),  # connection failure
        ("40001", True),  # serialization failure
        ("40P01", True),  # deadlock
        ("53300", True),  # too many connections
        ("57014", True),  # statement timeout
        ("57P01", True),  # terminated by the administrator (a restart)
        ("55P03", True),  # lock timeout
        ("25006", True),  # a write to a read-only server (failing over)
        ("53100", False),  # disk full
        ("57P04", False),  # the database was dropped
        ("23505", False),  # unique violation
        ("22001", False),  # value too long
        ("54000", False),  # program limit exceeded (an index row too long)
        ("42601", False),  # syntax error
    ],
)
def test_postgresql_errors_by_sqlstate(sqlstate: str, retryable: bool) -> None:
    """The SQLSTATEs hard to provoke on a test server, classified as the server sends them."""
    import psycopg

    from agentctx_fast.stores._sql_io import store_error

    orig = psycopg.errors.lookup(sqlstate)("from the server")
    error = store_error(_dbapi_error(orig), "testing")
    assert isinstance(error, StoreUnavailableError) is retryable
    assert type(store_error(_dbapi_error(psycopg.errors.UndefinedTable("t")), "testing")) is (
        SchemaNotInitializedError
    )


def test_sqlite_busy_and_locked_are_retryable_other_errors_are_not() -> None:
    from agentctx_fast.stores._sql_io import store_error

    def error_of(sql: str, connection: sqlite3.Connection) -> sqlite3.Error:
        try:
            connection.execute(sql)
        except sqlite3.Error as error:
            return error
        raise AssertionError(sql)

    memory = sqlite3.connect(":memory:")
    for sql in ("SELEC 1", "SELECT nothing FROM sqlite_master"):
        assert type(store_error(_dbapi_error(error_of(sql, memory)), "t")) is StoreError
    missing = store_error(_dbapi_error(error_of("SELECT * FROM absent", memory)), "t")
    assert type(missing) is SchemaNotInitializedError
    busy = sqlite3.OperationalError("database is locked")
    busy.sqlite_errorcode = 5  # type: ignore[attr-defined]  # as sqlite3 sets it
    assert isinstance(store_error(_dbapi_error(busy), "t"), StoreUnavailableError)


@pytest.mark.parametrize(
    ("name", "retryable"),
    [
        ("ConnectionError", True),
        ("TimeoutError", True),
        ("BusyLoadingError", True),
        ("ClusterDownError", True),
        ("MasterDownError", True),
        ("TryAgainError", True),
        ("ReadOnlyError", True),
        ("SlotNotCoveredError", True),
        ("RedisClusterUnreachableError", True),
        ("AuthenticationError", False),
        ("AuthorizationError", False),
        ("ResponseError", False),
        ("OutOfMemoryError", False),
        ("DataError", False),
    ],
)
def test_redis_errors_by_class(name: str, retryable: bool) -> None:
    from redis import exceptions

    from agentctx_fast.stores._redis_io import _typed

    error = _typed(getattr(exceptions, name)("from the server"), "testing")
    assert isinstance(error, StoreUnavailableError) is retryable
    moved = _typed(exceptions.MovedError("3999 127.0.0.1:6381"), "testing")
    assert isinstance(moved, StoreUnavailableError)  # a slot moving
