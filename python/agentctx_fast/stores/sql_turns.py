"""Turn snapshots and conversation leases in SQL: every decision is one conditional statement.

Snapshots: ``INSERT … ON CONFLICT DO NOTHING`` for version 0, ``UPDATE … WHERE version =
:expected`` after. Leases: taking a conversation is one upsert whose ``DO UPDATE … WHERE``
only replaces a running lease that expired (and records the turn it replaced); renewing,
suspending, resuming, flagging and releasing are ``UPDATE``/``DELETE … WHERE`` on the owner,
turn and status. No lease decision is a client-side read followed by a write.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agentctx_fast._ids import check_conversation_id
from agentctx_fast._units import unit_handle
from agentctx_fast.core.turns import TurnStatus
from agentctx_fast.errors import StoreError
from agentctx_fast.stores._records import decode_lease, naming
from agentctx_fast.stores._sql_io import SqlPort, sa
from agentctx_fast.stores.turn_store import (
    AgentTurnSnapshot,
    BlockingAgentTurnStore,
    ConversationLease,
    Fence,
    LeaseRenewal,
    busy_error,
    check_lease_arguments,
    check_snapshot_save,
    check_turn_ids,
    dump_snapshot,
    lease_lost,
    load_snapshot,
)

if TYPE_CHECKING:
    from agentctx_fast.stores.sql import _SqlStoreBase

_RUNNING = TurnStatus.RUNNING.value
_SUSPENDED = TurnStatus.SUSPENDED.value


def fence_holds(store: _SqlStoreBase, conversation_id: str, fence: Fence) -> Any:
    """The condition, inside a write's own statement, that ``fence`` holds the conversation's
    lease. On PostgreSQL it locks the lease row for the statement (``FOR SHARE``):
    a runner taking the conversation over waits for the write, or the write sees the lease
    taken; SQLite runs one writer at a time. One statement holds no lock while its client is
    away, so a paused process blocks no takeover."""
    return lease_held(store, conversation_id, fence.turn_id, fence.owner)


def lease_held(store: _SqlStoreBase, conversation_id: Any, turn_id: Any, owner: Any) -> Any:
    """`fence_holds` of values or bind parameters."""
    leases = store._tables.leases
    return (
        sa.select(leases.c.owner)
        .where(
            leases.c.conversation_id == conversation_id,
            leases.c.turn_id == turn_id,
            leases.c.owner == owner,
        )
        .with_for_update(read=True)
        .exists()
    )


def hold_lease(store: _SqlStoreBase, conversation_id: str, fence: Fence) -> Any:
    """SQLite: the ``UPDATE`` that writes ``fence``'s lease row unchanged, changing one row when
    the fence holds. As a transaction's first statement it takes SQLite's write lock, so the
    lease holds until the transaction commits: the statements after it are fenced too."""
    leases = store._tables.leases
    return (
        sa.update(leases)
        .where(
            leases.c.conversation_id == conversation_id,
            leases.c.turn_id == fence.turn_id,
            leases.c.owner == fence.owner,
        )
        .values(owner=leases.c.owner)
    )


def fenced_insert(
    store: _SqlStoreBase,
    table: sa.Table,
    rows: Sequence[Mapping[str, Any]],
    keys: list[str],
    conversation_id: str,
    fence: Fence,
) -> Any:
    """``INSERT … SELECT`` of ``rows`` while ``fence`` holds the lease, ``ON CONFLICT (keys) DO
    NOTHING``: one statement."""
    insert: Any
    if store._dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    names = list(rows[0])
    selects = [
        sa.select(*(sa.literal(row[name], table.c[name].type).label(name) for name in names))
        for row in rows
    ]
    source = (selects[0] if len(selects) == 1 else sa.union_all(*selects)).subquery("added")
    chosen = sa.select(*(source.c[name] for name in names)).where(
        fence_holds(store, conversation_id, fence)
    )
    return insert(table).from_select(names, chosen).on_conflict_do_nothing(index_elements=keys)


async def check_fence(
    store: _SqlStoreBase, action: str, conversation_id: str, fence: Fence
) -> None:
    """`LeaseLostError` unless ``fence`` holds the lease (read after a fenced write changed
    nothing, only to say why: the decision was the write's)."""
    leases = store._tables.leases
    query = sa.select(leases.c.owner).where(
        leases.c.conversation_id == conversation_id,
        leases.c.turn_id == fence.turn_id,
        leases.c.owner == fence.owner,
    )
    if not await store._port.rows(action, query):
        raise lease_lost(conversation_id, fence)


def turn_tables(metadata: sa.MetaData, prefix: str, version_type: Any) -> tuple[sa.Table, sa.Table]:
    """The ``{prefix}turns`` and ``{prefix}conversation_leases`` tables."""
    turns = sa.Table(
        f"{prefix}turns",
        metadata,
        sa.Column("conversation_id", sa.String, primary_key=True),
        sa.Column("turn_id", sa.String, primary_key=True),
        sa.Column("version", version_type, nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("data", sa.LargeBinary, nullable=False),
        sa.Column("written_at", sa.Float, nullable=True),  # see `_sql_lifecycle`
    )
    leases = sa.Table(
        f"{prefix}conversation_leases",
        metadata,
        sa.Column("conversation_id", sa.String, primary_key=True),
        sa.Column("turn_id", sa.String, nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("owner", sa.String, nullable=True),
        sa.Column("expires_at", sa.Float, nullable=True),
        sa.Column("cancel_requested", sa.Boolean, nullable=False),
        sa.Column("previous_turn_id", sa.String, nullable=True),
    )
    return turns, leases


@unit_handle
class AsyncSqlAgentTurnStore:
    """The turn store of the SQL stores (SQLite or PostgreSQL): the one implementation, awaited
    by `AsyncSqlAgentStore` and driven blocking by `SqlAgentStore`."""

    def __init__(self, store: _SqlStoreBase) -> None:
        self._store = store
        self._turns = store._tables.turns
        self._leases = store._tables.leases

    @property
    def _io_port(self) -> SqlPort:
        """The store's port (see `agentctx_fast._units.shared_port`)."""
        return self._store._port

    # -- snapshots --------------------------------------------------------------------------

    async def load_turn(self, conversation_id: str, turn_id: str) -> AgentTurnSnapshot | None:
        check_turn_ids(conversation_id, turn_id)
        table = self._turns
        query = sa.select(table.c.version, table.c.data).where(
            table.c.conversation_id == conversation_id, table.c.turn_id == turn_id
        )
        rows = await self._store._port.rows(f"loading turn {turn_id!r}", query)
        if not rows:
            return None
        with naming(conversation_id, f"turn {turn_id!r}"):
            return load_snapshot(rows[0].data, rows[0].version)

    async def save_turn(
        self, snapshot: AgentTurnSnapshot, expected_version: int, fence: Fence | None = None
    ) -> bool:
        check_snapshot_save(snapshot, expected_version)
        data = dump_snapshot(snapshot)
        table = self._turns
        conversation_id = snapshot.conversation_id
        keys = ["conversation_id", "turn_id"]
        if expected_version == 0:
            values = {
                "conversation_id": conversation_id,
                "turn_id": snapshot.turn_id,
                "version": 1,
                "status": snapshot.status.value,
                "data": data,
                "written_at": time.time(),
            }
            if fence is None:
                statement: Any = self._store._insert_if_absent(table, values, keys)
            else:
                statement = fenced_insert(
                    self._store, table, [values], keys, conversation_id, fence
                )
        else:
            statement = (
                sa.update(table)
                .where(
                    table.c.conversation_id == conversation_id,
                    table.c.turn_id == snapshot.turn_id,
                    table.c.version == expected_version,
                )
                .values(
                    version=expected_version + 1,
                    status=snapshot.status.value,
                    data=data,
                    written_at=time.time(),
                )
            )
            if fence is not None:
                statement = statement.where(fence_holds(self._store, conversation_id, fence))
        statement = statement.returning(table.c.version)
        action = f"saving turn {snapshot.turn_id!r}"
        saved = await self._store._port.rows(action, statement, write=True)
        if saved or fence is None:
            return bool(saved)
        await check_fence(self._store, action, conversation_id, fence)
        # A re-sent fenced save (the lease still its own, so no other writer) that finds
        # itself applied is True; the decision was the write's.
        stored = await self._store._port.rows(
            action,
            sa.select(table.c.version, table.c.data).where(
                table.c.conversation_id == conversation_id, table.c.turn_id == snapshot.turn_id
            ),
        )
        return bool(stored and stored[0].version == expected_version + 1 and stored[0].data == data)

    # -- leases -----------------------------------------------------------------------------

    @property
    def _dialect(self) -> str:
        return self._store._dialect

    async def open_turn(self, conversation_id: str) -> ConversationLease | None:
        check_conversation_id(conversation_id)
        table = self._leases
        query = sa.select(table).where(table.c.conversation_id == conversation_id)
        rows = await self._store._port.rows("reading a conversation lease", query)
        return _lease(rows[0]) if rows else None

    async def acquire_conversation(
        self, conversation_id: str, turn_id: str, owner: str, lease_seconds: float, now: float
    ) -> str | None:
        check_lease_arguments(conversation_id, turn_id, owner, lease_seconds)
        table = self._leases
        insert: Any
        if self._dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert
        else:
            from sqlalchemy.dialects.sqlite import insert
        statement: Any = insert(table).values(
            conversation_id=conversation_id,
            turn_id=turn_id,
            status=_RUNNING,
            owner=owner,
            expires_at=now + lease_seconds,
            cancel_requested=False,
            previous_turn_id=None,
        )
        statement = statement.on_conflict_do_update(
            index_elements=["conversation_id"],
            set_={
                "turn_id": statement.excluded.turn_id,
                "status": _RUNNING,
                "owner": statement.excluded.owner,
                "expires_at": statement.excluded.expires_at,
                "cancel_requested": False,
                "previous_turn_id": table.c.turn_id,
            },
            where=(table.c.status == _RUNNING) & (table.c.expires_at <= now),
        ).returning(table.c.previous_turn_id)
        action = "taking a conversation lease"

        async def take() -> str | None:
            for _ in range(3):
                rows = await self._store._port.rows(action, statement, write=True)
                if rows:
                    previous = rows[0].previous_turn_id
                    return None if previous is None else str(previous)
                lease = await self.open_turn(conversation_id)
                if lease is not None and lease.turn_id == turn_id and lease.owner == owner:
                    return lease.previous_turn_id  # a re-sent call: already taken
                if lease is not None:
                    raise busy_error(conversation_id, lease)
                # released between the two statements: try again
            raise StoreError(f"conversation {conversation_id!r}: the lease kept changing")

        return await self._store._port.together(action, take)

    async def renew_lease(
        self, conversation_id: str, turn_id: str, owner: str, lease_seconds: float, now: float
    ) -> LeaseRenewal:
        check_lease_arguments(conversation_id, turn_id, owner, lease_seconds)
        table = self._leases
        statement = (
            sa.update(table)
            .where(*self._held(conversation_id, turn_id), table.c.owner == owner)
            .values(expires_at=now + lease_seconds)
            .returning(table.c.cancel_requested)
        )
        rows = await self._store._port.rows("renewing a conversation lease", statement, write=True)
        if not rows:
            return LeaseRenewal.LOST
        return LeaseRenewal.CANCEL_REQUESTED if rows[0].cancel_requested else LeaseRenewal.RENEWED

    async def suspend_conversation(self, conversation_id: str, turn_id: str, owner: str) -> bool:
        check_turn_ids(conversation_id, turn_id, owner)
        table = self._leases
        statement = (
            sa.update(table)
            .where(*self._held(conversation_id, turn_id), table.c.owner == owner)
            .values(status=_SUSPENDED, owner=None, expires_at=None, cancel_requested=False)
        )
        return await self._applied(statement, "suspending a turn")

    async def reacquire_conversation(
        self,
        conversation_id: str,
        turn_id: str,
        owner: str,
        lease_seconds: float,
        now: float,
        expected_version: int | None = None,
    ) -> bool:
        check_lease_arguments(conversation_id, turn_id, owner, lease_seconds)
        table, turns = self._leases, self._turns
        condition: list[Any] = [*self._held(conversation_id, turn_id), table.c.status == _SUSPENDED]
        if expected_version is not None:  # the record as the caller read it: one resume wins
            condition.append(
                sa.exists().where(
                    turns.c.conversation_id == conversation_id,
                    turns.c.turn_id == turn_id,
                    turns.c.version == expected_version,
                )
            )
        statement = (
            sa.update(table)
            .where(*condition)
            .values(status=_RUNNING, owner=owner, expires_at=now + lease_seconds)
        )
        if await self._applied(statement, "resuming a turn"):
            return True
        lease = await self.open_turn(conversation_id)  # a re-sent call finds itself holding it
        return lease is not None and lease.turn_id == turn_id and lease.owner == owner

    async def request_cancel(self, conversation_id: str, turn_id: str, now: float) -> bool:
        check_turn_ids(conversation_id, turn_id)
        table = self._leases
        statement = (
            sa.update(table)
            .where(
                *self._held(conversation_id, turn_id),
                table.c.status == _RUNNING,
                table.c.expires_at > now,
            )
            .values(cancel_requested=True)
        )
        return await self._applied(statement, "flagging a turn for cancellation")

    async def release_conversation(
        self, conversation_id: str, turn_id: str, owner: str | None, now: float
    ) -> bool:
        check_turn_ids(conversation_id, turn_id, owner)
        table = self._leases
        condition = (
            table.c.owner == owner
            if owner is not None
            else (table.c.status == _SUSPENDED) | (table.c.expires_at <= now)
        )
        statement = sa.delete(table).where(*self._held(conversation_id, turn_id), condition)
        return await self._applied(statement, "releasing a conversation")

    def _held(self, conversation_id: str, turn_id: str) -> tuple[Any, Any]:
        table = self._leases
        return table.c.conversation_id == conversation_id, table.c.turn_id == turn_id

    async def _applied(self, statement: Any, action: str) -> bool:
        return await self._store._port.changed(action, statement) == 1


def _lease(row: Any) -> ConversationLease:
    return decode_lease(
        row.conversation_id,
        row.turn_id,
        row.status,
        row.owner,
        row.expires_at,
        bool(row.cancel_requested),
        row.previous_turn_id,
    )


class SqlAgentTurnStore(BlockingAgentTurnStore):
    """The `AgentTurnStore` of a `SqlAgentStore` (blocking)."""
