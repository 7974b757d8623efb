"""An append is atomic (SPEC §10: ``add_messages_if_absent`` is "one atomic write"): its
messages are stored together, in its order, and no other writer's message falls between them,
on every store.

SQLite and Redis run one append at a time by construction (the database's write lock, a
script). PostgreSQL runs inserts concurrently and hands out ``seq`` row by row, so there the
test holds an append up mid-way for real: another transaction inserts, uncommitted, one of
the batch's ids, and the batch waits on that row after taking ``seq`` for the rows before it.
Before the append lock, another writer's messages landed in the gap. A purge of idle
conversations leaves alone one an append is writing at that moment.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest

from agentctx_fast import AiMessage, Fence, Message, UserMessage
from store_fixtures import (
    every_store_kind,  # noqa: F401  (store_kind: every store)
    make_store,
    new_conversation_id,
    store_url,
)


def batch(prefix: str, size: int) -> list[Message]:
    return [AiMessage(f"{prefix} step {i}", message_id=f"{prefix}-{i}") for i in range(size)]


def assert_whole(stored: list[str], appended: list[list[Message]]) -> None:
    """Every append's ids stand together in ``stored``, in the append's order."""
    position = {message_id: index for index, message_id in enumerate(stored)}
    for messages in appended:
        places = [position[m.message_id] for m in messages]
        assert places == list(range(places[0], places[0] + len(places))), (
            f"{messages[0].message_id}…: stored at {places}"
        )


def test_concurrent_appends_stay_whole(store: Any) -> None:
    """Eight writers append batches and single messages to one conversation at once."""
    memory = store.chat_memory(new_conversation_id())
    appended = [batch(f"w{writer}b{n}", 25) for writer in range(8) for n in range(4)]

    def write(writer: int) -> None:
        for n, messages in enumerate(appended[writer * 4 : writer * 4 + 4]):
            assert memory.add_messages_if_absent(messages) == [True] * len(messages)
            assert memory.add_message_if_absent(UserMessage("next", message_id=f"w{writer}u{n}"))

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(write, range(8)))
    stored = [m.message_id for m in memory.get_messages()]
    assert len(stored) == 8 * 4 * 26
    assert_whole(stored, appended)


@dataclass
class Postgres:
    """A PostgreSQL store (blocking, or async behind the bridge) on tables of its own (a purge
    sees only this test's conversations), and an engine of the test's own on its database, to
    hold rows and watch who waits."""

    store: Any
    engine: Any
    prefix: str

    def table(self, name: str) -> Any:
        import sqlalchemy as sa

        return sa.Table(f"{self.prefix}{name}", sa.MetaData(), autoload_with=self.engine)


@pytest.fixture(params=["postgresql", "async-postgresql"])
def postgres(request: pytest.FixtureRequest) -> Iterator[Postgres]:
    import sqlalchemy as sa

    prefix = f"p{uuid.uuid4().hex[:10]}_"
    store = make_store(str(request.param), request, table_prefix=prefix)
    engine = sa.create_engine(str(store_url("postgresql", request)))
    try:
        yield Postgres(store, engine, prefix)
    finally:
        store.close()
        engine.dispose()


def started(outcomes: dict[str, Any], name: str, call: Any) -> threading.Thread:
    """A thread running ``call``, its result or error put in ``outcomes[name]``."""

    def target() -> None:
        try:
            outcomes[name] = call()
        except BaseException as error:  # reported by the test
            outcomes[name] = error

    thread = threading.Thread(target=target)
    thread.start()
    return thread


def waiting(watcher: Any, query_start: str, event: str) -> int:
    """How many sessions whose statement starts with ``query_start`` wait for a lock of kind
    ``event`` (``transactionid``: a row; ``advisory``: the append lock)."""
    import sqlalchemy as sa

    query = sa.text(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
        "AND datname = current_database() AND query LIKE :start AND wait_event = :event"
    )
    count = int(watcher.execute(query, {"start": query_start + "%", "event": event}).scalar())
    watcher.commit()  # the activity view is a snapshot per transaction
    return count


def until(condition: Any) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def until_waiting(watcher: Any, query_start: str, event: str) -> None:
    """Until a session whose statement starts with ``query_start`` waits for a lock of kind
    ``event``."""
    until(lambda: waiting(watcher, query_start, event) > 0)


def held_row(connection: Any, table: Any, conversation_id: str, message_id: str) -> Any:
    """A transaction on ``connection`` that has inserted, uncommitted, the message row
    ``message_id``: an append of that id waits on it, after its rows before it took their
    ``seq``."""
    transaction = connection.begin()
    connection.execute(
        table.insert().values(
            conversation_id=conversation_id, message_id=message_id, kind="AiMessage",
            model_visible=True, version=0, data=b"{}",
        )
    )  # fmt: skip
    return transaction


def lock_rows(connection: Any, table: Any, *where: Any) -> Any:
    """A transaction on ``connection`` holding ``table``'s rows ``where`` (``FOR UPDATE``)."""
    import sqlalchemy as sa

    transaction = connection.begin()
    connection.execute(sa.select(table).where(*where).with_for_update())
    return transaction


def taken_anew(outcomes: dict[str, Any], turns: Any, conversation_id: str) -> None:
    """``runner-b`` takes the conversation as turn ``t1``, in a thread: should the purge or
    delete held up hold the conversation's lease row after all (a placeholder), the take
    waits for it, and the test fails here instead of hanging."""

    def take() -> Any:
        return turns.acquire_conversation(conversation_id, "t1", "runner-b", 600.0, time.time())

    started(outcomes, "take", take).join(30)
    assert outcomes.get("take", "waiting") is None, outcomes.get("take", "waiting")


def suspended_and_idle(store: Any) -> tuple[str, str, Any]:
    """Two conversations of one message each, idle by any later cutoff: the first's lease
    suspended (turn ``t0`` of ``runner-a``), the second with none; and the store's turns."""
    cid, idle = new_conversation_id(), new_conversation_id()
    for each in (cid, idle):
        assert store.chat_memory(each).add_message_if_absent(UserMessage("hi", message_id="u1"))
    turns = store.turn_store()
    assert turns.acquire_conversation(cid, "t0", "runner-a", 600.0, time.time()) is None
    assert turns.suspend_conversation(cid, "t0", "runner-a")
    return cid, idle, turns


def released_under_the_job(postgres: Postgres, watcher: Any, held: Any, cid: str) -> None:
    """Once a delete or purge waits to lock ``cid``'s lease row (``held`` locks it), delete the
    row (a release) and let go; then until the job waits in its deletes of the messages."""
    import sqlalchemy as sa

    leases = postgres.table("conversation_leases")
    until_waiting(watcher, f"SELECT {postgres.prefix}conversation_leases", "transactionid")
    held.connection.execute(sa.delete(leases).where(leases.c.conversation_id == cid))
    held.commit()  # the lease is gone before the job could lock it
    until_waiting(watcher, f"DELETE FROM {postgres.prefix}messages", "transactionid")


@pytest.mark.parametrize("fenced", [False, True], ids=["plain", "fenced"])
def test_an_append_held_up_mid_way_stays_whole(postgres: Postgres, fenced: bool) -> None:
    """A batch of ten waits on its sixth row; a batch of three and a single message written
    meanwhile wait for it, and are stored after it, never inside it."""
    store, engine = postgres.store, postgres.engine
    table = postgres.table("messages")
    cid = new_conversation_id()
    memory = store.chat_memory(cid)
    if fenced:
        turns = store.turn_store()
        assert turns.acquire_conversation(cid, "t1", "runner-a", 600.0, time.time()) is None
        held_up = memory.fenced(Fence("t1", "runner-a"))
    else:
        held_up = memory
    held, other = batch("held", 10), batch("other", 3)
    single = UserMessage("meanwhile", message_id="single")
    outcomes: dict[str, Any] = {}
    insert = f"INSERT INTO {table.name}"

    with engine.connect() as blocker, engine.connect() as watcher:
        holding = held_row(blocker, table, cid, "held-5")
        first = started(outcomes, "held", lambda: held_up.add_messages_if_absent(held))
        until_waiting(watcher, insert, "transactionid")  # the batch waits on its sixth row
        others = [
            started(outcomes, "other", lambda: memory.add_messages_if_absent(other)),
            started(outcomes, "single", lambda: memory.add_message_if_absent(single)),
        ]
        # Each waits for the batch now; before the append lock they went straight in.
        until(
            lambda: (
                waiting(watcher, insert, "advisory") == 2
                or not any(thread.is_alive() for thread in others)
            )
        )
        holding.rollback()
    for thread in [first, *others]:
        thread.join(60)
    assert outcomes == {"held": [True] * 10, "other": [True] * 3, "single": True}
    stored = [m.message_id for m in memory.get_messages()]
    assert sorted(stored) == sorted(m.message_id for m in [*held, *other, single])
    assert_whole(stored, [held, other])
    assert stored.index("single") not in range(stored.index("held-0"), stored.index("held-9"))


def test_a_purge_keeps_a_conversation_an_append_is_writing(postgres: Postgres) -> None:
    """A conversation idle by the purge's clock gets an append, held up mid-way on the
    server; the purge runs meanwhile. Before the purge took the append lock, it deleted the
    conversation's stored messages under the append, and the conversation was left with the
    appended batch alone."""
    store, engine = postgres.store, postgres.engine
    table = postgres.table("messages")
    cid = new_conversation_id()
    memory = store.chat_memory(cid)
    earlier = [UserMessage("hello", message_id="u1"), AiMessage("hi", message_id="a1")]
    assert memory.add_messages_if_absent(earlier) == [True, True]
    appended = batch("held", 10)
    outcomes: dict[str, Any] = {}

    with engine.connect() as blocker, engine.connect() as watcher:
        holding = held_row(blocker, table, cid, "held-5")
        append = started(outcomes, "append", lambda: memory.add_messages_if_absent(appended))
        until_waiting(watcher, f"INSERT INTO {table.name}", "transactionid")  # on held-5
        # Every row is older than this cutoff: only the append under way can keep it.
        purged = store.purge(time.time() + 3_600)
        holding.rollback()
    append.join(60)
    assert outcomes == {"append": [True] * 10}
    assert purged.conversations == 0
    stored = [m.message_id for m in memory.get_messages()]
    assert stored == [m.message_id for m in [*earlier, *appended]]


def test_a_lease_released_while_a_delete_waits_for_it_is_still_held(postgres: Postgres) -> None:
    """The conversation's lease row is deleted (a release) while ``delete_conversation`` waits
    to lock it. The delete holds the conversation anyway (a placeholder lease row), so a
    runner taking it meanwhile waits until the delete has deleted the conversation, and then
    takes it: no turn starts between the delete's lease check and its deletes. Before, the
    delete held no row of that conversation: the runner took it under the delete, which
    deleted the running turn's live lease with the messages. (A purge leaves such a
    conversation alone instead: `test_a_purge_leaves_alone_a_lease_taken_while_it_runs`.)"""
    store, engine = postgres.store, postgres.engine
    leases = postgres.table("conversation_leases")
    messages = postgres.table("messages")
    cid, idle, turns = suspended_and_idle(store)
    outcomes: dict[str, Any] = {}

    def take() -> Any:
        return turns.acquire_conversation(cid, "t1", "runner-b", 600.0, time.time())

    with engine.connect() as releaser, engine.connect() as reader, engine.connect() as w:
        held = lock_rows(releaser, leases, leases.c.conversation_id == cid)
        # holds the job up in its DELETE of the messages, its leases held:
        reading = lock_rows(reader, messages, messages.c.conversation_id.in_([cid, idle]))
        running = started(outcomes, "job", lambda: store.delete_conversation(cid))
        released_under_the_job(postgres, w, held, cid)
        taking = started(outcomes, "take", take)
        # The take waits for the job's placeholder; before, it went straight in.
        until(
            lambda: (
                waiting(w, f"INSERT INTO {postgres.prefix}conversation_leases", "transactionid")
                or not taking.is_alive()
            )
        )
        assert taking.is_alive(), outcomes
        reading.rollback()
        running.join(60)
        taking.join(60)
    assert outcomes == {"job": True, "take": None}
    lease = turns.open_turn(cid)
    assert lease is not None and (lease.turn_id, lease.owner) == ("t1", "runner-b")
    assert store.chat_memory(cid).get_messages() == []  # deleted before the turn began
    fenced = store.chat_memory(cid).fenced(Fence("t1", "runner-b"))
    appended = batch("new", 3)
    assert fenced.add_messages_if_absent(appended) == [True] * 3


def test_a_purge_leaves_alone_a_lease_taken_while_it_runs(postgres: Postgres) -> None:
    """A conversation's lease row is deleted (a release) while the purge waits to lock it, and
    a runner takes the conversation anew while the purge is still under way; the runner's
    fenced batch holds its new lease row and waits for the append lock the purge took. The
    purge holds no lease row of that conversation, so it leaves it alone. Before, it deleted
    the new lease row too, a running turn's: it waited for the batch, the batch for the
    append lock the purge took, and PostgreSQL reported a deadlock (with the batch taking the
    append lock first, the purge deleted the lease and the batch lost it)."""
    store, engine = postgres.store, postgres.engine
    leases = postgres.table("conversation_leases")
    messages = postgres.table("messages")
    taken, idle, turns = suspended_and_idle(store)
    appended = batch("new", 3)
    outcomes: dict[str, Any] = {}

    with engine.connect() as releaser, engine.connect() as reader, engine.connect() as w:
        held = lock_rows(releaser, leases, leases.c.conversation_id == taken)
        # holds the purge up in its DELETE of the idle one's rows:
        reading = lock_rows(reader, messages, messages.c.conversation_id == idle)
        purge = started(outcomes, "purge", lambda: store.purge(time.time() + 3_600))
        released_under_the_job(postgres, w, held, taken)
        taken_anew(outcomes, turns, taken)
        fenced = store.chat_memory(taken).fenced(Fence("t1", "runner-b"))
        append = started(outcomes, "append", lambda: fenced.add_messages_if_absent(appended))
        until_waiting(w, f"INSERT INTO {postgres.prefix}messages", "advisory")
        reading.rollback()
        purge.join(60)
        append.join(60)
    assert outcomes["append"] == [True] * 3
    assert outcomes["purge"].conversations == 1  # the idle one
    lease = turns.open_turn(taken)
    assert lease is not None and (lease.turn_id, lease.owner) == ("t1", "runner-b")
    stored = [m.message_id for m in store.chat_memory(taken).get_messages()]
    assert stored[-3:] == [m.message_id for m in appended]


def test_a_fenced_batch_takes_the_append_lock_before_its_lease_row(postgres: Postgres) -> None:
    """A fenced batch waits for the append lock holding no lock on its lease row, as a single
    fenced append does: PostgreSQL orders an ``AND``'s terms by cost, and put the lease check
    (``FOR SHARE``) first in the batch's statement, so a batch held its lease row while it
    waited for the lock, and whatever held the lock and then waited for that row (a delete,
    a takeover) deadlocked with it."""
    import sqlalchemy as sa

    store, engine = postgres.store, postgres.engine
    leases = postgres.table("conversation_leases")
    cid = new_conversation_id()
    turns = store.turn_store()
    assert turns.acquire_conversation(cid, "t1", "runner-a", 600.0, time.time()) is None
    fenced = store.chat_memory(cid).fenced(Fence("t1", "runner-a"))
    appended = batch("new", 3)
    outcomes: dict[str, Any] = {}
    lock = store._tables.append_lock(cid)

    with engine.connect() as appender, engine.connect() as other, engine.connect() as w:
        holding = appender.begin()
        appender.execute(sa.select(sa.func.pg_advisory_xact_lock(lock)))  # an append under way
        batch_thread = started(outcomes, "batch", lambda: fenced.add_messages_if_absent(appended))
        until_waiting(w, f"INSERT INTO {postgres.prefix}messages", "advisory")
        # The waiting batch holds no lock on the lease row: it can be locked at once.
        with other.begin():
            query = sa.select(leases).where(leases.c.conversation_id == cid)
            assert len(other.execute(query.with_for_update(nowait=True)).all()) == 1
        holding.rollback()
        batch_thread.join(60)
    assert outcomes == {"batch": [True] * 3}


def test_two_purges_over_one_batch_do_not_deadlock(postgres: Postgres) -> None:
    """Two purges take the same batch of three conversations while the middle one's lease row
    is released under the first. The first holds the first row and waits for the third; the
    second inserts a placeholder for the released one and waits for the first row. The first
    purge, holding its rows, leaves the released one alone. Before, it inserted a placeholder
    for it on a second round, so it waited for the second's placeholder holding the row the
    second waited for: PostgreSQL reported a deadlock and one purge failed."""
    import sqlalchemy as sa

    store, engine = postgres.store, postgres.engine
    leases = postgres.table("conversation_leases")
    base = new_conversation_id()
    first, released, third = (f"{base}-{n}" for n in range(3))  # in both scan orders
    turns = store.turn_store()
    for cid in (first, released, third):
        assert store.chat_memory(cid).add_message_if_absent(UserMessage("hi", message_id="u1"))
        assert turns.acquire_conversation(cid, "t0", "runner-a", 600.0, time.time()) is None
        assert turns.suspend_conversation(cid, "t0", "runner-a")
    outcomes: dict[str, Any] = {}
    select = f"SELECT {postgres.prefix}conversation_leases"

    def purge() -> Any:  # every conversation is idle by this cutoff
        return store.purge(time.time() + 3_600).conversations

    with engine.connect() as releaser, engine.connect() as other, engine.connect() as w:
        releasing = lock_rows(releaser, leases, leases.c.conversation_id == released)
        other_pid = other.execute(sa.select(sa.func.pg_backend_pid())).scalar()
        other.commit()
        holding = lock_rows(other, leases, leases.c.conversation_id == third)
        one = started(outcomes, "one", purge)
        until_waiting(w, select, "transactionid")  # holding the first, waiting for the middle
        releaser.execute(sa.delete(leases).where(leases.c.conversation_id == released))
        releasing.commit()

        def waits_for_other() -> bool:
            query = sa.text(
                "SELECT count(*) FROM pg_stat_activity WHERE query LIKE :start "
                "AND :pid = ANY(pg_blocking_pids(pid))"
            )
            count = w.execute(query, {"start": select + "%", "pid": other_pid}).scalar()
            w.commit()
            return bool(count)

        until(waits_for_other)  # the first purge now waits for the third row
        two = started(outcomes, "two", purge)
        until(lambda: waiting(w, select, "transactionid") == 2)  # the second, for the first row
        holding.rollback()
        one.join(60)
        two.join(60)
    assert not any(isinstance(outcome, BaseException) for outcome in outcomes.values()), outcomes
    # The second may find the middle one's append lock still held by the first (it goes
    # after the row locks): a third purge deletes what the two left.
    assert outcomes["one"] + outcomes["two"] + purge() == 3
    for cid in (first, released, third):
        assert store.chat_memory(cid).get_messages() == []


def test_two_purges_of_one_conversation_count_it_once(postgres: Postgres) -> None:
    """The first purge is held up deleting the conversation's messages; the second, which
    found it idle meanwhile, waits for the first's placeholder lease row and then finds it
    gone. Before, the second counted it deleted too: ``Purged.conversations`` said 2."""
    store, engine = postgres.store, postgres.engine
    messages, leases = postgres.table("messages"), postgres.table("conversation_leases")
    cid = new_conversation_id()
    assert store.chat_memory(cid).add_message_if_absent(UserMessage("hi", message_id="u1"))
    outcomes: dict[str, Any] = {}

    def purge() -> Any:  # the conversation is idle by this cutoff
        return store.purge(time.time() + 3_600).conversations

    with engine.connect() as blocker, engine.connect() as watcher:
        holding = lock_rows(blocker, messages, messages.c.conversation_id == cid)
        one = started(outcomes, "one", purge)
        until_waiting(watcher, f"DELETE FROM {messages.name}", "transactionid")
        two = started(outcomes, "two", purge)
        until_waiting(watcher, f"INSERT INTO {leases.name}", "transactionid")
        holding.rollback()
        one.join(60)
        two.join(60)
    assert outcomes == {"one": 1, "two": 0}
    assert store.chat_memory(cid).get_messages() == []
