"""`SqlAgentStore` on SQLAlchemy 2.x: SQLite embedded, PostgreSQL (psycopg) for many instances.

Every write is one statement whose WHERE clause or unique constraint decides it on the server:
appends are ``INSERT … ON CONFLICT DO NOTHING``, compare-and-set is ``UPDATE … WHERE version =
:expected``. Reads are indexed pages: ``(conversation_id, seq)`` and a partial index over the
model-visible messages, so a page costs the same at 1,000 and 100,000 messages.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import replace
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import StaticPool
from sqlalchemy.schema import SchemaItem

from agentctx_fast._ids import check_identifier
from agentctx_fast.coordinator import AgentContextCompressionState, check_expected_version
from agentctx_fast.errors import (
    InvalidArgumentError,
    MessageNotFoundError,
    StoreError,
    StoreUnavailableError,
    VersionConflictError,
)
from agentctx_fast.memory import (
    ChatMemory,
    ChatMemoryProvider,
    check_message,
    check_page,
    check_version,
)
from agentctx_fast.messages import Message
from agentctx_fast.stores._common import check_conversation_id, check_table_prefix
from agentctx_fast.stores._loader import DEFAULT_MESSAGE_CACHE_SIZE, MessageLoader
from agentctx_fast.stores.serializer import (
    AgentStoreSerializer,
    JsonAgentStoreSerializer,
    dump,
    load_state,
)
from agentctx_fast.stores.sql_turns import SqlAgentTurnStore, turn_tables


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


@contextmanager
def _translated(action: str) -> Iterator[None]:
    """Database errors become typed store errors; the transaction has rolled back by then."""
    try:
        yield
    except (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.TimeoutError) as error:
        raise StoreUnavailableError(f"database unavailable while {action}: {error}") from error
    except sa_exc.SQLAlchemyError as error:
        raise StoreError(f"database error while {action}: {error}") from error


def _engine_for(url: str) -> Engine:
    parsed = sa.engine.make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return sa.create_engine(url, pool_pre_ping=True)
    if parsed.database in (None, "", ":memory:"):
        # One shared connection, or every connection would see its own empty database.
        return sa.create_engine(
            url, poolclass=StaticPool, connect_args={"check_same_thread": False}
        )
    engine = sa.create_engine(url, connect_args={"timeout": 30})

    @sa.event.listens_for(engine, "connect")
    def _pragmas(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    return engine


class SqlSchema:
    """Creates the store's tables and indexes; `initialize` is idempotent."""

    def __init__(self, store: SqlAgentStore) -> None:
        self._store = store

    def initialize(self) -> None:
        """Create what is missing; safe to run from several processes at once."""
        store = self._store
        for attempt in range(3):
            try:
                with _translated("creating the schema"), store._begin() as connection:
                    store._tables.metadata.create_all(connection, checkfirst=True)
                return
            except StoreError as error:
                # Two processes creating one table race on the catalog; the loser retries and
                # then finds the table there.
                lost_race = isinstance(
                    error.__cause__, sa_exc.IntegrityError | sa_exc.ProgrammingError
                )
                if attempt == 2 or not lost_race:
                    raise

    def drop(self) -> None:
        """Drop the store's tables (for tests and teardown; the library never calls it)."""
        with _translated("dropping the schema"), self._store._begin() as connection:
            self._store._tables.metadata.drop_all(connection, checkfirst=True)


