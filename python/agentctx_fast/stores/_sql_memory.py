"""The chat memories and compression states of the SQL stores: the one implementation of each,
awaited by `AsyncSqlAgentStore` and driven blocking by `SqlAgentStore`."""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from agentctx_fast._ids import check_conversation_id, check_identifier
from agentctx_fast._units import unit_handle
from agentctx_fast.compression.coordinator import (
    BlockingCompressionStateStore,
    CompressionState,
    check_expected_version,
)
from agentctx_fast.core.messages import Message
from agentctx_fast.errors import (
    InvalidArgumentError,
    MessageNotFoundError,
    VersionConflictError,
)
from agentctx_fast.memory import (
    AsyncChatMemory,
    BlockingChatMemory,
    check_first,
    check_message,
    check_messages,
    check_page,
    check_version,
    first_of_each,
)
from agentctx_fast.stores import _sql_lifecycle
from agentctx_fast.stores._records import UndecodableRecord
from agentctx_fast.stores._sql_io import SqlPort, sa
from agentctx_fast.stores._sql_records import named_message
from agentctx_fast.stores.serializer import dump, load_state
from agentctx_fast.stores.sql_turns import (
    check_fence,
    fence_holds,
    fenced_insert,
    hold_lease,
    lease_held,
)
from agentctx_fast.stores.turn_store import Fence

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from agentctx_fast.stores.sql import _SqlStoreBase

_IDS = 10_000  # the ids one read takes: within every server's limit of bind parameters


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
        """The store's port (see `agentctx_fast._units.shared_port`)."""
        return self._store._port

    async def add_message_if_absent(self, message: Message) -> bool:
        check_message(message)
        action = f"adding message {message.message_id!r}"
        return message.message_id in await self._append(action, [self._row(message)])

    async def add_messages_if_absent(self, messages: Sequence[Message]) -> list[bool]:
        """One atomic append (`_append`): ``INSERT … ON CONFLICT DO NOTHING … RETURNING``."""
        batch = check_messages(messages)
        rows = [self._row(message) for message in batch]  # every record made before writing
        if not rows:
            return []
        return first_of_each(batch, await self._append(f"adding {len(rows)} messages", rows))

    async def _append(self, action: str, rows: list[dict[str, Any]]) -> set[str]:
        """The ids of ``rows`` appended, as one atomic append: no other writer's message of the
        conversation takes a ``seq`` between theirs (SQLite runs one writer at a time;
        PostgreSQL: `locked_append`). A fenced append re-sent after a lost reply finds its own
        records stored as they are (the lease is its own, so no other runner wrote them)."""
        store, cid, fence, table = self._store, self.conversation_id, self._fence, self._table
        port = store._port
        if store._dialect == "postgresql":
            one = len(rows) == 1
            params: dict[str, Any] = (
                dict(rows[0]) if one else {name: [row[name] for row in rows] for name in rows[0]}
            )
            params["lock"] = store._tables.append_lock(cid)
            if fence is not None:
                params.update(lease_conversation=cid, turn_id=fence.turn_id, owner=fence.owner)
            statement = locked_append(store, list(rows[0]), one, fence is not None)
            if fence is None and not one:
                # A batch runs in a transaction of its own, so a unit cancelled while the
                # statement runs writes none of it (the transaction is rolled back).
                added = await port.many(action, statement, [params])
            else:
                added = await port.rows(action, statement, write=True, params=params)
        elif fence is None:
            added = await port.many(action, store._append(), rows)
        else:
            inserted: list[Any] = []

            def work(connection: Connection) -> None:
                # The fence checked by writing the lease row unchanged: that takes SQLite's
                # one write lock, so the lease holds until the batch commits with it.
                if connection.execute(hold_lease(store, cid, fence)).rowcount:
                    inserted.extend(connection.execute(store._append(), rows))

            await port.run(action, work)
            added = inserted
        written = {row.message_id for row in added}
        missing = [row["message_id"] for row in rows if row["message_id"] not in written]
        if fence is not None and missing:
            await check_fence(store, action, cid, fence)
            stored: dict[str, bytes] = {}
            for at in range(0, len(missing), _IDS):  # a re-sent batch of any size
                ids = missing[at : at + _IDS]
                query = sa.select(table.c.message_id, table.c.data).where(
                    table.c.conversation_id == cid, table.c.message_id.in_(ids)
                )
                stored.update({row.message_id: row.data for row in await port.rows(action, query)})
            written |= {
                row["message_id"] for row in rows if stored.get(row["message_id"]) == row["data"]
            }
        return written

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

    def __init__(self, store: _SqlStoreBase, fence: Fence | None = None) -> None:
        self._store = store
        self._table = store._tables.compression_states
        self._fence = fence

    def fenced(self, fence: Fence) -> AsyncSqlCompressionStateStore:
        """These states with saves accepted only while ``fence`` holds the lease, checked in
        the save's own statement."""
        return AsyncSqlCompressionStateStore(self._store, fence)

    async def load(self, conversation_id: str) -> CompressionState | None:
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

    async def save(self, state: CompressionState, expected_version: int) -> bool:
        check_expected_version(state, expected_version)
        stored = replace(state, version=expected_version + 1)
        data = dump(self._store.serializer, stored)
        table, store, fence = self._table, self._store, self._fence
        cid = state.conversation_id
        statement: Any
        if expected_version == 0:
            values = {"conversation_id": cid, "version": 1, "data": data}
            if fence is None:
                statement = store._insert_if_absent(table, values, ["conversation_id"])
            else:
                statement = fenced_insert(store, table, [values], ["conversation_id"], cid, fence)
        else:
            statement = (
                sa.update(table)
                .where(table.c.conversation_id == cid, table.c.version == expected_version)
                .values(version=expected_version + 1, data=data)
            )
            if fence is not None:
                statement = statement.where(fence_holds(store, cid, fence))
        statement = statement.returning(table.c.version)
        action = "saving a compression state"
        port = store._port

        async def save() -> bool:
            if await port.rows(action, statement, write=True):
                return True
            # Only to say why the save did not apply; the decision was the statement's.
            if fence is not None:
                await check_fence(store, action, cid, fence)
            return False

        return await port.together(action, save)


