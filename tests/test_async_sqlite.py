"""An `AsyncSqlAgentStore` made from an ``sqlite://`` URL: the blocking store's engine, each
store operation (or unit of them) run whole in one worker thread; the same typed errors, rows
and locking behaviour as the blocking store, and nothing half-written when a caller is
cancelled."""

from __future__ import annotations

import asyncio
import contextvars
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agentctx_fast import AiMessage, UserMessage
from agentctx_fast.compression.coordinator import CompressionState
from agentctx_fast.errors import SchemaNotInitializedError, StoreError, StoreUnavailableError
from agentctx_fast.stores.sql import AsyncSqlAgentStore, SqlAgentStore


@pytest.fixture
def url(tmp_path: Path) -> str:
    blocking = SqlAgentStore(f"sqlite:///{tmp_path / 'agent.db'}")
    blocking.schema.initialize()
    blocking.close()
    return f"sqlite:///{tmp_path / 'agent.db'}"


def run(url: str, body: Callable[[AsyncSqlAgentStore], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        store = AsyncSqlAgentStore(url)
        try:
            return await body(store)
        finally:
            await store.aclose()

    return asyncio.run(main())


def _trips(store: AsyncSqlAgentStore) -> Callable[[], int]:
    """Hops the store makes to a worker thread from now on (one per operation, or per unit of
    operations run together)."""
    port: Any = store._port
    hop = port._in_unit
    made = [0]

    def counted(*args: Any) -> Any:
        made[0] += 1
        return hop(*args)

    port._in_unit = counted
    return lambda: made[0]


def test_a_call_costs_one_trip(url: str) -> None:
    async def body(store: AsyncSqlAgentStore) -> dict[str, int]:
        memory = store.chat_memory("c1")
        await memory.add_message_if_absent(UserMessage("warm up", message_id="u0"))
        trips = _trips(store)
        counts: dict[str, int] = {}

        async def count(name: str, call: Awaitable[Any]) -> None:
            before = trips()
            await call
            counts[name] = trips() - before

        await count("append", memory.add_message_if_absent(UserMessage("hi", message_id="u1")))
        await count("page", memory.get_messages(10))
        await count("point read", memory.get_message("u1"))
        stored = await memory.get_message("u1")
        assert stored is not None
        await count("compare-and-set", memory.update_message(stored, stored.version))
        await count("count", memory.message_count())
        await count("batch", memory.add_messages_if_absent([UserMessage("b", message_id="u2")]))
        return counts

    counts = run(url, body)
    # the batch too: its transaction begins, writes and commits in one hop
    assert counts == dict.fromkeys(counts, 1)


def test_the_engine_is_the_blocking_stores(url: str) -> None:
    """``store.engine`` of a store made from an ``sqlite://`` URL is a blocking engine: a
    blocking store on it reads what the async store wrote, and the other way round."""
    import sqlalchemy as sa

    async def body(store: AsyncSqlAgentStore) -> tuple[bool, list[str], list[str]]:
        await store.chat_memory("c1").add_message_if_absent(UserMessage("a", message_id="u1"))
        blocking = SqlAgentStore(store.engine)  # type: ignore[arg-type]
        memory = blocking.chat_memory("c1")
        seen = [m.message_id for m in memory.get_messages()]
        memory.add_message_if_absent(UserMessage("b", message_id="u2"))
        back = [m.message_id for m in await store.chat_memory("c1").get_messages()]
        return isinstance(store.engine, sa.engine.Engine), seen, back

    assert run(url, body) == (True, ["u1"], ["u1", "u2"])


def test_another_async_store_on_the_engine_of_one_made_from_a_url(url: str) -> None:
    """The blocking engine a store made from an ``sqlite://`` URL has (``store.engine``) makes
    another async store (one with its record cache off, say); it does not own the engine:
    closing it leaves the first store working."""

    async def body(store: AsyncSqlAgentStore) -> tuple[list[str], list[str]]:
        await store.chat_memory("c1").add_message_if_absent(UserMessage("a", message_id="u1"))
        other = AsyncSqlAgentStore(store.engine, message_cache_size=0)
        seen = [m.message_id for m in await other.chat_memory("c1").get_messages()]
        await other.chat_memory("c1").add_message_if_absent(UserMessage("b", message_id="u2"))
        await other.aclose()
        back = [m.message_id for m in await store.chat_memory("c1").get_messages()]
        return seen, back

    assert run(url, body) == (["u1"], ["u1", "u2"])


def test_a_transaction_on_the_store_engine_is_one(url: str) -> None:
    """``store.engine.begin()`` on the engine the store made is a real transaction: a failure
    rolls back every statement."""
    import sqlalchemy as sa
    from sqlalchemy import text

    async def body(store: AsyncSqlAgentStore) -> list[str]:
        assert isinstance(store.engine, sa.engine.Engine)
        table = store._tables.compression_states.name
        insert = text(f"INSERT INTO {table} VALUES (:c, 1, x'00')")
        with store.engine.begin() as connection:  # several rows: executemany
            connection.execute(insert, [{"c": "kept1"}, {"c": "kept2"}])
        with pytest.raises(RuntimeError):
            with store.engine.begin() as connection:
                connection.execute(insert, {"c": "undone1"})
                connection.execute(insert, [{"c": "undone2"}, {"c": "undone3"}])
                raise RuntimeError("undo")
        with store.engine.connect() as connection:
            found = connection.execute(text(f"SELECT conversation_id FROM {table}"))
            return sorted(row[0] for row in found)

    assert run(url, body) == ["kept1", "kept2"]


def test_a_callers_read_transaction_locks_out_no_writer(url: str) -> None:
    """A caller reading inside a transaction of ``store.engine`` (an ``AsyncSession``, say)
    holds no write lock: the store's own writes and another process's go through meanwhile."""
    import sqlalchemy as sa
    from sqlalchemy import text

    path = url.removeprefix("sqlite:///")

    async def body(store: AsyncSqlAgentStore) -> list[str]:
        memory = store.chat_memory("c1")
        await memory.add_message_if_absent(UserMessage("first", message_id="u1"))
        table = store._tables.messages.name
        assert isinstance(store.engine, sa.engine.Engine)
        with store.engine.connect() as connection:
            connection.execute(text(f"SELECT count(*) FROM {table}"))
            assert connection.in_transaction()
            with sqlite3.connect(path, timeout=0.2) as other:  # fails at once when locked
                other.execute(f"UPDATE {table} SET message_id = message_id")
            await memory.add_message_if_absent(UserMessage("second", message_id="u2"))
        return [m.message_id for m in await memory.get_messages()]

    assert run(url, body) == ["u1", "u2"]


def test_a_failed_batch_rolls_back_every_page(url: str) -> None:
    """A batch larger than one multi-row INSERT fails on its last row: no row of it stays, the
    error is the blocking store's, and the connection is usable (and unlocked) afterwards."""
    path = url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as raw:
        raw.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON agent_messages "
            "WHEN NEW.message_id = 'last' BEGIN SELECT RAISE(ABORT, 'refused'); END"
        )
    batch = [UserMessage(f"m{i}", message_id=f"m{i}") for i in range(2500)]
    batch.append(UserMessage("last", message_id="last"))

    async def body(store: AsyncSqlAgentStore) -> tuple[Exception, int, list[bool]]:
        memory = store.chat_memory("c1")
        with pytest.raises(StoreError) as caught:
            await memory.add_messages_if_absent(batch)
        count = await memory.message_count()
        after = await memory.add_messages_if_absent(batch[:2])
        return caught.value, count, after

    error, count, after = run(url, body)
    assert "refused" in str(error)
    assert (count, after) == (0, [True, True])
    _the_blocking_store_refuses_alike(url, batch, error)


def _the_blocking_store_refuses_alike(url: str, batch: list[Any], error: StoreError) -> None:
    """The blocking store on the same database refuses ``batch`` with the same typed error (and
    first line), and nothing is left locked: a blocking writer goes on at once."""
    blocking = SqlAgentStore(url)
    try:
        with pytest.raises(StoreError) as blocking_error:
            blocking.chat_memory("c2").add_messages_if_absent(batch)
        assert type(error) is type(blocking_error.value)
        assert str(error).split("\n")[0] == str(blocking_error.value).split("\n")[0]
        assert blocking.chat_memory("c3").add_message_if_absent(UserMessage("x", message_id="x"))
    finally:
        blocking.close()


def test_errors_are_the_blocking_stores(url: str) -> None:
    """A database error is the same typed error, with the same message, on both stores."""
    path = url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as raw:
        raw.execute("DROP TABLE agent_turns")

    async def body(store: AsyncSqlAgentStore) -> Exception:
        with pytest.raises(StoreError) as caught:
            await store.turn_store().load_turn("c1", "t1")
        return caught.value

    error = run(url, body)
    blocking = SqlAgentStore(url)
    try:
        with pytest.raises(StoreError) as blocking_error:
            blocking.turn_store().load_turn("c1", "t1")
    finally:
        blocking.close()
    assert isinstance(error, SchemaNotInitializedError)  # not "retry later" (SPEC §22)
    assert not isinstance(error, StoreUnavailableError)
    assert type(error) is type(blocking_error.value)
    assert str(error) == str(blocking_error.value)


def _hold_write_lock(
    path: str, seconds: float, release: threading.Event | None = None
) -> tuple[threading.Thread, threading.Event]:
    """Another connection holds the database's write lock for ``seconds`` (from ``taken``), or
    until ``release`` is set."""
    taken = threading.Event()

    def hold() -> None:
        connection = sqlite3.connect(path, isolation_level=None)
        connection.execute("BEGIN IMMEDIATE")
        connection.execute("INSERT INTO agent_compression_states VALUES ('other', 1, x'00')")
        taken.set()
        if release is None:
            time.sleep(seconds)
        else:
            release.wait(20)
        connection.execute("COMMIT")
        connection.close()

    thread = threading.Thread(target=hold)
    thread.start()
    taken.wait(10)
    return thread, taken


def test_a_writer_in_another_connection_is_waited_for(url: str) -> None:
    """While another connection holds the write lock, a write waits (the busy timeout) and then
    goes through, and the event loop keeps running meanwhile."""

    async def body(store: AsyncSqlAgentStore) -> tuple[bool, float, int]:
        memory = store.chat_memory("c1")
        await memory.message_count()  # the connection is open
        ticks = 0
        stop = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not stop.is_set():
                await asyncio.sleep(0.01)
                ticks += 1

        tick = asyncio.ensure_future(ticker())
        thread, _ = _hold_write_lock(url.removeprefix("sqlite:///"), 0.4)
        start = time.perf_counter()
        added = await memory.add_message_if_absent(UserMessage("hi", message_id="u1"))
        waited = time.perf_counter() - start
        stop.set()
        await tick
        await asyncio.to_thread(thread.join)
        return added, waited, ticks

    added, waited, ticks = run(url, body)
    assert added
    assert waited >= 0.2  # it did wait for the other writer
    assert ticks >= 10  # and the loop was not blocked meanwhile


def test_cas_across_async_tasks_and_a_blocking_thread_loses_nothing(url: str) -> None:
    tasks, rounds = 8, 6
    blocking = SqlAgentStore(url)
    blocking_states = blocking.compression_state_store()

    def bump_blocking() -> None:
        for _ in range(rounds):
            while True:
                state = blocking_states.load("shared") or CompressionState("shared")
                if blocking_states.save(
                    replace(state, covered_tokens=state.covered_tokens + 1), state.version
                ):
                    break

    async def body(store: AsyncSqlAgentStore) -> CompressionState | None:
        states = store.compression_state_store()

        async def bump() -> None:
            for _ in range(rounds):
                while True:
                    state = await states.load("shared") or CompressionState("shared")
                    bumped = replace(state, covered_tokens=state.covered_tokens + 1)
                    if await states.save(bumped, state.version):
                        break

        await asyncio.gather(asyncio.to_thread(bump_blocking), *(bump() for _ in range(tasks)))
        return await states.load("shared")

    try:
        final = run(url, body)
    finally:
        blocking.close()
    assert final is not None
    assert final.covered_tokens == final.version == (tasks + 1) * rounds


def test_a_batch_cancelled_while_it_waits_for_the_lock_is_whole_or_absent(url: str) -> None:
    """Cancelled while its write waits for another writer's lock: the batch is then stored
    whole or not at all, the connection goes back to the pool without a transaction open,
    and a blocking writer is not kept waiting afterwards."""

    async def body(store: AsyncSqlAgentStore) -> tuple[list[str], list[bool]]:
        memory = store.chat_memory("c1")
        await memory.message_count()
        thread, _ = _hold_write_lock(url.removeprefix("sqlite:///"), 0.3)
        batch = [UserMessage("a", message_id="a"), UserMessage("b", message_id="b")]
        task = asyncio.ensure_future(memory.add_messages_if_absent(batch))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.to_thread(thread.join)
        await asyncio.sleep(0.1)
        stored = [m.message_id for m in await memory.get_messages()]
        # the pooled connection is not left in a transaction: its next batch commits
        again = await memory.add_messages_if_absent([AiMessage("c", message_id="c")])
        return stored, again

    stored, again = run(url, body)
    assert stored in ([], ["a", "b"])
    assert again == [True]
    blocking = SqlAgentStore(url)
    try:
        start = time.perf_counter()
        assert blocking.chat_memory("c1").add_message_if_absent(UserMessage("d", message_id="d"))
        assert time.perf_counter() - start < 5
        assert [m.message_id for m in blocking.chat_memory("c1").get_messages()] == [
            *stored,
            "c",
            "d",
        ]
    finally:
        blocking.close()


def test_a_write_cancelled_while_it_waits_is_whole_or_absent(url: str) -> None:
    """A single write is one autocommit statement: cancelled while it waits for the lock, it is
    then stored whole or not at all, and the store goes on."""
    message = UserMessage("hi", message_id="u1")

    async def body(store: AsyncSqlAgentStore) -> tuple[list[Any], bool]:
        memory = store.chat_memory("c1")
        await memory.message_count()
        thread, _ = _hold_write_lock(url.removeprefix("sqlite:///"), 0.3)
        task = asyncio.ensure_future(memory.add_message_if_absent(message))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.to_thread(thread.join)
        stored = await memory.get_messages()
        later = await memory.add_message_if_absent(UserMessage("later", message_id="u2"))
        return stored, later

    stored, later = run(url, body)
    assert stored in ([], [message])
    assert later


def test_a_store_on_a_caller_engine_keeps_its_transactions(tmp_path: Path) -> None:
    """An `AsyncEngine` the caller made (plain aiosqlite connections, their own transaction
    handling) is used as it is: the store's writes commit and a failed batch rolls back."""
    from sqlalchemy.ext.asyncio import create_async_engine

    path = tmp_path / "caller.db"

    async def main() -> tuple[int, int]:
        engine = create_async_engine(f"sqlite+aiosqlite:///{path}")
        store = AsyncSqlAgentStore(engine)
        try:
            await store.schema.initialize()
            memory = store.chat_memory("c1")
            await memory.add_message_if_absent(UserMessage("hi", message_id="u1"))
            await memory.add_messages_if_absent([UserMessage("b", message_id="u2")])
            first = await memory.message_count()
            with sqlite3.connect(path) as connection:
                connection.execute(
                    "CREATE TRIGGER refuse BEFORE INSERT ON agent_messages "
                    "WHEN NEW.message_id = 'last' BEGIN SELECT RAISE(ABORT, 'refused'); END"
                )
            with pytest.raises(StoreError):
                await memory.add_messages_if_absent(
                    [UserMessage("x", message_id="x"), UserMessage("last", message_id="last")]
                )
            return first, await memory.message_count()
        finally:
            await store.aclose()
            await engine.dispose()

    assert asyncio.run(main()) == (2, 2)


def test_a_write_cancelled_mid_statement_on_a_caller_engine_leaves_no_lock(
    tmp_path: Path,
) -> None:
    """A caller's aiosqlite engine on a file: a batch whose caller is cancelled while its
    insert runs (a client that went away) finishes, then the caller is cancelled. Before,
    SQLAlchemy dropped the connection in the middle of its transaction, which kept the
    database's write lock: every later write failed with `StoreBusyError`."""
    from sqlalchemy import event
    from sqlalchemy.ext.asyncio import create_async_engine

    async def main() -> tuple[bool, list[bool], int]:
        engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'caller.db'}")
        store = AsyncSqlAgentStore(engine)
        try:
            await store.schema.initialize()
            memory = store.chat_memory("c1")
            loop = asyncio.get_running_loop()
            to_cancel: list[asyncio.Future[Any]] = []

            def cancel_once_sent(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
                if statement.startswith("INSERT INTO agent_messages") and to_cancel:
                    loop.call_soon(to_cancel.pop().cancel)  # lands while the insert runs

            event.listen(engine.sync_engine, "before_cursor_execute", cancel_once_sent)
            batch = [UserMessage("m", message_id=f"m{n}") for n in range(100)]
            call = asyncio.ensure_future(memory.add_messages_if_absent(batch))
            to_cancel.append(call)
            try:
                await call
                cancelled = False
            except asyncio.CancelledError:
                cancelled = True
            later = await memory.add_messages_if_absent([UserMessage("x", message_id="x")])
            return cancelled, later, await memory.message_count()
        finally:
            await store.aclose()
            await engine.dispose()

    assert asyncio.run(main()) == (True, [True], 101)


def test_a_cancelled_call_keeps_an_in_memory_database() -> None:
    """In-memory SQLite lives in the store's one shared connection; a caller cancelled in the
    middle of a statement must not make SQLAlchemy drop that connection (and the database with
    it): the statement finishes, then the caller is cancelled."""
    from sqlalchemy import event

    async def main() -> tuple[int, list[str]]:
        store = AsyncSqlAgentStore("sqlite://")
        try:
            await store.schema.initialize()
            memory = store.chat_memory("c1")
            await memory.add_message_if_absent(UserMessage("kept", message_id="u1"))
            go_on = threading.Event()
            go_on.set()

            def held(*args: Any) -> None:  # on the connection's thread: mid-statement
                go_on.wait(10)

            event.listen(store.engine, "before_cursor_execute", held)
            cancelled = 0
            for steps in range(12):  # cut after 0, 1, 2, ... loop steps: mid-statement too
                go_on.clear()
                call = asyncio.ensure_future(memory.get_messages())
                for _ in range(steps):
                    await asyncio.sleep(0)
                call.cancel()
                go_on.set()
                try:
                    await call
                except asyncio.CancelledError:
                    cancelled += 1
            return cancelled, [m.message_id for m in await memory.get_messages()]
        finally:
            await store.aclose()

    cancelled, ids = asyncio.run(main())
    assert cancelled == 12  # each was cut: before it began (0 steps) or in its statement
    assert ids == ["u1"]


_CALLER: contextvars.ContextVar[str | None] = contextvars.ContextVar("caller", default=None)


@pytest.mark.parametrize("kind", ["blocking", "async"])
@pytest.mark.parametrize("where", ["memory", "file"])
def test_the_store_engines_events_and_echo_see_the_stores_statements(
    kind: str, where: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A listener on the store's engine (``store.engine`` on the async store; what
    tracing instruments) sees the store's own statements, with the calling task's context
    variables, and so does ``echo`` turned on after the store was made."""
    from sqlalchemy import event

    url = "sqlite://" if where == "memory" else f"sqlite:///{tmp_path / 'agent.db'}"
    seen: list[tuple[str, str | None]] = []
    engine_url: Any = None

    def listener(*args: Any) -> None:
        assert args[0].engine.url == engine_url  # the database, as a tracer reports it
        statement = args[2].replace(" IF NOT EXISTS", "")
        seen.append((" ".join(statement.split()[:3]), _CALLER.get()))

    def check() -> None:
        assert ("CREATE TABLE agent_messages", None) in seen
        assert ("INSERT INTO agent_messages", "the caller") in seen
        assert ("SELECT agent_messages.data FROM", "the caller") in seen
        echoed = [r.getMessage() for r in caplog.records if r.name.startswith("sqlalchemy.engine")]
        assert any(m.startswith("INSERT INTO agent_messages") for m in echoed)

    if kind == "blocking":
        blocking = SqlAgentStore(url)
        try:
            engine_url = blocking.engine.url
            event.listen(blocking.engine, "before_cursor_execute", listener)
            blocking.schema.initialize()
            blocking.engine.echo = True
            _CALLER.set("the caller")
            memory = blocking.chat_memory("c1")
            memory.add_message_if_absent(UserMessage("hi", message_id="u1"))
            assert len(memory.get_messages()) == 1
        finally:
            _CALLER.set(None)
            blocking.engine.echo = False
            blocking.close()
        check()
        return

    async def main() -> None:
        store = AsyncSqlAgentStore(url)
        try:
            nonlocal engine_url
            engine_url = store.engine.url
            event.listen(store.engine, "before_cursor_execute", listener)
            await store.schema.initialize()
            store.engine.echo = True
            _CALLER.set("the caller")
            memory = store.chat_memory("c1")
            await memory.add_message_if_absent(UserMessage("hi", message_id="u1"))
            assert len(await memory.get_messages()) == 1
        finally:
            store.engine.echo = False
            await store.aclose()

    asyncio.run(main())
    check()


def test_listeners_added_and_removed_on_the_store_engine_after_its_first_call(url: str) -> None:
    """The store's statements and transactions in worker threads follow the listeners of
    ``store.engine`` as they are now: one added after the store has run
    statements sees the next ones (a statement's and a transaction's events alike), and once
    removed sees none."""
    from sqlalchemy import event

    seen: list[str] = []

    def statement(*args: Any) -> None:
        seen.append(" ".join(args[2].split()[:2]))

    def committed(_connection: Any) -> None:
        seen.append("commit")

    async def body(store: AsyncSqlAgentStore) -> None:
        memory = store.chat_memory("c1")
        await memory.add_message_if_absent(UserMessage("hi", message_id="u1"))
        assert len(await memory.get_messages()) == 1
        assert seen == []
        event.listen(store.engine, "before_cursor_execute", statement)
        event.listen(store.engine, "commit", committed)
        await memory.add_messages_if_absent(  # a batch: one write transaction
            [UserMessage("again", message_id="u2"), AiMessage("yes", message_id="a2")]
        )
        assert len(await memory.get_messages()) == 3
        assert "INSERT INTO" in seen and "SELECT agent_messages.data" in seen
        assert "commit" in seen
        event.remove(store.engine, "before_cursor_execute", statement)
        event.remove(store.engine, "commit", committed)
        seen.clear()
        await memory.add_messages_if_absent(
            [UserMessage("once more", message_id="u3"), AiMessage("no", message_id="a3")]
        )
        assert len(await memory.get_messages()) == 5
        assert seen == []

    run(url, body)


def test_calls_together_are_one_trip_each_committed_on_its_own(url: str) -> None:
    """Three calls as one unit: one trip, each call's write committed by itself (a blocking
    store on another connection sees them all), the results those of the calls."""
    ids = ["u1", "u2", "u3"]

    async def body(store: AsyncSqlAgentStore) -> tuple[int, list[bool], int]:
        memory = store.chat_memory("c1")
        await memory.message_count()
        trips = _trips(store)

        async def work() -> tuple[list[bool], int]:
            first = await memory.add_message_if_absent(UserMessage("a", message_id="u1"))
            rest = await memory.add_messages_if_absent(
                [UserMessage("b", message_id="u2"), UserMessage("c", message_id="u3")]
            )
            again = await memory.add_message_if_absent(UserMessage("a", message_id="u1"))
            return [first, *rest, again], await memory.message_count()

        before = trips()
        added, count = await store._port.together("test", work)
        return trips() - before, added, count

    trips, added, count = run(url, body)
    assert trips == 1
    assert (added, count) == ([True, True, True, False], 3)
    blocking = SqlAgentStore(url)
    try:
        assert [m.message_id for m in blocking.chat_memory("c1").get_messages()] == ids
    finally:
        blocking.close()


def test_two_stores_on_a_callers_new_engine_used_at_once_make_its_first_connection_once(
    url: str,
) -> None:
    """Two stores on one engine the caller has just made, both used at once (two sessions of
    an agents framework on the caller's engine): the engine's first connection, made in a
    worker thread on a loop of its own, is made once for both. Made by each store at once,
    from two loops, SQLAlchemy's setup of the dialect waited forever."""
    from sqlalchemy.ext.asyncio import create_async_engine

    outcome: list[list[str | None]] = []

    async def body() -> list[str | None]:
        engine = create_async_engine(url.replace("sqlite://", "sqlite+aiosqlite://"))
        try:
            one, two = AsyncSqlAgentStore(engine), AsyncSqlAgentStore(engine)
            memories = one.chat_memory("c1"), two.chat_memory("c2")
            await asyncio.gather(
                *(m.add_message_if_absent(UserMessage("hi", message_id="u1")) for m in memories)
            )
            return [m.text for m in await two.chat_memory("c1").get_messages()]
        finally:
            await engine.dispose()

    thread = threading.Thread(target=lambda: outcome.append(asyncio.run(body())), daemon=True)
    thread.start()
    thread.join(timeout=60)  # a deadlock fails the test instead of hanging the run
    assert outcome == [["hi"]]


def test_a_failing_call_together_rolls_back_only_its_own_transaction(url: str) -> None:
    """A call that fails in a unit: its transaction rolls back, the calls before it stay
    committed, the error is the blocking store's, and the connection goes on unlocked."""
    path = url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as raw:
        raw.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON agent_messages "
            "WHEN NEW.message_id = 'last' BEGIN SELECT RAISE(ABORT, 'refused'); END"
        )
    kept = [UserMessage("k", message_id="k1"), UserMessage("k", message_id="k2")]
    refused = [UserMessage("x", message_id="x"), UserMessage("last", message_id="last")]
    reached: list[str] = []

    async def body(store: AsyncSqlAgentStore) -> tuple[Exception, list[str]]:
        memory = store.chat_memory("c1")

        async def work() -> None:
            await memory.add_messages_if_absent(kept)
            reached.append("kept")
            await memory.add_messages_if_absent(refused)
            reached.append("after the failure")  # never

        with pytest.raises(StoreError) as caught:
            await store._port.together("test", work)
        await memory.add_message_if_absent(UserMessage("then", message_id="then"))
        return caught.value, [m.message_id for m in await memory.get_messages()]

    error, stored = run(url, body)
    assert reached == ["kept"]
    assert stored == ["k1", "k2", "then"]
    _the_blocking_store_refuses_alike(url, refused, error)