class SqlAgentStore:
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
    ) -> None:
        check_table_prefix(table_prefix)
        if isinstance(engine_or_url, str):
            try:
                self.engine = _engine_for(engine_or_url)
            except (sa_exc.ArgumentError, ImportError) as error:
                raise InvalidArgumentError(f"cannot use database URL: {error}") from error
            self._owns_engine = True
        elif isinstance(engine_or_url, Engine):
            self.engine = engine_or_url
            self._owns_engine = False
        else:
            raise InvalidArgumentError(
                f"engine_or_url must be an SQLAlchemy Engine or a URL, "
                f"got {type(engine_or_url).__name__}"
            )
        self.table_prefix = table_prefix
        self.serializer: AgentStoreSerializer = serializer or JsonAgentStoreSerializer()
        self._load_message = MessageLoader(self, message_cache_size)
        self._dialect = self.engine.dialect.name
        self._tables = _Tables(table_prefix, self._dialect)
        shared = isinstance(self.engine.pool, StaticPool)
        self._serial: AbstractContextManager[Any] = threading.RLock() if shared else nullcontext()

    def schema(self) -> SqlSchema:
        """The schema manager: ``store.schema().initialize()`` before first use."""
        return SqlSchema(self)

    def chat_memory(self, conversation_id: str) -> SqlChatMemory:
        """The memory of ``conversation_id`` (a light handle; create as many as you like)."""
        return SqlChatMemory(self, check_conversation_id(conversation_id))

    def chat_memory_provider(self) -> ChatMemoryProvider:
        """A provider that locates each conversation's memory in this store."""
        return self.chat_memory

    def compression_state_store(self) -> SqlCompressionStateStore:
        """The compression states of every conversation in this store."""
        return SqlCompressionStateStore(self)

    def turn_store(self) -> SqlAgentTurnStore:
        """Turn snapshots and conversation leases (the runner's busy protection)."""
        return SqlAgentTurnStore(self)

    def close(self) -> None:
        """Dispose the engine if this store created it."""
        if self._owns_engine:
            self.engine.dispose()

    @contextmanager
    def _begin(self) -> Iterator[Connection]:
        with self._serial, self.engine.begin() as connection:
            yield connection

    @contextmanager
    def _connect(self) -> Iterator[Connection]:
        with self._serial, self.engine.connect() as connection:
            yield connection

    @contextmanager
    def _translated_io(self, action: str, *, write: bool = False) -> Iterator[Connection]:
        """A connection (in a transaction when ``write``) whose errors become store errors."""
        with _translated(action), self._begin() if write else self._connect() as connection:
            yield connection

    def _insert_if_absent(self, table: sa.Table, values: dict[str, Any], keys: list[str]) -> Any:
        if self._dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert as pg_insert

            return pg_insert(table).values(values).on_conflict_do_nothing(index_elements=keys)
        if self._dialect == "sqlite":
            from sqlalchemy.dialects.sqlite import insert as sqlite_insert

            return sqlite_insert(table).values(values).on_conflict_do_nothing(index_elements=keys)
        return None  # other databases: a plain insert, the unique constraint decides