class SqlCompressionStateStore(BlockingCompressionStateStore):
    """Compression states of a `SqlAgentStore` (blocking)."""


def locked_append(store: _SqlStoreBase, names: list[str], one: bool, fenced: bool) -> Any:
    """PostgreSQL's append, built once per store for one row and for several: ``INSERT …
    SELECT`` of the row's parameters, or of one array a column unnested (``unnest(:name)``: any
    number of rows in one statement of one shape), ``ON CONFLICT DO NOTHING RETURNING
    message_id``, whose conditions are checked once, before any row takes its ``seq``. First
    the conversation's append lock, an advisory lock held to the end of the statement's
    transaction (``:lock``, `_Tables.append_lock`): appends to one conversation run one after
    the other instead of interleaving their rows. Fenced, then (only then: a ``CASE``) that
    ``:turn_id`` and ``:owner`` hold the lease of ``:lease_conversation``
    (`sql_turns.fence_holds`), so no append waits for the lock holding a lease row."""
    statement = store._locked_appends.get((one, fenced))
    if statement is None:
        from sqlalchemy.dialects.postgresql import ARRAY, insert

        table = store._tables.messages
        lock = sa.func.pg_advisory_xact_lock(sa.bindparam("lock", type_=sa.BigInteger))
        taken = sa.select(sa.func.count()).select_from(sa.select(lock).subquery())
        condition: Any = taken.scalar_subquery() == 1
        if fenced:
            turn_id = sa.bindparam("turn_id", type_=sa.String)
            owner = sa.bindparam("owner", type_=sa.String)
            conversation = sa.bindparam("lease_conversation", type_=sa.String)
            held = lease_held(store, conversation, turn_id, owner)
            # CASE, not AND: PostgreSQL orders AND's terms by cost (a batch's statement put the
            # lease first), and an append holding its lease row while it waits for the lock
            # deadlocks with whatever the lock's holder waits for that waits for that row.
            condition = sa.case((condition, held), else_=sa.false())
        columns = [
            sa.bindparam(name, type_=table.c[name].type).label(name)
            if one
            else sa.func.unnest(sa.bindparam(name, type_=ARRAY(table.c[name].type))).label(name)
            for name in names
        ]
        rows = sa.select(*columns).where(condition)
        statement = (
            insert(table)
            .from_select(names, rows)
            .on_conflict_do_nothing(index_elements=["conversation_id", "message_id"])
            .returning(table.c.message_id)
        )
        store._locked_appends[one, fenced] = statement
    return statement
