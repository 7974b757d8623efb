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

import copy
import time
import zlib
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any

from agentctx_fast._ids import check_identifier
from agentctx_fast._sync import run_sync
from agentctx_fast.coordinator import AgentContextCompressionState, check_expected_version
from agentctx_fast.errors import (
    InvalidArgumentError,
    MessageNotFoundError,
    MissingDependencyError,
    VersionConflictError,
)
from agentctx_fast.memory import (
    AsyncChatMemory,
    AsyncChatMemoryProvider,
    BlockingChatMemory,
    ChatMemoryProvider,
    check_first,
    check_message,
    check_messages,
    check_page,
    check_version,
    first_of_each,
)
from agentctx_fast.messages import Message
from agentctx_fast.stores import _sql_lifecycle
from agentctx_fast.stores._bridge import BlockingCompressionStateStore
from agentctx_fast.stores._common import (
    check_conversation_id,
    check_table_prefix,
    unit_handle,
)
from agentctx_fast.stores._lifecycle import Purged, check_delete, check_listing, check_purge
from agentctx_fast.stores._loader import (
    DEFAULT_MESSAGE_CACHE_BYTES,
    DEFAULT_MESSAGE_CACHE_SIZE,
    MessageCacheInfo,
    MessageLoader,
)
from agentctx_fast.stores._records import UndecodableRecord
from agentctx_fast.stores._sql_io import (
    AsyncSqlPort,
    BlockingSqlPort,
    SqlPort,
    ThreadedSqlPort,
    async_engine,
    blocking_engine,
    check_dialect,
    database_url,
    sa,
    sa_exc,
)
from agentctx_fast.stores._sql_records import named_message
from agentctx_fast.stores.serializer import (
    AgentStoreSerializer,
    JsonAgentStoreSerializer,
    dump,
    load_state,
)
from agentctx_fast.stores.sql_turns import (
    AsyncSqlAgentTurnStore,
    SqlAgentTurnStore,
    check_fence,
    fence_holds,
    fenced_insert,
    turn_tables,
)
from agentctx_fast.stores.turns import Fence

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine
    from sqlalchemy.ext.asyncio import AsyncEngine
    from sqlalchemy.schema import SchemaItem


def _message_keys(prefix: str, dialect: str) -> list[SchemaItem]:
    """``seq`` (append order) and the page index.

    SQLite: ``seq`` is the rowid, and ``(conversation_id, seq)`` a second index. Elsewhere the
    primary key is ``(conversation_id, seq)`` itself: with a key on ``seq`` alone, PostgreSQL
    may page an old conversation by walking the whole table backwards from the newest row of
    any conversation, filtering, so a read would slow down as other conversations grow.
    """
    if dialect == "sqlite":
        return [
            sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
            sa.Column("conversation_id", sa.String, nullable=False),
            sa.Index(f"{prefix}messages_page", "conversation_id", "seq"),
        ]
    return [
        sa.Column("seq", sa.BigInteger, sa.Identity(), nullable=False),
        sa.Column("conversation_id", sa.String, nullable=False),
        sa.PrimaryKeyConstraint("conversation_id", "seq", name=f"{prefix}messages_page"),
    ]


class _Tables:
    def __init__(self, prefix: str, dialect: str) -> None:
        self.metadata = sa.MetaData()
        self.messages = sa.Table(
            f"{prefix}messages",
            self.metadata,
            *_message_keys(prefix, dialect),
            sa.Column("message_id", sa.String, nullable=False),
            sa.Column("kind", sa.String(64), nullable=False),
            sa.Column("model_visible", sa.Boolean, nullable=False),
            sa.Column("version", sa.BigInteger, nullable=False),
            sa.Column("data", sa.LargeBinary, nullable=False),
            sa.Column("written_at", sa.Float, nullable=True),  # see `_sql_lifecycle`
            sa.UniqueConstraint("conversation_id", "message_id", name=f"{prefix}messages_id"),
            sa.Index(
                f"{prefix}messages_visible",
                "conversation_id",
                "seq",
                postgresql_where=sa.text("model_visible"),
                sqlite_where=sa.text("model_visible"),
            ),
        )
        self.compression_states = sa.Table(
            f"{prefix}compression_states",
            self.metadata,
            sa.Column("conversation_id", sa.String, primary_key=True),
            sa.Column("version", sa.BigInteger, nullable=False),
            sa.Column("data", sa.LargeBinary, nullable=False),
        )
        self.turns, self.leases = turn_tables(self.metadata, prefix, sa.BigInteger)


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

    def message_cache_info(self) -> MessageCacheInfo:
        """Hits, misses and entries of the decoded-record cache (its hit rate is a metric a
        service should watch: a low one means the cache is too small for its conversations)."""
        return self._load_message.info()

    def _append(self) -> Any:
        """The append statement, built once: ``INSERT … ON CONFLICT DO NOTHING RETURNING
        message_id`` without values (a row, or the rows of a batch, are its parameters)."""
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