class SqlChatMemory(ChatMemory):
    """One conversation's messages in the store's ``messages`` table."""

    def __init__(self, store: SqlAgentStore, conversation_id: str) -> None:
        self._store = store
        self._table = store._tables.messages
        self.conversation_id = conversation_id

    def add_message_if_absent(self, message: Message) -> bool:
        check_message(message)
        values = {
            "conversation_id": self.conversation_id,
            "message_id": message.message_id,
            "kind": type(message).__name__,
            "model_visible": message.model_visible,
            "version": message.version,
            "data": dump(self._store.serializer, message),
        }
        statement = self._store._insert_if_absent(
            self._table, values, ["conversation_id", "message_id"]
        )
        with _translated(f"adding message {message.message_id!r}"):
            if statement is None:
                try:
                    with self._store._begin() as connection:
                        connection.execute(sa.insert(self._table).values(values))
                    return True
                except sa_exc.IntegrityError:
                    return False
            with self._store._begin() as connection:
                inserted = connection.execute(statement.returning(self._table.c.seq)).first()
            return inserted is not None

    def get_messages(self, count: int | None = None, offset: int = 0) -> list[Message]:
        check_page(count, offset)
        return self._page(count, offset, visible_only=False)

    def get_model_messages(self, count: int | None = None) -> list[Message]:
        check_page(count, 0)
        return self._page(count, 0, visible_only=True)

    def _page(self, count: int | None, offset: int, *, visible_only: bool) -> list[Message]:
        if count == 0:
            return []
        table = self._table
        query = sa.select(table.c.data).where(table.c.conversation_id == self.conversation_id)
        if visible_only:
            query = query.where(table.c.model_visible)
        query = query.order_by(table.c.seq.desc()).limit(count).offset(offset or None)
        with _translated("reading messages"), self._store._connect() as connection:
            rows = connection.execute(query).scalars().all()
        return [self._store._load_message(self.conversation_id, data) for data in reversed(rows)]

    def get_message(self, message_id: str) -> Message | None:
        check_identifier(message_id, "message_id")
        table = self._table
        query = sa.select(table.c.data).where(
            table.c.conversation_id == self.conversation_id, table.c.message_id == message_id
        )
        with _translated(f"reading message {message_id!r}"), self._store._connect() as connection:
            data = connection.execute(query).scalar_one_or_none()
        return None if data is None else self._store._load_message(self.conversation_id, data)

    def update_message(self, message: Message, expected_version: int) -> Message:
        check_message(message)
        check_version(expected_version)
        updated = replace(message, version=expected_version + 1)
        table = self._table
        key = (table.c.conversation_id == self.conversation_id) & (
            table.c.message_id == message.message_id
        )
        statement = (
            sa.update(table)
            .where(key, table.c.version == expected_version, table.c.kind == type(message).__name__)
            .values(version=expected_version + 1, data=dump(self._store.serializer, updated))
        )
        with _translated(f"updating message {message.message_id!r}"):
            with self._store._begin() as connection:
                if connection.execute(statement).rowcount == 1:
                    return updated
            # Only to say why the update did not apply; the decision was the UPDATE's.
            with self._store._connect() as connection:
                query = sa.select(table.c.version, table.c.kind).where(key)
                row = connection.execute(query).first()
        if row is None:
            raise MessageNotFoundError(f"no stored message {message.message_id!r}")
        if row.kind != type(message).__name__:
            raise InvalidArgumentError(
                f"update_message cannot turn {row.kind} {message.message_id!r} "
                f"into a {type(message).__name__}"
            )
        raise VersionConflictError(
            f"message {message.message_id!r} is at version {row.version}, not {expected_version}"
        )

    def message_count(self) -> int:
        query = (
            sa.select(sa.func.count())
            .select_from(self._table)
            .where(self._table.c.conversation_id == self.conversation_id)
        )
        with _translated("counting messages"), self._store._connect() as connection:
            return int(connection.execute(query).scalar_one())

    def clear(self) -> None:
        statement = sa.delete(self._table).where(
            self._table.c.conversation_id == self.conversation_id
        )
        with _translated("clearing messages"), self._store._begin() as connection:
            connection.execute(statement)


class SqlCompressionStateStore:
    """Compression states in the store's ``compression_states`` table, saved by CAS."""

    def __init__(self, store: SqlAgentStore) -> None:
        self._store = store
        self._table = store._tables.compression_states

    def load(self, conversation_id: str) -> AgentContextCompressionState | None:
        check_conversation_id(conversation_id)
        table = self._table
        query = sa.select(table.c.version, table.c.data).where(
            table.c.conversation_id == conversation_id
        )
        with _translated("loading a compression state"), self._store._connect() as connection:
            row = connection.execute(query).first()
        if row is None:
            return None
        state = load_state(self._store.serializer, row.data)
        return replace(state, version=row.version)

    def save(self, state: AgentContextCompressionState, expected_version: int) -> bool:
        check_expected_version(state, expected_version)
        stored = replace(state, version=expected_version + 1)
        data = dump(self._store.serializer, stored)
        table = self._table
        with _translated("saving a compression state"):
            if expected_version == 0:
                values = {
                    "conversation_id": state.conversation_id,
                    "version": 1,
                    "data": data,
                }
                statement = self._store._insert_if_absent(table, values, ["conversation_id"])
                if statement is None:
                    try:
                        with self._store._begin() as connection:
                            connection.execute(sa.insert(table).values(values))
                        return True
                    except sa_exc.IntegrityError:
                        return False
                statement = statement.returning(table.c.version)
            else:
                statement = (
                    sa.update(table)
                    .where(
                        table.c.conversation_id == state.conversation_id,
                        table.c.version == expected_version,
                    )
                    .values(version=expected_version + 1, data=data)
                    .returning(table.c.version)
                )
            with self._store._begin() as connection:
                return connection.execute(statement).first() is not None
