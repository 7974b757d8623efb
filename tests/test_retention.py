"""Retention (SPEC §21): Redis's idle expiry renewed by every write, read from the real server
(no sleeping: the expiry is shortened by ``PEXPIRE`` and a write must bring it back), and the
SQL store's ``purge`` with chosen ``written_at`` dates and ``older_than``."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from agentctx_fast import AiMessage, InvalidArgumentError, TurnStatus, UserMessage
from agentctx_fast.compression.coordinator import CompressionState
from agentctx_fast.stores.turn_store import AgentTurnSnapshot, Fence
from store_fixtures import make_store, new_conversation_id

TTL = 1000.0  # seconds
SHORT_MS = 5_000
LONG = 3600.0

REDIS_KINDS = ("redis", "redis-cluster", "async-redis", "async-redis-cluster")
SQL_KINDS = ("sqlite", "postgresql", "async-sqlite", "async-postgresql")


@pytest.fixture(params=REDIS_KINDS)
def expiring_store(request: pytest.FixtureRequest) -> Iterator[Any]:
    store = make_store(str(request.param), request, ttl_seconds=TTL)
    try:
        yield store
    finally:
        store.close()


def _keys(store: Any, conversation_id: str, turn_ids: tuple[str, ...] = ()) -> list[str]:
    messages = store._key("conv", conversation_id)
    keys = [messages + ":r", messages + ":i", messages + ":vp"]
    keys += [store._key(kind, conversation_id) for kind in ("compression", "lease", "turns")]
    return keys + [store._key("turn", conversation_id, turn_id) for turn_id in turn_ids]


def _shorten(store: Any, keys: list[str]) -> None:
    for key in keys:
        assert store.client.pexpire(key, SHORT_MS)


def _renewed(store: Any, keys: list[str]) -> None:
    for key in keys:
        assert SHORT_MS < store.client.pttl(key) <= TTL * 1000, key


def test_every_key_of_a_conversation_gets_the_idle_expiry(expiring_store: Any) -> None:
    store, conversation_id = expiring_store, new_conversation_id()
    memory = store.chat_memory(conversation_id)
    memory.add_message(UserMessage("hi", message_id="u1"))
    state = CompressionState(conversation_id)
    assert store.compression_state_store().save(state, 0)
    turns = store.turn_store()
    turns.acquire_conversation(conversation_id, "t1", "me", LONG, time.time())
    snapshot = AgentTurnSnapshot(conversation_id, "t1", "agent", TurnStatus.RUNNING)
    assert turns.save_turn(snapshot, 0, Fence("t1", "me"))
    _renewed(store, _keys(store, conversation_id, ("t1",)))


@pytest.mark.parametrize("write", ["append", "batch", "update", "state", "turn", "lease", "fenced"])
def test_each_write_renews_the_whole_conversation(expiring_store: Any, write: str) -> None:
    store, conversation_id = expiring_store, new_conversation_id()
    memory, turns = store.chat_memory(conversation_id), store.turn_store()
    first = UserMessage("hi", message_id="u1")
    memory.add_message(first)
    state = CompressionState(conversation_id)
    assert store.compression_state_store().save(state, 0)
    finished = AgentTurnSnapshot(conversation_id, "t0", "agent", TurnStatus.COMPLETED)
    assert turns.save_turn(finished, 0)
    turns.acquire_conversation(conversation_id, "t1", "me", LONG, time.time())
    snapshot = AgentTurnSnapshot(conversation_id, "t1", "agent", TurnStatus.RUNNING)
    assert turns.save_turn(snapshot, 0)
    # the conversation's keys and the record of the turn its lease names
    renewed = [*_keys(store, conversation_id), store._key("turn", conversation_id, "t1")]
    finished_key = store._key("turn", conversation_id, "t0")
    _shorten(store, [*renewed, finished_key])

    if write == "append":
        memory.add_message(AiMessage("hello", message_id="a1"))
    elif write == "batch":
        memory.add_messages_if_absent([AiMessage("a", message_id="a1"), first])
    elif write == "update":
        memory.update_message(UserMessage("hi!", message_id="u1"), 0)
    elif write == "state":
        assert store.compression_state_store().save(state, 1)
    elif write == "turn":
        assert turns.save_turn(snapshot, 1)
    elif write == "lease":
        turns.renew_lease(conversation_id, "t1", "me", LONG, time.time())
    else:
        memory.fenced(Fence("t1", "me")).add_message(AiMessage("a", message_id="a1"))
    _renewed(store, renewed)
    assert 0 < store.client.pttl(finished_key) <= SHORT_MS  # a finished turn: its own writes


def test_ttl_seconds_is_checked_and_none_keeps_keys_for_ever(
    request: pytest.FixtureRequest,
) -> None:
    for bad in (0, -1.0, float("nan"), "60", True):
        with pytest.raises(InvalidArgumentError):
            make_store("redis", request, ttl_seconds=bad)
    store = make_store("redis", request, ttl_seconds=None)
    try:
        conversation_id = new_conversation_id()
        store.chat_memory(conversation_id).add_message(UserMessage("hi", message_id="u1"))
        assert store.client.pttl(store._key("conv", conversation_id) + ":r") == -1
    finally:
        store.close()


# -- SQL purge ----------------------------------------------------------------------------


@pytest.fixture(params=SQL_KINDS)
def sql_store(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A store on tables of its own (a purge spans every conversation of its tables)."""
    store = make_store(str(request.param), request, table_prefix=f"p{uuid.uuid4().hex[:10]}_")
    try:
        yield store
    finally:
        store.close()