def test_a_unit_cancelled_while_it_waits_stops_before_its_next_step(url: str) -> None:
    """Cancelled while its first call (a batch) waits for another writer's lock: the unit's
    thread finishes that call (the caller is cancelled only then), and the unit's next call
    never runs."""
    from sqlalchemy import event

    reached: list[str] = []

    async def body(store: AsyncSqlAgentStore) -> tuple[bool, list[str]]:
        memory = store.chat_memory("c1")
        await memory.message_count()
        release = threading.Event()
        thread, _ = _hold_write_lock(url.removeprefix("sqlite:///"), 0, release)

        async def work() -> None:
            reached.append("first")
            await memory.add_messages_if_absent([UserMessage("a", message_id="a")])
            reached.append("second")
            await memory.add_message_if_absent(UserMessage("b", message_id="b"))

        begun = threading.Event()

        def beginning(*args: Any) -> None:  # in the unit's thread
            if args[2].startswith("INSERT"):
                begun.set()  # the batch's transaction writes: it waits for the lock

        event.listen(store.engine, "before_cursor_execute", beginning)
        task = asyncio.ensure_future(store._port.together("test", work))
        try:
            for _ in range(2000):
                if begun.is_set():
                    break
                await asyncio.sleep(0.005)
            assert begun.is_set()
            task.cancel()
            await asyncio.sleep(0.05)
            waiting = not task.done()  # the cancelled caller waits for the call under way
        finally:
            release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.to_thread(thread.join)
        return waiting, [m.message_id for m in await memory.get_messages()]

    waiting, stored = run(url, body)
    assert reached in (["first"], ["first", "second"])  # the call under way runs to its end
    assert stored in ([], ["a"])  # and the unit's next call never runs
    assert waiting
    blocking = SqlAgentStore(url)
    try:
        start = time.perf_counter()
        assert blocking.chat_memory("c1").add_message_if_absent(UserMessage("d", message_id="d"))
        assert time.perf_counter() - start < 5
    finally:
        blocking.close()


