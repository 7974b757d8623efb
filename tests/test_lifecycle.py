"""The data lifecycle on every store, blocking and async (SPEC §21): delete a conversation
(audited on the raw server), `clear` dropping the compression state, listing conversations,
Redis's idle expiry and SQL's purge."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from agentctx_fast import (
    AgentConversationBusyError,
    AiMessage,
    InvalidArgumentError,
    TurnStatus,
    UserMessage,
)
from agentctx_fast.compression.coordinator import CompressionState
from agentctx_fast.stores.turn_store import AgentTurnSnapshot
from store_fixtures import (
    every_store_kind,  # noqa: F401  (store_kind: every store)
    new_conversation_id,
)

LONG = 3600.0


def _base(kind: str) -> str:
    return kind.removeprefix("async-")


def _fill(store: Any, conversation_id: str, *, turns: int = 1) -> None:
    """Messages, a compression state quoting them, turn records and a suspended lease."""
    memory = store.chat_memory(conversation_id)
    memory.add_messages_if_absent(
        [UserMessage("secret order 42", message_id="u1"), AiMessage("noted", message_id="a1")]
    )
    summary = (UserMessage("summary: secret order 42", message_id="s1"),)
    state = CompressionState(conversation_id, summary=summary)
    assert store.compression_state_store().save(state, 0)
    turn_store = store.turn_store()
    for i in range(turns):
        snapshot = AgentTurnSnapshot(conversation_id, f"t{i}", "agent", TurnStatus.COMPLETED)
        assert turn_store.save_turn(snapshot, 0)
    assert (
        turn_store.acquire_conversation(conversation_id, "t-open", "me", LONG, time.time()) is None
    )
    assert turn_store.suspend_conversation(conversation_id, "t-open", "me")


def _quarantine(store: Any, kind: str, conversation_id: str) -> None:
    """A quarantined record of the conversation, written as the doctor does."""
    if kind in ("redis", "redis-cluster"):
        store.client.hset(store._key("quarantine", conversation_id), "1 message m9", b"bad")
    elif kind in ("sqlite", "postgresql"):
        from agentctx_fast.stores._sql_records import quarantine_table

        table = quarantine_table(store)
        with store.engine.begin() as connection:
            table.create(connection, checkfirst=True)
            connection.execute(
                table.insert().values(
                    conversation_id=conversation_id, kind="message", record_id="m9",
                    data=b"bad", problem="not JSON", quarantined_at=1.0,
                )
            )  # fmt: skip


def _raw_footprint(store: Any, kind: str, conversation_id: str) -> dict[str, int]:
    """What the server holds of the conversation: its keys, or its rows per table."""
    if kind in ("redis", "redis-cluster"):
        from agentctx_fast.stores._redis_io import conversation_tag

        tag = conversation_tag(conversation_id)
        pattern = "*" + "".join("\\" + c if c in "*?[]\\" else c for c in tag) + "*"
        return {key.decode(): 1 for key in store.client.scan_iter(match=pattern, count=1000)}
    if kind in ("sqlite", "postgresql"):
        import sqlalchemy as sa

        from agentctx_fast.stores._sql_records import quarantine_table

        tables = [*store._tables.metadata.sorted_tables, quarantine_table(store)]
        counts: dict[str, int] = {}
        with store.engine.connect() as connection:
            for table in {t.name: t for t in tables}.values():
                query = sa.select(sa.func.count()).where(table.c.conversation_id == conversation_id)
                counts[table.name] = int(connection.execute(query).scalar_one())
        return {name: count for name, count in counts.items() if count}
    footprint: dict[str, int] = {}
    if store.chat_memory(conversation_id).message_count():
        footprint["messages"] = 1
    if store.compression_state_store().load(conversation_id) is not None:
        footprint["compression"] = 1
    if store.turn_store().open_turn(conversation_id) is not None:
        footprint["lease"] = 1
    if conversation_id in store.list_conversations(prefix=conversation_id):
        footprint["listed"] = 1
    return footprint


def test_delete_removes_every_record_of_the_conversation_only(store: Any, store_kind: str) -> None:
    kind = _base(store_kind)
    gone, kept = new_conversation_id(), new_conversation_id()
    for conversation_id in (gone, kept):
        _fill(store, conversation_id, turns=3)
        _quarantine(store, kind, conversation_id)
    before = _raw_footprint(store, kind, gone)
    kept_before = _raw_footprint(store, kind, kept)
    # memory: messages, state, lease, listed; SQL: five tables; Redis: the message list, index
    # and visible positions, state, lease, turn ids, quarantine, three turn records
    assert len(before) == {"memory": 4, "sqlite": 5, "postgresql": 5}.get(kind, 10)

    assert store.delete_conversation(gone) is True

    assert _raw_footprint(store, kind, gone) == {}
    assert store.chat_memory(gone).get_messages() == []
    assert store.turn_store().load_turn(gone, "t0") is None
    assert store.compression_state_store().load(gone) is None
    assert _raw_footprint(store, kind, kept) == kept_before  # untouched
    assert len(kept_before) == len(before)
    assert len(store.chat_memory(kept).get_messages()) == 2
    assert store.turn_store().load_turn(kept, "t2") is not None
    assert store.delete_conversation(gone) is False  # nothing left: still fine
    # the conversation starts afresh
    assert store.turn_store().acquire_conversation(gone, "t9", "you", LONG, time.time()) is None


def test_delete_refuses_a_running_turn_with_a_live_lease_unless_forced(store: Any) -> None:
    conversation_id = new_conversation_id()
    store.chat_memory(conversation_id).add_message(UserMessage("hi", message_id="u1"))
    turns = store.turn_store()
    turns.acquire_conversation(conversation_id, "t1", "runner-a", LONG, time.time())

    with pytest.raises(AgentConversationBusyError) as refused:
        store.delete_conversation(conversation_id)
    assert refused.value.turn_id == "t1"
    assert store.chat_memory(conversation_id).message_count() == 1  # nothing deleted
    assert turns.open_turn(conversation_id) is not None

    assert store.delete_conversation(conversation_id, force=True) is True
    assert store.chat_memory(conversation_id).message_count() == 0
    assert turns.open_turn(conversation_id) is None


def test_delete_takes_a_conversation_whose_running_lease_expired(store: Any) -> None:
    conversation_id = new_conversation_id()
    store.chat_memory(conversation_id).add_message(UserMessage("hi", message_id="u1"))
    store.turn_store().acquire_conversation(conversation_id, "t1", "dead", 1.0, now=100.0)
    assert store.delete_conversation(conversation_id) is True
    assert store.turn_store().open_turn(conversation_id) is None


def test_clear_drops_the_compression_state_built_from_the_messages(store: Any) -> None:
    conversation_id = new_conversation_id()
    _fill(store, conversation_id)
    memory = store.chat_memory(conversation_id)
    memory.clear()
    assert memory.get_messages() == []
    assert store.compression_state_store().load(conversation_id) is None
    # the turn records and the lease are the runner's: clear leaves them
    assert store.turn_store().load_turn(conversation_id, "t0") is not None
    assert store.turn_store().open_turn(conversation_id) is not None


def test_list_conversations_pages_in_code_point_order(store: Any) -> None:
    head = f"list-{uuid.uuid4().hex}-"
    names = ["b", "B", "a{x}", "a%7D", "a", "Z-only-turn", "lease-only", "state-only"]
    ids = [head + name for name in names]
    for conversation_id in ids[:5]:
        store.chat_memory(conversation_id).add_message(UserMessage("hi", message_id="u1"))
    turn_only = AgentTurnSnapshot(ids[5], "t1", "agent", TurnStatus.COMPLETED)
    assert store.turn_store().save_turn(turn_only, 0)
    store.turn_store().acquire_conversation(ids[6], "t1", "me", LONG, time.time())
    assert store.compression_state_store().save(CompressionState(ids[7]), 0)
    store.chat_memory(head[:-1] + "+other").add_message(UserMessage("hi", message_id="u1"))

    expected = sorted(ids)
    assert store.list_conversations(prefix=head, limit=100) == expected
    pages: list[str] = []
    after = None
    while True:
        page = store.list_conversations(prefix=head, limit=3, after=after)
        assert len(page) <= 3
        if not page:
            break
        pages += page
        after = page[-1]
    assert pages == expected
    assert store.list_conversations(prefix=head + "a", limit=2) == [head + "a", head + "a%7D"]
    assert store.list_conversations(prefix=head, after=head + "a{x}") == expected[5:]
    assert head[:-1] + "+other" in store.list_conversations(prefix=head[:-1], limit=100)

    store.delete_conversation(ids[0])
    assert ids[0] not in store.list_conversations(prefix=head)


def test_list_conversations_checks_its_arguments(store: Any) -> None:
    for bad in ({"limit": 0}, {"limit": True}, {"prefix": 3}, {"after": ""}):
        with pytest.raises(InvalidArgumentError):
            store.list_conversations(**bad)
    with pytest.raises(InvalidArgumentError):
        store.delete_conversation("")


@pytest.mark.parametrize("kind", ["postgresql", "async-postgresql"])
def test_a_turn_taking_the_conversation_while_it_is_deleted_is_waited_for(
    kind: str, request: pytest.FixtureRequest
) -> None:
    """The lease check and the deletes are one step: a turn whose lease is being written (its
    transaction still open) makes the delete wait for it, then refuse; a check read before
    the deletes would find no lease and delete the turn's conversation under it."""
    import threading

    import sqlalchemy as sa

    from store_fixtures import make_store

    store = make_store(kind, request)
    conversation_id = new_conversation_id()
    store.chat_memory(conversation_id).add_message(UserMessage("hi", message_id="u1"))
    leases = store._tables.leases
    outcome: list[BaseException | bool] = []

    def delete() -> None:
        try:
            outcome.append(store.delete_conversation(conversation_id))
        except BaseException as error:  # reported below
            outcome.append(error)

    def delete_waits_on_a_lock(watcher: Any) -> bool:
        query = sa.text(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND datname = current_database()"
        )
        waiting = int(watcher.execute(query).scalar_one()) > 0
        watcher.commit()  # the activity view is a snapshot per transaction
        return waiting

    try:
        with store.engine.connect() as turn, store.engine.connect() as watcher:
            taking = turn.begin()
            turn.execute(
                leases.insert().values(
                    conversation_id=conversation_id, turn_id="t1", status="running",
                    owner="runner-a", expires_at=time.time() + LONG, cancel_requested=False,
                )
            )  # fmt: skip
            deleting = threading.Thread(target=delete)
            deleting.start()
            deadline = time.monotonic() + 30
            while deleting.is_alive() and not delete_waits_on_a_lock(watcher):
                assert time.monotonic() < deadline
                time.sleep(0.01)
            assert deleting.is_alive()  # it waits for the turn's transaction …
            taking.commit()
        deleting.join(60)
        assert isinstance(outcome[0], AgentConversationBusyError)  # … then finds it running
        assert store.chat_memory(conversation_id).message_count() == 1
    finally:
        store.close()


def test_delete_refuses_a_force_that_is_not_a_bool(store: Any) -> None:
    """``force`` overrides the busy check: a value that is not True or False (a string from
    a request, say) is an argument error, never read as forcing."""
    conversation_id = new_conversation_id()
    store.chat_memory(conversation_id).add_message(UserMessage("hi", message_id="u1"))
    store.turn_store().acquire_conversation(conversation_id, "t1", "runner-a", LONG, time.time())
    for bad in ("false", 1, None):
        with pytest.raises(InvalidArgumentError, match="force must be a bool"):
            store.delete_conversation(conversation_id, force=bad)
    assert store.chat_memory(conversation_id).message_count() == 1
    assert store.turn_store().open_turn(conversation_id) is not None
