"""The SQL stores' records as stored, for naming a bad one and for `agentctx doctor`.

Reads here take rows as they are (no decoding), so a corrupt row is seen, not raised. A
quarantined record moves into ``{prefix}quarantine`` (created on first use): one transaction
inserts it there and deletes the original row only if it still holds what was read, so a row
rewritten meanwhile is never moved.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from agentctx_fast.stores._records import QuarantinedRecord, StoredRecord, UndecodableRecord
from agentctx_fast.stores._sql_io import sa

if TYPE_CHECKING:
    from agentctx_fast.errors import SerializationError
    from agentctx_fast.stores.sql import _SqlStoreBase


def quarantine_table(store: _SqlStoreBase) -> sa.Table:
    """``{prefix}quarantine``, on the store's own metadata (so its schema creates it too)."""
    metadata = store._tables.metadata
    name = f"{store.table_prefix}quarantine"
    if name in metadata.tables:
        return metadata.tables[name]
    return sa.Table(
        name,
        metadata,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("conversation_id", sa.String, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("record_id", sa.String, nullable=True),
        sa.Column("data", sa.LargeBinary, nullable=False),
        sa.Column("problem", sa.Text, nullable=False),
        sa.Column("quarantined_at", sa.Float, nullable=False),
    )


async def named_message(store: _SqlStoreBase, bad: UndecodableRecord) -> SerializationError:
    """``bad`` naming its message, found by its bytes (a read only on this error path)."""
    table = store._tables.messages
    query = sa.select(table.c.message_id).where(
        table.c.conversation_id == bad.conversation_id, table.c.data == bad.data
    )
    rows = await store._port.rows("naming a corrupt message", query)
    return bad.named(str(rows[0][0]) if rows else None)


class SqlRecords:
    """Raw access to one SQL store's records."""

    def __init__(self, store: _SqlStoreBase) -> None:
        self._store = store
        self._tables = store._tables
        self._quarantine = quarantine_table(store)

    async def conversations(self) -> list[str]:
        """Every conversation with messages, turns or a lease."""
        t = self._tables
        query = sa.union(
            sa.select(t.messages.c.conversation_id),
            sa.select(t.turns.c.conversation_id),
            sa.select(t.leases.c.conversation_id),
        )
        rows = await self._store._port.rows("listing conversations", query)
        return sorted(str(row[0]) for row in rows)

    async def messages(self, conversation_id: str) -> list[StoredRecord]:
        table = self._tables.messages
        query = (
            sa.select(table.c.seq, table.c.message_id, table.c.data)
            .where(table.c.conversation_id == conversation_id)
            .order_by(table.c.seq)
        )
        rows = await self._store._port.rows("reading message records", query)
        return [StoredRecord("message", str(r.message_id), bytes(r.data), r.seq) for r in rows]

    async def turns(self, conversation_id: str) -> list[StoredRecord]:
        table = self._tables.turns
        query = sa.select(table.c.turn_id, table.c.version, table.c.data).where(
            table.c.conversation_id == conversation_id
        )
        rows = await self._store._port.rows("reading turn records", query)
        return [
            StoredRecord("turn", str(r.turn_id), bytes(r.data), r.turn_id, r.version) for r in rows
        ]

    async def lease(self, conversation_id: str) -> StoredRecord | None:
        table = self._tables.leases
        query = sa.select(table).where(table.c.conversation_id == conversation_id)
        rows = await self._store._port.rows("reading a lease record", query)
        if not rows:
            return None
        fields = {key: _plain(value) for key, value in rows[0]._mapping.items()}
        data = json.dumps(fields, ensure_ascii=False).encode("utf-8")
        return StoredRecord("lease", None, data, fields)

    async def quarantine(self, conversation_id: str, record: StoredRecord, problem: str) -> bool:
        """Move ``record`` into the quarantine table; False when it changed since it was read."""
        t = self._tables
        if record.kind == "message":
            delete = sa.delete(t.messages).where(
                t.messages.c.conversation_id == conversation_id,
                t.messages.c.seq == record.key,
                t.messages.c.data == record.data,
            )
        elif record.kind == "turn":
            delete = sa.delete(t.turns).where(
                t.turns.c.conversation_id == conversation_id,
                t.turns.c.turn_id == record.key,
                t.turns.c.data == record.data,
            )
        else:
            delete = sa.delete(t.leases).where(
                t.leases.c.conversation_id == conversation_id,
                *(t.leases.c[name] == value for name, value in _matchable(record.key)),
            )
        insert = sa.insert(self._quarantine).values(
            conversation_id=conversation_id,
            kind=record.kind,
            record_id=record.record_id,
            data=record.data,
            problem=problem,
            quarantined_at=time.time(),
        )
        moved: list[bool] = []

        def work(connection: Any) -> None:
            if connection.execute(delete).rowcount == 1:
                connection.execute(insert)
                moved.append(True)

        await self._store._port.run(
            "creating the quarantine table",
            lambda connection: self._quarantine.create(connection, checkfirst=True),
        )
        await self._store._port.run(f"quarantining a {record.kind} record", work)
        return bool(moved)

    async def quarantined(self, conversation_id: str) -> list[QuarantinedRecord]:
        """The records quarantined from ``conversation_id``, oldest first."""
        table = self._quarantine
        exists: list[bool] = []
        await self._store._port.run(
            "looking for the quarantine table",
            lambda connection: exists.append(sa.inspect(connection).has_table(table.name)),
        )
        if not exists[0]:
            return []
        query = (
            sa.select(table.c.kind, table.c.record_id, table.c.data, table.c.problem)
            .where(table.c.conversation_id == conversation_id)
            .order_by(table.c.id)
        )
        rows = await self._store._port.rows("reading quarantined records", query)
        return [
            QuarantinedRecord(conversation_id, r.kind, r.record_id, bytes(r.data), r.problem)
            for r in rows
        ]


def _plain(value: object) -> object:
    """A column value as JSON can hold it (a corrupt SQLite cell may hold any type)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "replace")
    return repr(value)


def _matchable(fields: dict[str, Any]) -> list[tuple[str, Any]]:
    """The lease columns to match on delete: the text ones (a float or a NULL is not compared
    reliably by ``=``; the conversation and its turn id pin the row)."""
    return [(name, value) for name, value in fields.items() if name in ("turn_id", "status")]