def test_cancelled_units_keep_an_in_memory_database() -> None:
    """In-memory SQLite: units of several calls cancelled at every point of their trip never
    drop the shared connection (the database), and what each unit wrote is whole: a unit's
    calls that ran are stored, those after the cancellation are not."""

    async def main() -> tuple[int, list[str], int]:
        store = AsyncSqlAgentStore("sqlite://")
        try:
            await store.schema.initialize()
            memory = store.chat_memory("c1")
            await memory.add_message_if_absent(UserMessage("kept", message_id="u1"))
            cancelled = 0
            for steps in range(12):

                async def work(steps: int = steps) -> None:
                    await memory.add_message_if_absent(UserMessage("x", message_id=f"a{steps}"))
                    await memory.get_messages()
                    await memory.add_message_if_absent(UserMessage("y", message_id=f"b{steps}"))

                call = asyncio.ensure_future(store._port.together("test", work))
                for _ in range(steps):
                    await asyncio.sleep(0)
                call.cancel()
                try:
                    await call
                except asyncio.CancelledError:
                    cancelled += 1
            ids = [m.message_id for m in await memory.get_messages()]
            pairs = sum(f"b{steps}" in ids and f"a{steps}" not in ids for steps in range(12))
            return cancelled, ids, pairs
        finally:
            await store.aclose()

    cancelled, ids, second_without_first = asyncio.run(main())
    assert cancelled >= 6
    assert ids[0] == "u1"
    assert second_without_first == 0