async def _initialize(store: _SqlStoreBase) -> None:
    tables = store._tables.metadata.sorted_tables
    key = zlib.crc32(f"agentctx_fast schema {store.table_prefix}".encode())
    await store._port.run("creating the schema", partial(_create, tables=tables, key=key))


def _create(connection: Any, *, tables: Sequence[sa.Table], key: int) -> None:
    """Every table and index, each created only if absent (``CREATE … IF NOT EXISTS``), so
    initializers running at once (threads, processes, event loops) all succeed, whichever of
    them creates what: a check followed by a ``CREATE`` would let two of them both find a
    table absent, and one fail. On PostgreSQL even ``IF NOT EXISTS`` can race on the
    catalog (both pass the check, one fails on a unique key of ``pg_type``), so there the
    initializers take turns: a transaction-level advisory lock, released at commit."""
    if connection.dialect.name == "postgresql":
        connection.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})
    for table in tables:
        connection.execute(sa.schema.CreateTable(table, if_not_exists=True))
        for index in sorted(table.indexes, key=lambda index: str(index.name)):
            connection.execute(sa.schema.CreateIndex(index, if_not_exists=True))
    _add_missing_columns(connection, tables)


def _add_missing_columns(connection: Any, tables: Sequence[sa.Table]) -> None:
    """The nullable columns a table made by an earlier version lacks (``written_at``), added
    by ``ALTER TABLE … ADD COLUMN``: old rows get NULL, old writers keep working."""
    inspector = sa.inspect(connection)
    quote = connection.dialect.identifier_preparer.quote
    for table in tables:
        present = {column["name"] for column in inspector.get_columns(table.name)}
        for column in table.columns:
            if column.name in present or not column.nullable:
                continue
            kind = column.type.compile(dialect=connection.dialect)
            alter = f"ALTER TABLE {quote(table.name)} ADD COLUMN {quote(column.name)} {kind}"
            try:
                connection.execute(sa.text(alter))
            except sa_exc.OperationalError as error:
                # SQLite: another initializer added it since the look (PostgreSQL's take turns)
                if "duplicate column" not in str(error):
                    raise


async def _drop(store: _SqlStoreBase) -> None:
    await store._port.run(
        "dropping the schema",
        lambda connection: store._tables.metadata.drop_all(connection, checkfirst=True),
    )


class SqlSchema:
    """Creates the store's tables and indexes; `initialize` is idempotent."""

    def __init__(self, store: SqlAgentStore) -> None:
        self._store = store

    def initialize(self) -> None:
        """Create what is missing; safe to run from several processes at once."""
        run_sync(_initialize(self._store))

    def drop(self) -> None:
        """Drop the store's tables (for tests and teardown; the library never calls it)."""
        run_sync(_drop(self._store))


class AsyncSqlSchema:
    """`SqlSchema` for `AsyncSqlAgentStore`: ``await store.schema().initialize()``."""

    def __init__(self, store: AsyncSqlAgentStore) -> None:
        self._store = store

    async def initialize(self) -> None:
        """Create what is missing; safe to run from several processes at once."""
        await _initialize(self._store)

    async def drop(self) -> None:
        """Drop the store's tables (for tests and teardown; the library never calls it)."""
        await _drop(self._store)


