"""PostgreSQL through one pooled engine (SPEC §19): many threads share one `SqlAgentStore` and
many tasks one `AsyncSqlAgentStore`; the server never sees more connections than the pool
allows, and compare-and-set stays exact under that contention."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import pytest

from agentctx_fast import Agent, AiMessage, AsyncAgentRunner, AsyncScriptedChatModel, UserMessage
from agentctx_fast.compression.coordinator import CompressionState
from agentctx_fast.core.turns import TurnStatus
from agentctx_fast.stores._sql_io import MAX_OVERFLOW, POOL_SIZE
from agentctx_fast.stores.sql import AsyncSqlAgentStore, SqlAgentStore
from servers import PostgresServer

WORKERS = 32
INCREMENTS = 8  # successful compare-and-set saves per worker


@pytest.fixture
def database(postgres_server: PostgresServer) -> tuple[str, str]:
    """``(url, dsn)`` of a database of this test's own, so only its connections are counted."""
    name = f"pool_{uuid.uuid4().hex[:12]}"
    postgres_server.create_database(name)
    return postgres_server.url_for(name), postgres_server.dsn_for(name)


class ConnectionCounter:
    """Samples, from its own connection, how many others the server has on the database busy
    with a statement or a transaction. (An overflow connection the pool has just closed can
    stay listed a moment, idle, while its backend exits; `_peak_open` counts the open ones on
    the client side.)"""

    def __init__(self, dsn: str) -> None:
        import psycopg

        self._connection = psycopg.connect(dsn, autocommit=True)
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        query = (
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() AND state <> 'idle'"
        )
        while not self._stop.is_set():
            row = self._connection.execute(query).fetchone()
            self.peak = max(self.peak, int(row[0]) if row else 0)
            self._stop.wait(0.002)

    def __enter__(self) -> ConnectionCounter:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._connection.close()


def _peak(engine: Any, up: str, down: str) -> Callable[[], int]:
    """The highest count of pool events ``up`` not yet matched by ``down``."""
    from sqlalchemy import event

    state = {"now": 0, "peak": 0}
    lock = threading.Lock()

    def rise(*_: Any) -> None:
        with lock:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])

    def fall(*_: Any) -> None:
        with lock:
            state["now"] -= 1

    event.listen(engine, up, rise)
    event.listen(engine, down, fall)
    return lambda: state["peak"]


def _peak_checkouts(engine: Any) -> Callable[[], int]:
    """The most connections the engine's pool handed out at once."""
    return _peak(engine, "checkout", "checkin")


def _peak_open(engine: Any) -> Callable[[], int]:
    """The most database connections the engine's pool had open at once."""
    return _peak(engine, "connect", "close")


def test_the_pool_settings_are_the_documented_ones(database: tuple[str, str]) -> None:
    store = SqlAgentStore(database[0])
    try:
        pool: Any = store.engine.pool
        assert (pool.size(), pool._max_overflow, pool._pre_ping) == (POOL_SIZE, MAX_OVERFLOW, True)
    finally:
        store.close()


def test_threads_share_one_store_within_the_pool(database: tuple[str, str]) -> None:
    url, dsn = database
    store = SqlAgentStore(url)
    store.schema.initialize()
    peak_checkouts = _peak_checkouts(store.engine)
    peak_open = _peak_open(store.engine)
    conversation_id = "shared"
    states = store.compression_state_store()
    memory = store.chat_memory(conversation_id)

    def work(worker: int) -> int:
        conflicts = 0
        for step in range(INCREMENTS):
            memory.add_message_if_absent(UserMessage(f"{worker}/{step}", message_id=f"m{step}"))
            while True:
                state = states.load(conversation_id) or CompressionState(conversation_id)
                bumped = replace(state, covered_tokens=state.covered_tokens + 1)
                if states.save(bumped, state.version):
                    break
                conflicts += 1
        return conflicts

    try:
        with ConnectionCounter(dsn) as counter, ThreadPoolExecutor(WORKERS) as pool:
            conflicts = sum(pool.map(work, range(WORKERS)))
        final = states.load(conversation_id)
        assert final is not None
        assert final.covered_tokens == final.version == WORKERS * INCREMENTS
        assert [m.message_id for m in memory.get_messages()] == [
            f"m{step}" for step in range(INCREMENTS)
        ]
        assert 2 <= peak_checkouts() <= POOL_SIZE + MAX_OVERFLOW
        assert peak_open() <= POOL_SIZE + MAX_OVERFLOW
        assert counter.peak <= POOL_SIZE + MAX_OVERFLOW
        assert conflicts > 0  # the threads did contend for the same row
    finally:
        store.close()