def _turns_trips(
    url: str, replies: list[AiMessage], patch: Callable[[], None] | None = None
) -> tuple[list[int], list[str]]:
    """Trips per turn of an `AsyncAgentRunner` on the async SQLite store (the second and
    third turns of a conversation), and the turns' statuses."""
    from agentctx_fast import Agent, AsyncAgentRunner, AsyncScriptedChatModel, Tool

    async def body(store: AsyncSqlAgentStore) -> tuple[list[int], list[str]]:
        if patch is not None:
            patch()
        runner = AsyncAgentRunner(store)
        agent = Agent(
            "a",
            AsyncScriptedChatModel(replies, cycle=True),
            tools=[Tool("lookup", lambda order_id: {"order_id": order_id})],
        )
        await runner.run(agent, "c1", "first")
        trips = _trips(store)
        counts, statuses = [], []
        for text in ("second", "third"):
            before = trips()
            turn = await runner.run(agent, "c1", text)
            counts.append(trips() - before)
            statuses.append(turn.status.value)
        await runner.aclose()
        return counts, statuses

    result: tuple[list[int], list[str]] = run(url, body)
    return result


def _tool_replies() -> list[AiMessage]:
    from agentctx_fast import ToolCall

    return [
        AiMessage(tool_calls=(ToolCall("call-1", "lookup", '{"order_id": "o1"}'),)),
        AiMessage("It has shipped."),
    ]