def _date(store: Any, conversation_id: str, written_at: float | None) -> None:
    """Every message and turn record of the conversation as written at ``written_at``."""
    import sqlalchemy as sa

    with store.engine.begin() as connection:
        for table in (store._tables.messages, store._tables.turns):
            connection.execute(
                sa.update(table)
                .where(table.c.conversation_id == conversation_id)
                .values(written_at=written_at)
            )


def _conversation(store: Any, conversation_id: str, written_at: float | None) -> None:
    store.chat_memory(conversation_id).add_message(UserMessage("hi", message_id="u1"))
    snapshot = AgentTurnSnapshot(conversation_id, "t0", "agent", TurnStatus.COMPLETED)
    assert store.turn_store().save_turn(snapshot, 0)
    assert store.compression_state_store().save(CompressionState(conversation_id), 0)
    _date(store, conversation_id, written_at)


def test_purge_deletes_idle_conversations_in_batches(sql_store: Any) -> None:
    store = sql_store
    idle = [f"idle-{i}" for i in range(5)]
    for conversation_id in idle:
        _conversation(store, conversation_id, 1_000.0)
    _conversation(store, "recent", 3_000.0)
    _conversation(store, "legacy", None)  # rows from before written_at: never purged
    _conversation(store, "half", 1_000.0)
    store.chat_memory("half").add_message(AiMessage("new", message_id="a1"))  # dated now
    _conversation(store, "running", 1_000.0)
    store.turn_store().acquire_conversation("running", "t1", "me", LONG, time.time())
    _conversation(store, "dead", 1_000.0)
    store.turn_store().acquire_conversation("dead", "t1", "gone", 1.0, now=100.0)

    purged = store.purge(2_000.0, batch_size=2)

    assert purged.conversations == 6  # the five idle ones and "dead"; batches of two
    assert purged.turn_records == 0
    listed = store.list_conversations()
    assert listed == ["half", "legacy", "recent", "running"]
    for conversation_id in [*idle, "dead"]:
        assert store.chat_memory(conversation_id).message_count() == 0
        assert store.turn_store().load_turn(conversation_id, "t0") is None
        assert store.compression_state_store().load(conversation_id) is None
        assert store.turn_store().open_turn(conversation_id) is None
    assert store.turn_store().open_turn("running") is not None
    assert store.chat_memory("running").message_count() == 1
    assert store.purge(2_000.0).conversations == 0