class SqlAgentStore(_SqlStoreBase):
    """Chat memories, compression states, turns and leases in SQL tables ``{table_prefix}…``.

    ``engine_or_url`` is an SQLAlchemy `Engine` (its lifecycle stays the caller's) or a URL
    such as ``sqlite:///agent.db`` or ``postgresql+psycopg://user@host/db`` (the store owns
    that engine and `close` disposes it).

    >>> store = SqlAgentStore("sqlite://")
    >>> store.schema().initialize()
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

    def schema(self) -> SqlSchema:
        """The schema manager: ``store.schema().initialize()`` before first use."""
        return SqlSchema(self)

    def chat_memory(self, conversation_id: str) -> SqlChatMemory:
        """The memory of ``conversation_id`` (a light handle; create as many as you like)."""
        return SqlChatMemory(AsyncSqlChatMemory(self, check_conversation_id(conversation_id)))

    def chat_memory_provider(self) -> ChatMemoryProvider:
        """A provider that locates each conversation's memory in this store."""
        return self.chat_memory

    def compression_state_store(self) -> SqlCompressionStateStore:
        """The compression states of every conversation in this store."""
        return SqlCompressionStateStore(AsyncSqlCompressionStateStore(self))

    def turn_store(self) -> SqlAgentTurnStore:
        """Turn snapshots and conversation leases (the runner's busy protection)."""
        return SqlAgentTurnStore(AsyncSqlAgentTurnStore(self))

    def delete_conversation(self, conversation_id: str, *, force: bool = False) -> bool:
        """Remove every row of the conversation (messages, turn records, lease, compression
        state, quarantined records) in one transaction; True when there was any.

        Raises `AgentConversationBusyError` while a turn is running under a live lease,
        unless ``force``: the lease row is held for the transaction, so no turn starts between
        the check and the deletes."""
        return run_sync(self._delete_conversation(conversation_id, force))

    def list_conversations(
        self, prefix: str | None = None, limit: int = 100, after: str | None = None
    ) -> list[str]:
        """Up to ``limit`` conversation ids starting with ``prefix``, after ``after``, in
        code-point order."""
        return run_sync(self._list_conversations(prefix, limit, after))

    def purge(
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
        return run_sync(self._purge(older_than, keep_turn_records, batch_size))

    def close(self) -> None:
        """Dispose the engine if this store created it."""
        if self._owns_engine:
            self.engine.dispose()


class AsyncSqlAgentStore(_SqlStoreBase):
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

    def schema(self) -> AsyncSqlSchema:
        """The schema manager: ``await store.schema().initialize()`` before first use."""
        return AsyncSqlSchema(self)

    def chat_memory(self, conversation_id: str) -> AsyncSqlChatMemory:
        """The memory of ``conversation_id`` (a light handle; create as many as you like)."""
        return AsyncSqlChatMemory(self, check_conversation_id(conversation_id))

    def chat_memory_provider(self) -> AsyncChatMemoryProvider:
        """A provider that locates each conversation's memory in this store."""
        return self.chat_memory

    def compression_state_store(self) -> AsyncSqlCompressionStateStore:
        """The compression states of every conversation in this store."""
        return AsyncSqlCompressionStateStore(self)

    def turn_store(self) -> AsyncSqlAgentTurnStore:
        """Turn snapshots and conversation leases (the runner's busy protection)."""
        return AsyncSqlAgentTurnStore(self)

    async def delete_conversation(self, conversation_id: str, *, force: bool = False) -> bool:
        """Remove every row of the conversation (see `SqlAgentStore.delete_conversation`)."""
        return await self._delete_conversation(conversation_id, force)

    async def list_conversations(
        self, prefix: str | None = None, limit: int = 100, after: str | None = None
    ) -> list[str]:
        """A page of conversation ids (see `SqlAgentStore.list_conversations`)."""
        return await self._list_conversations(prefix, limit, after)

    async def purge(
        self,
        older_than: float | datetime,
        *,
        keep_turn_records: int | None = None,
        batch_size: int = 500,
    ) -> Purged:
        """Delete idle conversations and prune turn records (see `SqlAgentStore.purge`)."""
        return await self._purge(older_than, keep_turn_records, batch_size)

    async def aclose(self) -> None:
        """Dispose the engine if this store created it."""
        if not self._owns_engine:
            return
        if isinstance(self.engine, sa.engine.Engine):
            self.engine.dispose()
        else:
            await self.engine.dispose()


@unit_handle
class AsyncSqlChatMemory(AsyncChatMemory):
    """One conversation's messages in the store's ``messages`` table (the one implementation:
    awaited by `AsyncSqlAgentStore`, driven blocking by `SqlAgentStore`)."""

    def __init__(self, store: _SqlStoreBase, conversation_id: str) -> None:
        self._store = store
        self._table = store._tables.messages
        self.conversation_id = conversation_id
        self._fence: Fence | None = None

    def fenced(self, fence: Fence) -> AsyncSqlChatMemory:
        """A copy whose writes are fenced (a method replaced on this instance is kept)."""
        view = copy.copy(self)
        view._fence = fence
        return view

    @property
    def _io_port(self) -> SqlPort:
        """The store's port (see `agentctx_fast.stores._common.shared_port`)."""
        return self._store._port

    async def add_message_if_absent(self, message: Message) -> bool:
        check_message(message)
        action = f"adding message {message.message_id!r}"
        statement = self._store._append()
        params = self._row(message)
        if self._fence is not None:
            return message.message_id in await self._fenced_append(action, [params])
        return bool(await self._store._port.rows(action, statement, write=True, params=params))

    async def _fenced_append(self, action: str, rows: list[dict[str, Any]]) -> set[str]:
        """The ids of ``rows`` appended under the fence (one statement), or found stored as
        they are: a fenced append re-sent after a lost reply finds its own records (the lease
        is its own, so no other runner wrote them)."""
        assert self._fence is not None
        cid, fence, table = self.conversation_id, self._fence, self._table
        keys = ["conversation_id", "message_id"]
        statement = fenced_insert(self._store, table, rows, keys, cid, fence)
        port = self._store._port
        added = await port.rows(action, statement.returning(table.c.message_id), write=True)
        written = {row.message_id for row in added}
        missing = [row["message_id"] for row in rows if row["message_id"] not in written]
        if missing:
            await check_fence(self._store, action, cid, fence)
            query = sa.select(table.c.message_id, table.c.data).where(
                table.c.conversation_id == cid, table.c.message_id.in_(missing)
            )
            stored = {row.message_id: row.data for row in await port.rows(action, query)}
            written |= {
                row["message_id"] for row in rows if stored.get(row["message_id"]) == row["data"]
            }
        return written

    async def add_messages_if_absent(self, messages: Sequence[Message]) -> list[bool]:
        """One transaction: one ``INSERT … ON CONFLICT DO NOTHING … RETURNING`` statement,
        built once per store and run over the rows (SQLAlchemy sends them as multi-row
        inserts)."""
        batch = check_messages(messages)
        rows = [self._row(message) for message in batch]  # every record made before writing
        if not rows:
            return []
        action = f"adding {len(rows)} messages"
        if self._fence is not None:
            return first_of_each(batch, await self._fenced_append(action, rows))
        written = await self._store._port.many(action, self._store._append(), rows)
        return first_of_each(batch, {row.message_id for row in written})

    def _row(self, message: Message) -> dict[str, Any]:
        return {
            "conversation_id": self.conversation_id,
            "message_id": message.message_id,
            "kind": type(message).__name__,
            "model_visible": message.model_visible,
            "version": message.version,
            "data": dump(self._store.serializer, message),
            "written_at": time.time(),
        }

    async def get_messages(self, count: int | None = None, *, offset: int = 0) -> list[Message]:
        check_page(count, offset)
        return await self._page(count, offset, visible_only=False)

    async def get_model_messages(self, count: int | None = None) -> list[Message]:
        check_page(count, 0)
        return await self._page(count, 0, visible_only=True)

    async def _page(self, count: int | None, offset: int, *, visible_only: bool) -> list[Message]:
        """One index range scan, newest first from ``offset``: ``(conversation_id, seq)`` or
        the partial index of visible messages."""
        if count == 0:
            return []
        statement = self._store._pages.get(visible_only, count is not None, offset > 0)
        params = {"conversation_id": self.conversation_id, "count": count, "offset": offset}
        rows = await self._store._port.rows("reading messages", statement, params=params)
        return await self._load([row[0] for row in reversed(rows)])

    async def get_first_messages(self, count: int) -> list[Message]:
        if check_first(count) == 0:
            return []
        params = {"conversation_id": self.conversation_id, "count": count}
        first = self._store._pages.first()
        rows = await self._store._port.rows("reading messages", first, params=params)
        return await self._load([row[0] for row in rows])

    async def _load(self, records: list[Any]) -> list[Message]:
        try:
            return self._store._load_message.load_all(self.conversation_id, records)
        except UndecodableRecord as bad:
            raise await named_message(self._store, bad) from bad

    async def get_message(self, message_id: str) -> Message | None:
        check_identifier(message_id, "message_id")
        table = self._table
        query = sa.select(table.c.data).where(
            table.c.conversation_id == self.conversation_id, table.c.message_id == message_id
        )
        rows = await self._store._port.rows(f"reading message {message_id!r}", query)
        if not rows:
            return None
        try:
            return self._store._load_message(self.conversation_id, rows[0].data)
        except UndecodableRecord as bad:
            raise bad.named(message_id) from bad

    async def update_message(self, message: Message, expected_version: int) -> Message:
        check_message(message)
        check_version(expected_version)
        updated = replace(message, version=expected_version + 1)
        table = self._table
        key = (table.c.conversation_id == self.conversation_id) & (
            table.c.message_id == message.message_id
        )
        data = dump(self._store.serializer, updated)
        statement = (
            sa.update(table)
            .where(key, table.c.version == expected_version, table.c.kind == type(message).__name__)
            .values(version=expected_version + 1, data=data, written_at=time.time())
        )
        action = f"updating message {message.message_id!r}"
        port = self._store._port

        fence = self._fence
        if fence is not None:
            statement = statement.where(fence_holds(self._store, self.conversation_id, fence))

        async def update() -> Sequence[Any] | None:
            if await port.changed(action, statement) == 1:
                return None
            # Only to say why the update did not apply; the decision was the UPDATE's.
            if fence is not None:
                await check_fence(self._store, action, self.conversation_id, fence)
            query = sa.select(table.c.version, table.c.kind, table.c.data).where(key)
            return await port.rows(action, query)

        rows = await port.together(action, update)
        if rows is None:
            return updated
        if not rows:
            raise MessageNotFoundError(f"no stored message {message.message_id!r}")
        row = rows[0]
        if self._fence is not None and row.version == expected_version + 1 and row.data == data:
            return updated  # a re-sent fenced update that finds itself applied
        if row.kind != type(message).__name__:
            raise InvalidArgumentError(
                f"update_message cannot turn {row.kind} {message.message_id!r} "
                f"into a {type(message).__name__}"
            )
        raise VersionConflictError(
            f"message {message.message_id!r} is at version {row.version}, not {expected_version}"
        )

    async def delete_message(self, message_id: str, expected_version: int) -> None:
        """One ``DELETE … WHERE version = :expected`` (and the fence) decides it; pages order
        by ``seq``, so the messages after it move up one place without a write. A transaction
        either commits or not, so there is no re-sent statement to recognise: a lost reply to
        the commit is a `StoreUnavailableError`, and the caller's check (`get_message`) tells."""
        check_identifier(message_id, "message_id")
        check_version(expected_version)
        table, cid, fence = self._table, self.conversation_id, self._fence
        key = (table.c.conversation_id == cid) & (table.c.message_id == message_id)
        statement = sa.delete(table).where(key, table.c.version == expected_version)
        if fence is not None:
            statement = statement.where(fence_holds(self._store, cid, fence))
        action = f"deleting message {message_id!r}"
        port = self._store._port

        async def delete() -> Sequence[Any] | None:
            if await port.changed(action, statement) == 1:
                return None
            # Only to say why the delete did not apply; the decision was the DELETE's.
            if fence is not None:
                await check_fence(self._store, action, cid, fence)
            return await port.rows(action, sa.select(table.c.version).where(key))

        rows = await port.together(action, delete)
        if rows is None:
            return
        if not rows:
            raise MessageNotFoundError(f"no stored message {message_id!r}")
        raise VersionConflictError(
            f"message {message_id!r} is at version {rows[0].version}, not {expected_version}"
        )

    async def message_count(self) -> int:
        query = (
            sa.select(sa.func.count())
            .select_from(self._table)
            .where(self._table.c.conversation_id == self.conversation_id)
        )
        rows = await self._store._port.rows("counting messages", query)
        return int(rows[0][0])

    async def clear(self) -> None:
        """The messages and the compression state built from them, in one transaction."""
        await _sql_lifecycle.clear(self._store, self.conversation_id)


class SqlChatMemory(BlockingChatMemory):
    """One conversation's messages in a `SqlAgentStore` (blocking)."""


class AsyncSqlCompressionStateStore:
    """Compression states in the store's ``compression_states`` table, saved by CAS."""

    def __init__(self, store: _SqlStoreBase) -> None:
        self._store = store
        self._table = store._tables.compression_states

    async def load(self, conversation_id: str) -> AgentContextCompressionState | None:
        check_conversation_id(conversation_id)
        table = self._table
        query = sa.select(table.c.version, table.c.data).where(
            table.c.conversation_id == conversation_id
        )
        rows = await self._store._port.rows("loading a compression state", query)
        if not rows:
            return None
        state = load_state(self._store.serializer, rows[0].data)
        return replace(state, version=rows[0].version)

    async def save(self, state: AgentContextCompressionState, expected_version: int) -> bool:
        check_expected_version(state, expected_version)
        stored = replace(state, version=expected_version + 1)
        data = dump(self._store.serializer, stored)
        table = self._table
        statement: Any
        if expected_version == 0:
            values = {"conversation_id": state.conversation_id, "version": 1, "data": data}
            statement = self._store._insert_if_absent(table, values, ["conversation_id"])
        else:
            statement = (
                sa.update(table)
                .where(
                    table.c.conversation_id == state.conversation_id,
                    table.c.version == expected_version,
                )
                .values(version=expected_version + 1, data=data)
            )
        statement = statement.returning(table.c.version)
        rows = await self._store._port.rows("saving a compression state", statement, write=True)
        return bool(rows)


class SqlCompressionStateStore(BlockingCompressionStateStore):
    """Compression states of a `SqlAgentStore` (blocking)."""


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