def test_a_turn_costs_two_trips_a_tool_turn_five(url: str) -> None:
    """A plain turn: the opening (lease, record, history, user message) and the reply's
    recording (lease check, reply, record, release) are one trip each; a tool step adds one
    for the reply with the call, one for the record saying its calls started (SPEC §20: a
    tool that may have run is never called "not run") and one for the result and the turn's
    record."""
    from agentctx_fast import ToolCall

    plain = _turns_trips(url, [AiMessage("Hello.")])
    tool = _turns_trips(url, _tool_replies())
    two_calls = AiMessage(
        tool_calls=(
            ToolCall("call-1", "lookup", '{"order_id": "o1"}'),
            ToolCall("call-2", "lookup", '{"order_id": "o2"}'),
        )
    )
    two = _turns_trips(url, [two_calls, AiMessage("Both shipped.")])
    assert plain == ([2, 2], ["completed", "completed"])
    assert tool == ([5, 5], ["completed", "completed"])
    assert two == ([6, 6], ["completed", "completed"])  # the first result is one trip more


def test_a_turn_that_suspends_costs_four_trips(url: str) -> None:
    """A turn whose tool call needs approval: the opening, the reply's recording and the
    approval form are one trip each, and the turn's record (suspended) with its conversation
    marked suspended one more, the `ApprovalRequired` event after it; the turn is then as
    before: the conversation refuses a new turn, and the resumed turn runs the call and
    completes."""
    from agentctx_fast import (
        Agent,
        AgentConversationBusyError,
        AgentFormMessage,
        AsyncAgentRunner,
        AsyncScriptedChatModel,
        Tool,
        ToolCall,
    )
    from agentctx_fast.runner.events import ApprovalRequired, TurnEnded

    refund = Tool("refund", lambda order_id: f"refunded {order_id}", requires_approval=True)
    call = AiMessage(tool_calls=(ToolCall("call-1", "refund", '{"order_id": "o1"}'),))
    agent = Agent("a", AsyncScriptedChatModel([call], cycle=True), tools=[refund])
    answering = Agent(
        "a", AsyncScriptedChatModel([AiMessage("Refunded.")], cycle=True), tools=[refund]
    )

    async def body(store: AsyncSqlAgentStore) -> tuple[list[int], list[Any], bool, str, str]:
        runner = AsyncAgentRunner(store)
        first = await runner.run(agent, "c0", "warm up")  # the store's first trips are behind us
        await runner.resume(answering, "c0", first.turn_id, {"call-1": True})
        trips = _trips(store)
        counts, kinds = [], []
        turn_id = ""
        for conversation in ("c1", "c2"):
            before = trips()
            events = [event async for event in runner.stream(agent, conversation, "refund")]
            counts.append(trips() - before)
            kinds = [type(event).__name__ for event in events]
            ended = events[-1]
            assert isinstance(ended, TurnEnded) and isinstance(events[-2], ApprovalRequired)
            turn_id = ended.turn.turn_id
        try:
            await runner.run(agent, "c2", "another")
            busy = False
        except AgentConversationBusyError:
            busy = True
        forms = [
            m
            for m in await store.chat_memory("c2").get_messages()
            if isinstance(m, AgentFormMessage)
        ]
        done = await runner.resume(answering, "c2", turn_id, {"call-1": True})
        await runner.aclose()
        return counts, kinds, busy, forms[0].status, done.status.value

    counts, kinds, busy, form_status, status = run(url, body)
    assert counts == [4, 4]
    assert kinds == ["ToolCallEvent", "ApprovalRequired", "TurnEnded"]
    assert busy
    assert form_status == "pending"
    assert status == "completed"