def test_purge_prunes_finished_turn_records_beyond_the_newest(sql_store: Any) -> None:
    store = sql_store
    turns = store.turn_store()
    for conversation_id in ("c1", "c2"):
        store.chat_memory(conversation_id).add_message(UserMessage("hi", message_id="u1"))
        for i in range(4):
            status = TurnStatus.SUSPENDED if i == 0 else TurnStatus.COMPLETED
            assert turns.save_turn(AgentTurnSnapshot(conversation_id, f"t{i}", "a", status), 0)
    import sqlalchemy as sa

    table = store._tables.turns
    with store.engine.begin() as connection:  # t0 oldest … t3 newest; c2's t1 undated
        for i in range(4):
            connection.execute(
                sa.update(table).where(table.c.turn_id == f"t{i}").values(written_at=1_000.0 + i)
            )
        connection.execute(
            sa.update(table)
            .where(table.c.conversation_id == "c2", table.c.turn_id == "t3")
            .values(written_at=None)
        )

    purged = store.purge(0.0, keep_turn_records=1, batch_size=1)

    assert purged.conversations == 0
    assert purged.turn_records == 4
    kept = {
        (cid, tid)
        for cid in ("c1", "c2")
        for tid in ("t0", "t1", "t2", "t3")
        if turns.load_turn(cid, tid) is not None
    }
    # the suspended t0 stays (open); the newest finished one stays (c2: t3 undated is oldest)
    assert kept == {("c1", "t0"), ("c1", "t3"), ("c2", "t0"), ("c2", "t2")}


def test_purge_checks_its_arguments(sql_store: Any) -> None:
    from datetime import datetime

    for older_than, options in (
        ("yesterday", {}),
        (datetime(2024, 1, 1), {}),  # naive
        (float("inf"), {}),
        (0.0, {"keep_turn_records": -1}),
        (0.0, {"batch_size": 0}),
    ):
        with pytest.raises(InvalidArgumentError):
            sql_store.purge(older_than, **options)


def test_initialize_adds_written_at_to_tables_made_before_it(
    request: pytest.FixtureRequest,
) -> None:
    """An existing database keeps working: `initialize` adds the column, old rows are undated."""
    import sqlalchemy as sa

    prefix = f"m{uuid.uuid4().hex[:10]}_"
    store = make_store("sqlite", request, table_prefix=prefix)
    try:
        store.chat_memory("old").add_message(UserMessage("hi", message_id="u1"))
        with store.engine.begin() as connection:  # as an earlier version made them
            for table in ("messages", "turns"):
                connection.execute(sa.text(f"ALTER TABLE {prefix}{table} DROP COLUMN written_at"))
        store.schema.initialize()
        assert store.chat_memory("old").message_count() == 1
        store.chat_memory("new").add_message(UserMessage("hi", message_id="u1"))
        assert store.purge(time.time() + 60).conversations == 1  # "new"; "old" is undated
        assert store.list_conversations() == ["old"]
    finally:
        store.close()


def test_purge_refuses_a_batch_too_large_for_one_statement(sql_store: Any) -> None:
    """A batch is one statement's parameters (seven per conversation when its lease row is
    held): past the bound, PostgreSQL refuses the statement (at most 65,535 parameters) with
    an error that reads as "retry later". The bound is checked first; nothing is deleted."""
    _conversation(sql_store, "idle", 1_000.0)
    with pytest.raises(InvalidArgumentError, match="batch_size must be an int from 1 to 1000"):
        sql_store.purge(2_000.0, batch_size=10_000)
    assert sql_store.list_conversations() == ["idle"]
    assert sql_store.purge(2_000.0, batch_size=1_000).conversations == 1