def test_tasks_share_one_async_store_within_the_pool(database: tuple[str, str]) -> None:
    url, dsn = database
    tasks = 40

    async def main() -> tuple[CompressionState | None, int, int]:
        store = AsyncSqlAgentStore(url)
        await store.schema.initialize()
        peak_checkouts = _peak_checkouts(store.engine.sync_engine)
        peak_open = _peak_open(store.engine.sync_engine)
        states = store.compression_state_store()

        async def work(task: int) -> None:
            for _ in range(INCREMENTS // 4):
                while True:
                    state = await states.load("shared") or CompressionState("shared")
                    bumped = replace(state, covered_tokens=state.covered_tokens + 1)
                    if await states.save(bumped, state.version):
                        break

        try:
            await asyncio.gather(*(work(task) for task in range(tasks)))
            return await states.load("shared"), peak_checkouts(), peak_open()
        finally:
            await store.aclose()

    with ConnectionCounter(dsn) as counter:
        final, peak, opened = asyncio.run(main())
    assert final is not None
    assert final.covered_tokens == final.version == tasks * (INCREMENTS // 4)
    assert 2 <= peak <= POOL_SIZE + MAX_OVERFLOW
    assert opened <= POOL_SIZE + MAX_OVERFLOW
    assert counter.peak <= POOL_SIZE + MAX_OVERFLOW


def _statements_by_checkout(engine: Any) -> list[list[str]]:
    """The statements the engine runs (their first word), grouped by the pool checkout of the
    connection each ran on: one list per checkout, in order."""
    from sqlalchemy import event

    checkouts: list[list[str]] = []

    def executed(_connection: Any, _cursor: Any, statement: str, *_: Any) -> None:
        checkouts[-1].append(statement.split()[0])

    def checked_out(*_: Any) -> None:
        checkouts.append([])

    event.listen(engine, "before_cursor_execute", executed)
    event.listen(engine, "checkout", checked_out)
    return checkouts


def _plain_agent() -> Agent:
    return Agent("pool", AsyncScriptedChatModel([AiMessage("done")], cycle=True))


def test_an_async_turn_checks_out_one_connection_per_unit_of_store_io(
    database: tuple[str, str],
) -> None:
    """A plain turn's store calls come in two units (taking the conversation and starting the
    turn; recording the reply and ending the turn): on PostgreSQL each unit runs on one
    connection, checked out (and pinged) once, instead of one per statement."""
    url, _ = database

    async def main() -> tuple[list[list[str]], int, list[str]]:
        store = AsyncSqlAgentStore(url)
        await store.schema.initialize()
        runner = AsyncAgentRunner(store)
        agent = _plain_agent()
        try:
            await runner.run(agent, "c", "hello")  # the first turn reads no turn status
            checkouts = _statements_by_checkout(store.engine.sync_engine)
            turn = await runner.run(agent, "c", "again")
            assert turn.status is TurnStatus.COMPLETED
            pool: Any = store.engine.sync_engine.pool
            stored = [m.message_id for m in await store.chat_memory("c").get_messages()]
            return checkouts, pool.checkedout(), stored
        finally:
            await runner.aclose()
            await store.aclose()

    checkouts, still_out, stored = asyncio.run(main())
    assert len(stored) == 4 and still_out == 0
    # acquire, insert the turn, read the history, insert the user message | renew, insert the
    # reply, update the turn, release | this test's read (call by call: 9 checkouts of one)
    assert checkouts == [
        ["INSERT", "INSERT", "SELECT", "INSERT"],
        ["UPDATE", "INSERT", "UPDATE", "DELETE"],
        ["SELECT"],
    ]


def test_an_async_turn_cancelled_inside_a_unit_returns_its_connection(
    database: tuple[str, str],
) -> None:
    """A turn cancelled while a statement of a unit is in flight leaves no connection checked
    out and no turn open: the next turn on the conversation runs."""
    url, _ = database
    from sqlalchemy import event

    async def main() -> tuple[int, TurnStatus | None, TurnStatus]:
        store = AsyncSqlAgentStore(url)
        await store.schema.initialize()
        runner = AsyncAgentRunner(store)
        agent = _plain_agent()
        engine = store.engine.sync_engine
        target: list[asyncio.Task[Any]] = []

        def cancel_at_the_ai_message(
            _c: Any, _cu: Any, statement: str, params: Any, *_: Any
        ) -> None:
            # the reply's insert, second statement of the unit that records it
            if target and statement.startswith("INSERT") and ":ai:" in str(params):
                target.pop().cancel()  # delivered at the statement's wait for the server

        event.listen(engine, "before_cursor_execute", cancel_at_the_ai_message)
        try:
            task = asyncio.ensure_future(runner.run(agent, "c", "hello", turn_id="t1"))
            target.append(task)
            with pytest.raises(asyncio.CancelledError):
                await task
            assert not target  # the cancel was delivered inside the unit
            pool: Any = engine.pool
            out = pool.checkedout()
            snapshot = await store.turn_store().load_turn("c", "t1")
            after = await runner.run(agent, "c", "next")
            return out, None if snapshot is None else snapshot.status, after.status
        finally:
            await runner.aclose()
            await store.aclose()

    out, cancelled, after = asyncio.run(main())
    assert out == 0
    assert cancelled is TurnStatus.CANCELLED
    assert after is TurnStatus.COMPLETED


def test_a_batch_in_a_unit_is_a_transaction_on_the_units_connection(
    database: tuple[str, str],
) -> None:
    """A batch write (``many``) in a unit of the async store on PostgreSQL runs as one
    transaction on the connection the unit holds (a unit never waits for a second connection
    while it holds one); the unit's statements after it commit by themselves again."""
    url, dsn = database
    import psycopg

    async def main() -> tuple[Any, list[list[str]], list[int], int]:
        store = AsyncSqlAgentStore(url)
        await store.schema.initialize()
        memory = store.chat_memory("c")
        checkouts = _statements_by_checkout(store.engine.sync_engine)
        seen: list[int] = []
        table = store._tables.messages.name

        def count_elsewhere() -> None:  # from another connection: what is committed
            with psycopg.connect(dsn, autocommit=True) as other:
                row = other.execute(f"SELECT count(*) FROM {table}").fetchone()
                seen.append(int(row[0]) if row else -1)

        async def work() -> tuple[list[bool], bool, bool]:
            batch = await memory.add_messages_if_absent(
                [UserMessage("a", message_id="m1"), UserMessage("b", message_id="m2")]
            )
            count_elsewhere()
            again = await memory.add_messages_if_absent([UserMessage("a", message_id="m1")])
            one = await memory.add_message_if_absent(UserMessage("c", message_id="m3"))
            count_elsewhere()
            return batch, again == [False], one

        try:
            result = await store._port.together("a test unit", work)
            pool: Any = store.engine.sync_engine.pool
            return result, checkouts, seen, pool.checkedout()
        finally:
            await store.aclose()

    result, checkouts, seen, still_out = asyncio.run(main())
    assert result == ([True, True], True, True)
    assert checkouts == [["INSERT", "INSERT", "INSERT"]]
    assert seen == [2, 3]
    assert still_out == 0


def test_units_on_a_callers_single_connection_engine_run_call_by_call(
    database: tuple[str, str],
) -> None:
    """A caller's PostgreSQL engine with one connection every task shares (``StaticPool``):
    a unit holds no connection of its own, so a call of another task never runs on the unit's
    connection meanwhile (whose return would end its autocommit): every write is committed,
    and no driver error escapes."""
    url, dsn = database
    import psycopg
    from sqlalchemy.ext.asyncio import create_async_engine
    from sqlalchemy.pool import StaticPool

    async def main() -> tuple[list[Any], str]:
        engine = create_async_engine(url, poolclass=StaticPool)
        store = AsyncSqlAgentStore(engine)
        try:
            await store.schema.initialize()
            memory = store.chat_memory("c")

            async def in_a_unit() -> None:
                for i in range(20):
                    await memory.add_message_if_absent(UserMessage("u", message_id=f"u{i}"))

            async def unit() -> None:
                await store._port.together("a test unit", in_a_unit)

            async def singles() -> None:
                other = store.chat_memory("d")
                for i in range(20):
                    await other.add_message_if_absent(UserMessage("s", message_id=f"s{i}"))

            results = await asyncio.gather(unit(), singles(), return_exceptions=True)
            return results, store._tables.messages.name
        finally:
            await store.aclose()
            await engine.dispose()

    results, table = asyncio.run(main())
    assert results == [None, None]
    with psycopg.connect(dsn, autocommit=True) as other:
        row = other.execute(f"SELECT count(*) FROM {table}").fetchone()
    assert row is not None and row[0] == 40


def test_a_unit_goes_on_in_autocommit_after_its_connection_is_dropped(
    database: tuple[str, str],
) -> None:
    """The server drops a unit's connection between its calls: the next call fails with a
    typed error, and the calls after it reconnect and commit by themselves (SQLAlchemy sets
    the engine's autocommit on a new connection only, not on a reconnect)."""
    url, dsn = database
    import psycopg
    import sqlalchemy as sa

    from agentctx_fast.errors import StoreError

    table = sa.Table("dropped", sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True))
    with psycopg.connect(dsn, autocommit=True) as setup:
        setup.execute("CREATE TABLE dropped (id int primary key)")

    def committed() -> int:
        with psycopg.connect(dsn, autocommit=True) as other:
            row = other.execute("SELECT count(*) FROM dropped").fetchone()
        return int(row[0]) if row else -1

    async def main() -> tuple[str, int, int]:
        store = AsyncSqlAgentStore(url)
        port = store._port

        async def work() -> tuple[str, int]:
            rows = await port.rows("reading the backend", sa.text("SELECT pg_backend_pid()"))
            with psycopg.connect(dsn, autocommit=True) as other:
                other.execute("SELECT pg_terminate_backend(%s)", (rows[0][0],))
            try:
                await port.changed("inserting", sa.insert(table).values(id=1))
                failed = "nothing"
            except StoreError as error:
                failed = type(error).__name__
            await port.changed("inserting", sa.insert(table).values(id=2))
            return failed, committed()  # seen from another connection, the unit still on

        try:
            failed, during = await port.together("a test unit", work)
            return failed, during, committed()
        finally:
            await store.aclose()

    failed, during, after = asyncio.run(main())
    assert failed == "StoreUnavailableError"
    assert (during, after) == (1, 1)


def test_a_unit_cancelled_in_a_batch_checks_out_no_second_connection(
    database: tuple[str, str],
) -> None:
    """A unit cancelled while its batch's statement runs: the cancellation comes through
    (the batch's connection, dropped, is not reconnected on the way out, which would check
    out another and could fail with a store error instead), nothing of the batch is written,
    and the unit's one connection is back."""
    url, _ = database
    import sqlalchemy as sa
    from sqlalchemy import event

    async def main() -> tuple[bool, int, int, int]:
        store = AsyncSqlAgentStore(url)
        await store.schema.initialize()
        engine = store.engine.sync_engine
        memory = store.chat_memory("c")
        checkouts: list[int] = []
        target: list[asyncio.Task[Any]] = []

        def cancel_at_the_batch(_c: Any, _cu: Any, statement: str, *_: Any) -> None:
            if target and statement.startswith("INSERT"):
                target.pop().cancel()

        event.listen(engine, "checkout", lambda *_: checkouts.append(1))
        event.listen(engine, "before_cursor_execute", cancel_at_the_batch)

        async def work() -> list[bool]:
            await store._port.rows("a read", sa.text("SELECT 1"))
            return await memory.add_messages_if_absent(
                [UserMessage("a", message_id="m1"), UserMessage("b", message_id="m2")]
            )

        try:
            task = asyncio.ensure_future(store._port.together("a test unit", work))
            target.append(task)
            try:
                await task
            except asyncio.CancelledError:
                pass
            event.remove(engine, "before_cursor_execute", cancel_at_the_batch)
            pool: Any = engine.pool
            taken, out = len(checkouts), pool.checkedout()
            return task.cancelled(), taken, out, len(await memory.get_messages())
        finally:
            await store.aclose()

    cancelled, checkouts, out, stored = asyncio.run(main())
    assert cancelled
    assert (checkouts, out, stored) == (1, 0, 0)


def test_a_batch_in_a_unit_begins_at_the_callers_isolation_level(
    database: tuple[str, str],
) -> None:
    """A batch (``run``) in a unit of a store on the caller's engine begins at the isolation
    level the engine's options set, as it does outside a unit."""
    url, _ = database
    from sqlalchemy.ext.asyncio import create_async_engine

    async def main() -> list[str]:
        engine = create_async_engine(url).execution_options(isolation_level="REPEATABLE READ")
        store = AsyncSqlAgentStore(engine)
        seen: list[str] = []

        def probe(connection: Any) -> None:
            seen.append(connection.exec_driver_sql("SHOW transaction_isolation").scalar())

        async def work() -> None:
            await store._port.run("in a unit", probe)

        try:
            await store._port.run("outside a unit", probe)
            await store._port.together("a test unit", work)
            return seen
        finally:
            await store.aclose()
            await engine.dispose()

    assert asyncio.run(main()) == ["repeatable read", "repeatable read"]


def test_a_failing_batch_in_a_unit_writes_nothing_and_the_unit_goes_on(
    database: tuple[str, str],
) -> None:
    """A batch in a unit that fails on its last row is one transaction: none of its rows is
    written, and the unit's next call commits by itself."""
    url, dsn = database
    import psycopg
    import sqlalchemy as sa

    from agentctx_fast.errors import StoreError

    table = sa.Table("batched", sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True))
    with psycopg.connect(dsn, autocommit=True) as setup:
        setup.execute("CREATE TABLE batched (id int primary key)")

    async def main() -> tuple[bool, int]:
        store = AsyncSqlAgentStore(url)
        port = store._port

        async def work() -> tuple[bool, int]:
            await port.changed("one row", sa.insert(table).values(id=9))
            try:
                await port.many("a batch", sa.insert(table), [{"id": 1}, {"id": 2}, {"id": 9}])
                failed = False
            except StoreError:
                failed = True
            await port.changed("one more row", sa.insert(table).values(id=3))
            with psycopg.connect(dsn, autocommit=True) as other:
                row = other.execute("SELECT count(*) FROM batched").fetchone()
            return failed, int(row[0]) if row else -1

        try:
            return await port.together("a test unit", work)
        finally:
            await store.aclose()

    assert asyncio.run(main()) == (True, 2)  # ids 9 and 3
