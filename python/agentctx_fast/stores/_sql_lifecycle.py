"""The data lifecycle of the SQL stores (SPEC §21): delete, clear, list and purge conversations.

Each delete is one transaction that first holds the conversation's lease row: it inserts a
placeholder row where there is none (``INSERT … ON CONFLICT DO NOTHING``, never committed:
the transaction deletes it) and locks the rows (``SELECT … FOR UPDATE``; SQLite holds its
write lock from that first insert). A turn taking the conversation meanwhile waits on that
row, so the lease check and the deletes are one step: no turn starts between them.

Activity: messages and turn records carry ``written_at`` (the writer's epoch seconds, set by
the write's own statement, no extra round trip). A conversation's last activity is the newest
of them; rows written before the column existed have none, so a conversation with no dated
row is never purged (it gets a date with its next write).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agentctx_fast.core.turns import TurnStatus
from agentctx_fast.errors import SerializationError
from agentctx_fast.stores._sql_io import sa
from agentctx_fast.stores._sql_records import quarantine_table
from agentctx_fast.stores.lifecycle import Purged
from agentctx_fast.stores.turn_store import OPEN_STATUSES, ConversationLease, busy_error

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from agentctx_fast.stores.sql import _SqlStoreBase

_HELD = "deleting"  # the status of a placeholder lease row (never committed)
_RUNNING = TurnStatus.RUNNING.value


def _insert(store: _SqlStoreBase, table: sa.Table) -> Any:
    insert: Any
    if store._dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert(table)


def _hold_leases(
    store: _SqlStoreBase, connection: Connection, conversation_ids: Sequence[str]
) -> tuple[int, dict[str, Any]]:
    """Lock the lease rows of ``conversation_ids`` for the transaction, a placeholder where
    there is none; the placeholders inserted and the rows locked, by conversation (a
    placeholder's status is ``_HELD``). A lease row deleted between the insert and the lock
    (a release) gets its placeholder on the next round while the transaction holds no lease
    row (a delete's one conversation): a runner taking it meanwhile waits for this
    transaction. Holding others, it is left unheld: waiting for another purge's placeholder
    while holding rows that purge waits for deadlocks the two."""
    leases = store._tables.leases
    inserted, held = 0, dict[str, Any]()
    missing = sorted(set(conversation_ids))  # every job locks in one order
    while missing and not held:
        rows = [
            {"conversation_id": cid, "turn_id": "", "status": _HELD, "owner": None,
             "expires_at": None, "cancel_requested": False, "previous_turn_id": None}
            for cid in missing
        ]  # fmt: skip
        insert = (
            _insert(store, leases)
            .values(rows)
            .on_conflict_do_nothing(index_elements=["conversation_id"])
            .returning(leases.c.conversation_id)
        )
        inserted += len(connection.execute(insert).all())
        columns = (leases.c.conversation_id, leases.c.turn_id, leases.c.status, leases.c.expires_at)
        query = (
            sa.select(*columns)
            .where(leases.c.conversation_id.in_(missing))
            .order_by(leases.c.conversation_id)
            .with_for_update()
        )
        held.update({row.conversation_id: row for row in connection.execute(query)})
        missing = [cid for cid in missing if cid not in held]
    return inserted, held


def _running(conversation_id: str, lease: Any, now: float) -> bool:
    """Whether ``lease`` (a row) is a running turn's, live at ``now``."""
    if lease is None or lease.status != _RUNNING:
        return False
    if lease.expires_at is None:
        raise SerializationError(
            f"conversation {conversation_id!r}, lease: a running lease without an expiry; "
            "delete with force=True"
        )
    return bool(lease.expires_at > now)


def _tables(store: _SqlStoreBase, connection: Connection) -> list[sa.Table]:
    """The tables holding a conversation's rows, the quarantine once it exists."""
    t = store._tables
    tables = [t.messages, t.turns, t.compression_states]
    quarantine = quarantine_table(store)
    if sa.inspect(connection).has_table(quarantine.name):
        tables.append(quarantine)
    return tables


async def delete_conversation(
    store: _SqlStoreBase, conversation_id: str, force: bool, now: float
) -> bool:
    """One transaction: the lease held, checked, then every row of the conversation deleted;
    True when there was any."""
    found: list[bool] = []

    def work(connection: Connection) -> None:
        inserted, held = _hold_leases(store, connection, [conversation_id])
        lease = held.get(conversation_id)
        if lease is not None and not force and _running(conversation_id, lease, now):
            turn_id = str(lease.turn_id)
            open_turn = ConversationLease(conversation_id, turn_id, TurnStatus.RUNNING, None, None)
            raise busy_error(conversation_id, open_turn)
        removed = -inserted  # the placeholder is no row of the conversation
        for table in [*_tables(store, connection), store._tables.leases]:
            statement = sa.delete(table).where(table.c.conversation_id == conversation_id)
            removed += int(connection.execute(statement).rowcount)
        found.append(removed > 0)

    await store._port.run("deleting a conversation", work)
    return found[0]


async def clear(store: _SqlStoreBase, conversation_id: str) -> None:
    """The conversation's messages and compression state, in one transaction."""
    t = store._tables

    def work(connection: Connection) -> None:
        for table in (t.messages, t.compression_states):
            connection.execute(sa.delete(table).where(table.c.conversation_id == conversation_id))

    await store._port.run("clearing messages", work)


def _ordered(store: _SqlStoreBase, column: Any) -> Any:
    """``column`` compared in code-point order (PostgreSQL: the ``"C"`` collation)."""
    return column.collate("C") if store._dialect == "postgresql" else column


async def list_conversations(
    store: _SqlStoreBase, prefix: str, limit: int, after: str | None
) -> list[str]:
    """A page of the ids with messages, turn records, a lease or a compression state."""
    t = store._tables
    parts = []
    for table in (t.messages, t.turns, t.leases, t.compression_states):
        column = table.c.conversation_id
        part = sa.select(column.label("conversation_id"))
        if prefix:
            part = part.where(sa.func.substr(column, 1, len(prefix)) == prefix)
        if after is not None:
            part = part.where(_ordered(store, column) > after)
        parts.append(part)
    ids = sa.union(*parts).subquery()
    query = sa.select(ids.c.conversation_id).order_by(_ordered(store, ids.c.conversation_id))
    rows = await store._port.rows("listing conversations", query.limit(limit))
    return [str(row[0]) for row in rows]


def _idle(store: _SqlStoreBase, cutoff: float, after: str | None, batch_size: int) -> Any:
    """The next ``batch_size`` conversations (after ``after``) whose newest dated message or
    turn record is older than ``cutoff``."""
    t = store._tables
    activity = sa.union_all(
        *(
            sa.select(
                table.c.conversation_id, sa.func.max(table.c.written_at).label("at")
            ).group_by(table.c.conversation_id)
            for table in (t.messages, t.turns)
        )
    ).subquery()
    column = activity.c.conversation_id
    query = sa.select(column).group_by(column).having(sa.func.max(activity.c.at) < cutoff)
    if after is not None:
        query = query.where(_ordered(store, column) > after)
    return query.order_by(_ordered(store, column)).limit(batch_size)


async def purge(
    store: _SqlStoreBase,
    cutoff: float,
    keep_turn_records: int | None,
    batch_size: int,
    now: float,
) -> Purged:
    """Delete the conversations idle since ``cutoff``, ``batch_size`` at a time (one
    transaction a batch, one ``DELETE`` a table), but those a turn runs in under a live
    lease; then prune finished turn records beyond ``keep_turn_records`` per conversation."""
    removed: list[int] = []
    after: str | None = None
    while True:
        query = _idle(store, cutoff, after, batch_size)
        batch = [str(row[0]) for row in await store._port.rows("finding idle conversations", query)]
        if not batch:
            break
        after = batch[-1]  # the ones skipped stay behind: the next batch starts after them

        def work(connection: Connection, batch: list[str] = batch) -> None:
            removed.append(_purge_batch(store, connection, batch, cutoff, now))

        await store._port.run("purging conversations", work)
        if len(batch) < batch_size:
            break
    pruned = 0
    if keep_turn_records is not None:
        pruned = await _prune_turns(store, keep_turn_records, batch_size)
    return Purged(sum(removed), pruned)


def _purge_batch(
    store: _SqlStoreBase, connection: Connection, batch: list[str], cutoff: float, now: float
) -> int:
    """Delete ``batch`` but its conversations now running, written since ``cutoff`` (looked
    at again with their leases held) or whose lease row it could not hold; how many were
    deleted."""
    t = store._tables
    _, held = _hold_leases(store, connection, batch)
    # Not held: its lease row went before the purge could lock it (a release, another purge);
    # a lease taken since is not the purge's to delete. A later purge looks at it again.
    skipped = {cid for cid in batch if cid not in held or _running_or_corrupt(held[cid], now)}
    skipped |= _appending(store, connection, batch)
    # Looked at again: what another purge or a delete removed before these rows were held
    # is not counted, and what was written since ``cutoff`` stays.
    present: set[str] = set()
    for table in (t.messages, t.turns):
        newest = sa.func.max(table.c.written_at)
        activity = (
            sa.select(table.c.conversation_id, newest)
            .where(table.c.conversation_id.in_(batch))
            .group_by(table.c.conversation_id)
        )
        for cid, at in connection.execute(activity):
            present.add(str(cid))
            if at is not None and at >= cutoff:
                skipped.add(str(cid))
    chosen = [cid for cid in batch if cid not in skipped]
    for table in _tables(store, connection):
        connection.execute(sa.delete(table).where(table.c.conversation_id.in_(chosen)))
    leases = t.leases
    connection.execute(
        sa.delete(leases).where(
            leases.c.conversation_id.in_(batch),
            leases.c.conversation_id.in_(chosen) | (leases.c.status == _HELD),
        )
    )
    return len(present.intersection(chosen))


def _appending(store: _SqlStoreBase, connection: Connection, batch: list[str]) -> set[str]:
    """PostgreSQL: the conversations of ``batch`` an append is writing now (their append lock
    is held: `_Tables.append_lock`). The purge takes the others' append locks for its
    transaction, after their lease rows: an append that comes meanwhile waits for the purge
    and then starts the conversation anew, and one under way keeps its conversation, so no
    append is deleted once it has answered. Never waited for: a fenced append may hold the
    lock while it waits for a lease row the purge holds. SQLite runs one writer at a time."""
    if store._dialect != "postgresql":
        return set()
    from sqlalchemy.dialects.postgresql import ARRAY

    keys = sa.func.unnest(sa.bindparam("keys", type_=ARRAY(sa.BigInteger)))
    key = keys.column_valued("key")
    busy = sa.select(key).where(sa.not_(sa.func.pg_try_advisory_xact_lock(key)))
    locks = {cid: store._tables.append_lock(cid) for cid in batch}
    taken = {row.key for row in connection.execute(busy, {"keys": sorted(set(locks.values()))})}
    return {cid for cid, lock in locks.items() if lock in taken}


def _running_or_corrupt(lease: Any, now: float) -> bool:
    """A purge keeps a running lease that is live, or whose expiry is missing."""
    return bool(lease.status == _RUNNING and (lease.expires_at is None or lease.expires_at > now))


async def _prune_turns(store: _SqlStoreBase, keep: int, batch_size: int) -> int:
    """Delete finished turn records beyond the newest ``keep`` of each conversation (newest:
    by ``written_at``, undated ones oldest), ``batch_size`` conversations per statement, in
    the order of their ids: each statement ranks its own conversations' records only, so a
    purge reads each record once (ranking the whole table for each statement made a large
    backlog take time quadratic in its size)."""
    turns = store._tables.turns
    column = turns.c.conversation_id
    pruned, after = 0, None
    while True:
        page = sa.select(column).distinct()
        if after is not None:
            page = page.where(column > after)
        query = page.order_by(column).limit(batch_size)
        batch = [row[0] for row in await store._port.rows("finding turn records", query)]
        if not batch:
            return pruned
        ranked = (
            sa.select(
                column,
                turns.c.turn_id,
                sa.func.row_number()
                .over(
                    partition_by=column,
                    order_by=(turns.c.written_at.desc().nulls_last(), turns.c.turn_id.desc()),
                )
                .label("rank"),
            )
            .where(
                column.in_(batch),
                turns.c.status.not_in([status.value for status in OPEN_STATUSES]),
            )
            .subquery()
        )
        victims = sa.select(ranked.c.conversation_id, ranked.c.turn_id).where(ranked.c.rank > keep)
        statement = sa.delete(turns).where(sa.tuple_(column, turns.c.turn_id).in_(victims))
        pruned += await store._port.changed("pruning turn records", statement)
        if len(batch) < batch_size:
            return pruned
        after = batch[-1]
