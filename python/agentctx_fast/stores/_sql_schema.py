"""The SQL stores' tables and indexes, and the schema manager that creates them."""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from agentctx_fast._blocking import run_sync
from agentctx_fast.stores._sql_io import sa, sa_exc
from agentctx_fast.stores.sql_turns import turn_tables

if TYPE_CHECKING:
    from sqlalchemy.schema import SchemaItem

    from agentctx_fast.stores.sql import AsyncSqlAgentStore, SqlAgentStore, _SqlStoreBase


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

    def append_lock(self, conversation_id: str) -> int:
        """PostgreSQL: the advisory lock of appends to one conversation of these tables
        (`_sql_memory.locked_append`; a purge takes it too), a signed 64-bit hash that is the
        same in every process. Two conversations sharing one only take turns."""
        key = f"{self.messages.name}\0{conversation_id}".encode("utf-8", "surrogatepass")
        return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big", signed=True)


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
    """`SqlSchema` for `AsyncSqlAgentStore`: ``await store.schema.initialize()``."""

    def __init__(self, store: AsyncSqlAgentStore) -> None:
        self._store = store

    async def initialize(self) -> None:
        """Create what is missing; safe to run from several processes at once."""
        await _initialize(self._store)

    async def drop(self) -> None:
        """Drop the store's tables (for tests and teardown; the library never calls it)."""
        await _drop(self._store)