def test_a_new_runners_first_turn_reads_the_earlier_turns_statuses_in_one_trip(url: str) -> None:
    """A runner new to a conversation (one made per request, say) reads the status of every
    earlier turn in its first window's history: all of them in one trip, not one each."""
    from agentctx_fast import Agent, AsyncAgentRunner, AsyncScriptedChatModel

    async def body(store: AsyncSqlAgentStore) -> tuple[int, int, str]:
        agent = Agent("a", AsyncScriptedChatModel([AiMessage("Hello.")], cycle=True))
        first = AsyncAgentRunner(store)
        for i in range(6):
            await first.run(agent, "c1", f"turn {i}")
        await first.aclose()
        trips = _trips(store)
        fresh = AsyncAgentRunner(store)
        before = trips()
        turn = await fresh.run(agent, "c1", "again")
        new_runner = trips() - before
        before = trips()
        await fresh.run(agent, "c1", "and again")
        await fresh.aclose()
        return new_runner, trips() - before, turn.status.value

    new_runner, next_turn, status = run(url, body)
    assert status == "completed"
    assert next_turn == 2
    assert new_runner == 3  # the opening, the six statuses, the reply's recording


def test_a_replaced_store_method_runs_call_by_call(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chat memory whose method was replaced (here by one that awaits the event loop) may
    await anything: the runner then makes its calls one by one, and the turn completes."""
    from agentctx_fast.stores.sql import AsyncSqlChatMemory

    original = AsyncSqlChatMemory.add_message_if_absent
    seen: list[str] = []

    async def yielding(self: AsyncSqlChatMemory, message: Any) -> bool:
        await asyncio.sleep(0)  # needs the event loop: never on a connection's thread
        seen.append(message.message_id)
        return await original(self, message)

    def patch() -> None:
        monkeypatch.setattr(AsyncSqlChatMemory, "add_message_if_absent", yielding)

    counts, statuses = _turns_trips(url, [AiMessage("Hello.")], patch)
    assert statuses == ["completed", "completed"]
    assert len(seen) == 6  # user and reply of each of three turns went through it
    assert all(count > 2 for count in counts)  # one trip per call: no unit


def test_a_subclassed_memory_offers_no_unit(url: str) -> None:
    from agentctx_fast._units import shared_port
    from agentctx_fast.stores.sql import AsyncSqlChatMemory

    class Mine(AsyncSqlChatMemory):
        pass

    async def body(store: AsyncSqlAgentStore) -> tuple[Any, Any, Any, Any]:
        memory = store.chat_memory("c1")
        turns = store.turn_store()
        other = AsyncSqlAgentStore(url)
        try:
            return (
                shared_port(turns, memory),
                shared_port(turns, Mine(store, "c1")),
                shared_port(turns, other.chat_memory("c1")),
                shared_port(turns, None),
            )
        finally:
            await other.aclose()

    same, subclass, other_store, alone = run(url, body)
    assert same is not None and alone is same
    assert subclass is None and other_store is None


def test_a_runner_reads_back_no_status_it_recorded(url: str) -> None:
    """The window's statuses of history turns: a turn this runner ended is not read back from
    the store by the next turn (a final status never changes), one another runner ended is
    read once. Counted in the statements of a blocking runner."""
    from sqlalchemy import event

    from agentctx_fast import Agent, AgentRunner, ScriptedChatModel

    store = SqlAgentStore(url)
    statements: list[str] = []
    event.listen(store.engine, "before_cursor_execute", lambda *args: statements.append(args[2]))
    reads = lambda: sum("FROM agent_turns" in s for s in statements)  # noqa: E731
    agent = Agent("a", ScriptedChatModel([AiMessage("Hello.")], cycle=True))
    try:
        runner = AgentRunner(store)
        runner.run(agent, "c1", "first")
        before = reads()
        for text in ("second", "third"):
            assert runner.run(agent, "c1", text).status.value == "completed"
        own = reads() - before
        other = AgentRunner(store)  # knows none of them: reads each once
        before = reads()
        other.run(agent, "c1", "fourth")
        theirs = reads() - before
        other.run(agent, "c1", "fifth")
        then = reads() - before - theirs
    finally:
        store.close()
    assert own == 0
    assert (theirs, then) == (3, 0)


def test_concurrent_calls_on_an_in_memory_database_interleave_no_transaction() -> None:
    """Many tasks' batches and compare-and-sets on the one shared connection of an in-memory
    database: each call's transaction is whole on the connection's thread, so none fails on
    another's ``BEGIN`` and nothing is lost."""
    tasks, rounds = 12, 5

    async def main() -> tuple[int, int]:
        store = AsyncSqlAgentStore("sqlite://")
        try:
            await store.schema.initialize()
            states = store.compression_state_store()

            async def worker(n: int) -> None:
                memory = store.chat_memory(f"c{n % 3}")
                for r in range(rounds):
                    await memory.add_messages_if_absent(
                        [
                            UserMessage("a", message_id=f"{n}-{r}-a"),
                            AiMessage("b", message_id=f"{n}-{r}-b"),
                        ]
                    )
                    while True:
                        state = await states.load("shared") or CompressionState("shared")
                        bumped = replace(state, covered_tokens=state.covered_tokens + 1)
                        if await states.save(bumped, state.version):
                            break

            await asyncio.gather(*(worker(n) for n in range(tasks)))
            counts = [await store.chat_memory(f"c{i}").message_count() for i in range(3)]
            final = await states.load("shared")
            assert final is not None
            return sum(counts), final.covered_tokens
        finally:
            await store.aclose()

    assert asyncio.run(main()) == (tasks * rounds * 2, tasks * rounds)
