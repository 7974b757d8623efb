"""`SqlAgentStore` and `AsyncSqlAgentStore` on SQLAlchemy 2.x: SQLite embedded, PostgreSQL
(psycopg) for many instances.

Every write is one statement whose WHERE clause or unique constraint decides it on the server:
appends are ``INSERT … ON CONFLICT DO NOTHING``, compare-and-set is ``UPDATE … WHERE version =
:expected``. Reads are indexed pages: ``(conversation_id, seq)`` and a partial index over the
model-visible messages, so a page costs the same at 1,000 and 100,000 messages.

The rules are written once, as coroutines over an I/O port (`agentctx_fast.stores._sql_io`):
`AsyncSqlAgentStore` awaits SQLAlchemy's asyncio engine, and `SqlAgentStore` drives the same
code over a blocking engine. Both write the same rows, so one reads what the other wrote.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

from agentctx_fast._blocking import driven
from agentctx_fast._ids import check_conversation_id
from agentctx_fast.errors import InvalidArgumentError, MissingDependencyError
from agentctx_fast.stores import _sql_lifecycle
from agentctx_fast.stores._common import check_table_prefix
from agentctx_fast.stores._front import AsyncStoreFront, StoreFront
from agentctx_fast.stores._loader import (
    DEFAULT_MESSAGE_CACHE_BYTES,
    DEFAULT_MESSAGE_CACHE_SIZE,
    MessageCacheInfo,
    MessageLoader,
)
from agentctx_fast.stores._sql_async_io import AsyncSqlPort, ThreadedSqlPort
from agentctx_fast.stores._sql_io import (
    BlockingSqlPort,
    SqlPort,
    async_engine,
    blocking_engine,
    check_dialect,
    database_url,
    sa,
    sa_exc,
)
from agentctx_fast.stores._sql_memory import (
    AsyncSqlChatMemory,
    AsyncSqlCompressionStateStore,
    SqlChatMemory,
    SqlCompressionStateStore,
)
from agentctx_fast.stores._sql_schema import AsyncSqlSchema, SqlSchema, _Tables
from agentctx_fast.stores.lifecycle import Purged, check_delete, check_listing, check_purge
from agentctx_fast.stores.serializer import AgentStoreSerializer, JsonAgentStoreSerializer
from agentctx_fast.stores.sql_turns import AsyncSqlAgentTurnStore, SqlAgentTurnStore

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine
    from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = [
    "AsyncSqlAgentStore",
    "AsyncSqlChatMemory",
    "AsyncSqlCompressionStateStore",
    "AsyncSqlSchema",
    "SqlAgentStore",
    "SqlChatMemory",
    "SqlCompressionStateStore",
    "SqlSchema",
    "schema_ddl",
]


class _SqlStoreBase:
    """What both SQL stores share: tables, serializer, the decoded-record cache, the port."""

    def __init__(
        self,
        port: SqlPort,
        owns_engine: bool,
        table_prefix: str,
        serializer: AgentStoreSerializer | None,
        message_cache_size: int,
        message_cache_bytes: int,
    ) -> None:
        self._port = port
        self._owns_engine = owns_engine
        self.table_prefix = table_prefix
        self.serializer: AgentStoreSerializer = serializer or JsonAgentStoreSerializer()
        self._load_message = MessageLoader(self, message_cache_size, message_cache_bytes)
        self._dialect = port.dialect
        self._tables = _Tables(table_prefix, self._dialect)
        self._pages = _PageStatements(self._tables.messages)
        self._append_statement: Any = None
        self._locked_appends: dict[tuple[bool, bool], Any] = {}  # PostgreSQL's

    def message_cache_info(self) -> MessageCacheInfo:
        """Hits, misses and entries of the decoded-record cache (its hit rate is a metric a
        service should watch: a low one means the cache is too small for its conversations)."""
        return self._load_message.info()

    def _append(self) -> Any:
        """The append statement, built once: ``INSERT … ON CONFLICT DO NOTHING RETURNING
        message_id`` without values (a row, or the rows of a batch, are its parameters).
        SQLite's unfenced append (PostgreSQL's: `_sql_memory.locked_append`)."""
        if self._append_statement is None:
            table = self._tables.messages
            self._append_statement = (
                self._insert_if_absent(table, None, ["conversation_id", "message_id"])
            ).returning(table.c.message_id)
        return self._append_statement

    async def _delete_conversation(self, conversation_id: str, force: bool) -> bool:
        conversation_id, force = check_delete(conversation_id, force)
        return await _sql_lifecycle.delete_conversation(self, conversation_id, force, time.time())

    async def _list_conversations(
        self, prefix: str | None, limit: int, after: str | None
    ) -> list[str]:
        return await _sql_lifecycle.list_conversations(self, *check_listing(prefix, limit, after))

    async def _purge(
        self, older_than: float | datetime, keep_turn_records: int | None, batch_size: int
    ) -> Purged:
        cutoff = check_purge(older_than, keep_turn_records, batch_size)
        return await _sql_lifecycle.purge(self, cutoff, keep_turn_records, batch_size, time.time())

    def _insert_if_absent(
        self, table: sa.Table, values: dict[str, Any] | list[dict[str, Any]] | None, keys: list[str]
    ) -> Any:
        """``INSERT … ON CONFLICT (keys) DO NOTHING``: the unique key decides on the server."""
        insert: Any
        if self._dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert
        else:
            from sqlalchemy.dialects.sqlite import insert
        statement = insert(table) if values is None else insert(table).values(values)
        return statement.on_conflict_do_nothing(index_elements=keys)


class _PageStatements:
    """The page queries of a messages table, built once with bind parameters: a read binds
    its conversation, count and offset instead of building and hashing a new statement."""

    def __init__(self, table: sa.Table) -> None:
        self._table = table
        self._built: dict[object, Any] = {}

    def get(self, visible_only: bool, limited: bool, offset: bool) -> Any:
        key = (visible_only, limited, offset)
        statement = self._built.get(key)
        if statement is None:
            table = self._table
            statement = sa.select(table.c.data).where(
                table.c.conversation_id == sa.bindparam("conversation_id")
            )
            if visible_only:
                statement = statement.where(table.c.model_visible)
            statement = statement.order_by(table.c.seq.desc())
            if limited:
                statement = statement.limit(sa.bindparam("count", type_=sa.Integer))
            if offset:
                statement = statement.offset(sa.bindparam("offset", type_=sa.Integer))
            self._built[key] = statement
        return statement

    def first(self) -> Any:
        """The oldest ``count`` messages of a conversation: the same index scan, oldest first."""
        statement = self._built.get("first")
        if statement is None:
            table = self._table
            statement = (
                sa.select(table.c.data)
                .where(table.c.conversation_id == sa.bindparam("conversation_id"))
                .order_by(table.c.seq)
                .limit(sa.bindparam("count", type_=sa.Integer))
            )
            self._built["first"] = statement
        return statement


def _engine_argument(
    engine_or_url: object, engine_type: type | tuple[type, ...], make: Any
) -> tuple[Any, bool]:
    """The engine a store uses and whether it owns it (it does when it made it from a URL)."""
    if isinstance(engine_or_url, str):
        try:
            return make(engine_or_url), True
        except MissingDependencyError:
            raise
        except (sa_exc.ArgumentError, ImportError) as error:
            raise InvalidArgumentError(f"cannot use database URL: {error}") from error
    if isinstance(engine_or_url, engine_type):
        return engine_or_url, False
    names = " or ".join(
        t.__name__ for t in (engine_type if isinstance(engine_type, tuple) else (engine_type,))
    )
    raise InvalidArgumentError(
        f"engine_or_url must be an SQLAlchemy {names} or a URL, got {type(engine_or_url).__name__}"
    )


class AsyncSqlAgentStore(_SqlStoreBase, AsyncStoreFront):
    """`SqlAgentStore` for asyncio programs: the same tables and rows, so a conversation
    written by one is read, continued and resumed by the other.

    ``url_or_async_engine`` is a URL, or an `AsyncEngine` or a blocking `Engine` the caller
    keeps. A store made from a URL owns its engine (`aclose` disposes it):
    ``postgresql://user@host/db`` runs on psycopg's async mode, and ``sqlite:///agent.db`` on
    the blocking store's engine (``store.engine`` is then a blocking `Engine`, which another
    async store may be given), each store operation run whole in one worker thread, which costs
    SQLite less than a trip to aiosqlite's thread for every DB-API call. A blocking engine
    given is used the same way.
    """

    def __init__(
        self,
        url_or_async_engine: AsyncEngine | Engine | str,
        table_prefix: str = "agent_",
        serializer: AgentStoreSerializer | None = None,
        *,
        message_cache_size: int = DEFAULT_MESSAGE_CACHE_SIZE,
        message_cache_bytes: int = DEFAULT_MESSAGE_CACHE_BYTES,
    ) -> None:
        check_table_prefix(table_prefix)
        from sqlalchemy.ext.asyncio import AsyncEngine

        engine, owns = _engine_argument(
            url_or_async_engine, (AsyncEngine, sa.engine.Engine), async_engine
        )
        self.engine: AsyncEngine | Engine = engine
        super().__init__(
            AsyncSqlPort(engine) if isinstance(engine, AsyncEngine) else ThreadedSqlPort(engine),
            owns,
            table_prefix,
            serializer,
            message_cache_size,
            message_cache_bytes,
        )

    @property
    def schema(self) -> AsyncSqlSchema:
        """The schema manager: ``await store.schema.initialize()`` before first use."""
        return AsyncSqlSchema(self)

    def chat_memory(self, conversation_id: str) -> AsyncSqlChatMemory:
        """The memory of ``conversation_id`` (a light handle; create as many as you like)."""
        return AsyncSqlChatMemory(self, check_conversation_id(conversation_id))

    def compression_state_store(self) -> AsyncSqlCompressionStateStore:
        """The compression states of every conversation in this store."""
        return AsyncSqlCompressionStateStore(self)

    def turn_store(self) -> AsyncSqlAgentTurnStore:
        """Turn snapshots and conversation leases (the runner's busy protection)."""
        return AsyncSqlAgentTurnStore(self)

    async def purge(
        self,
        older_than: float | datetime,
        *,
        keep_turn_records: int | None = None,
        batch_size: int = 500,
    ) -> Purged:
        """Delete the conversations with no message or turn record written since
        ``older_than`` (epoch seconds or an aware datetime), ``batch_size`` (at most 1,000) per
        transaction of one ``DELETE`` per table, skipping those a turn runs in under a live
        lease; then, with ``keep_turn_records=N``, delete the finished turn records beyond
        the newest N of every conversation. Rows written before the ``written_at`` column
        existed carry no date: a conversation with only such rows is kept."""
        return await self._purge(older_than, keep_turn_records, batch_size)

    async def aclose(self) -> None:
        """Dispose the engine if this store created it."""
        if not self._owns_engine:
            return
        if isinstance(self.engine, sa.engine.Engine):
            self.engine.dispose()
        else:
            await self.engine.dispose()


class SqlAgentStore(_SqlStoreBase, StoreFront):
    """Chat memories, compression states, turns and leases in SQL tables ``{table_prefix}…``.

    ``engine_or_url`` is an SQLAlchemy `Engine` (its lifecycle stays the caller's) or a URL
    such as ``sqlite:///agent.db`` or ``postgresql+psycopg://user@host/db`` (the store owns
    that engine and `close` disposes it). `delete_conversation` is one transaction that holds
    the conversation's lease row.

    >>> store = SqlAgentStore("sqlite://")
    >>> store.schema.initialize()
    >>> from agentctx_fast import UserMessage
    >>> store.chat_memory("c1").add_message_if_absent(UserMessage("hi", message_id="u1"))
    True
    >>> [m.text for m in store.chat_memory("c1").get_messages()]
    ['hi']
    """

    def __init__(
        self,
        engine_or_url: Engine | str,
        table_prefix: str = "agent_",
        serializer: AgentStoreSerializer | None = None,
        *,
        message_cache_size: int = DEFAULT_MESSAGE_CACHE_SIZE,
        message_cache_bytes: int = DEFAULT_MESSAGE_CACHE_BYTES,
    ) -> None:
        check_table_prefix(table_prefix)
        engine, owns = _engine_argument(engine_or_url, sa.engine.Engine, blocking_engine)
        self.engine: Engine = engine
        super().__init__(
            BlockingSqlPort(engine),
            owns,
            table_prefix,
            serializer,
            message_cache_size,
            message_cache_bytes,
        )

    @property
    def schema(self) -> SqlSchema:
        """The schema manager: ``store.schema.initialize()`` before first use."""
        return SqlSchema(self)

    def chat_memory(self, conversation_id: str) -> SqlChatMemory:
        """The memory of ``conversation_id`` (a light handle; create as many as you like)."""
        return SqlChatMemory(AsyncSqlChatMemory(self, check_conversation_id(conversation_id)))

    def compression_state_store(self) -> SqlCompressionStateStore:
        """The compression states of every conversation in this store."""
        return SqlCompressionStateStore(AsyncSqlCompressionStateStore(self))

    def turn_store(self) -> SqlAgentTurnStore:
        """Turn snapshots and conversation leases (the runner's busy protection)."""
        return SqlAgentTurnStore(AsyncSqlAgentTurnStore(self))

    purge = driven(AsyncSqlAgentStore.purge)

    def close(self) -> None:
        """Dispose the engine if this store created it."""
        if self._owns_engine:
            self.engine.dispose()


def schema_ddl(url: str, table_prefix: str = "agent_") -> str:
    """The SQL DDL of the store's tables and indexes for ``url``'s dialect, for users whose
    migrations are their own (nothing connects to the database).

    >>> ddl = schema_ddl("postgresql://user@host/db", table_prefix="shop_")
    >>> [line for line in ddl.splitlines() if line.startswith("CREATE TABLE")][2]
    'CREATE TABLE shop_messages ('
    >>> "CREATE INDEX shop_messages_visible ON shop_messages" in ddl
    True
    """
    check_table_prefix(table_prefix)
    try:
        dialect = database_url(url).get_dialect()()
    except (sa_exc.ArgumentError, ImportError) as error:
        raise InvalidArgumentError(f"cannot use database URL: {error}") from error
    name = check_dialect(dialect.name)
    tables = _Tables(table_prefix, name)
    statements: list[str] = []
    for table in tables.metadata.sorted_tables:
        statements.append(_statement(sa.schema.CreateTable(table).compile(dialect=dialect)))
        for index in sorted(table.indexes, key=lambda index: str(index.name)):
            statements.append(_statement(sa.schema.CreateIndex(index).compile(dialect=dialect)))
    return "\n\n".join(statements) + "\n"


def _statement(compiled: object) -> str:
    lines = [line.rstrip() for line in str(compiled).strip().splitlines()]
    return "\n".join(lines) + ";"
