"""`schema.initialize()` run by several initializers at once (threads, processes, event
loops) succeeds for all of them, on SQLite and PostgreSQL, blocking and async. Barriers in
SQLAlchemy's statement events hold each initializer at its first ``CREATE TABLE`` until all
are there, so the race is run every time, not by luck."""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import pytest
import sqlalchemy as sa

from agentctx_fast import UserMessage
from agentctx_fast.stores.sql import AsyncSqlAgentStore, SqlAgentStore
from store_fixtures import store_url

INITIALIZERS = 2


def hold_at_first_create(engine: sa.engine.Engine, barrier: Any) -> None:
    """Each connection's first ``CREATE TABLE`` waits until every initializer reached one
    (an initializer whose turn depends on another's commit, as on PostgreSQL, goes on once
    the barrier breaks: it cannot be reached by both at once, which is the point)."""
    seen: set[int] = set()

    def before(connection: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.lstrip().startswith("CREATE TABLE") and id(connection) not in seen:
            seen.add(id(connection))
            try:
                barrier.wait(5)
            except threading.BrokenBarrierError:
                pass

    sa.event.listen(engine, "before_cursor_execute", before)


def _check_works(url: str, prefix: str) -> None:
    store = SqlAgentStore(url, table_prefix=prefix)
    try:
        memory = store.chat_memory("c1")
        assert memory.add_message_if_absent(UserMessage("hi", message_id="u1"))
        assert [m.message_id for m in memory.get_messages()] == ["u1"]
    finally:
        store.close()


def _in_threads(work: Callable[[], Any]) -> list[BaseException]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as error:  # reported by the test
            errors.append(error)

    threads = [threading.Thread(target=run) for _ in range(INITIALIZERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads), "an initializer hangs"
    return errors


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_threads_initialize_one_engine_at_once(kind: str, request: pytest.FixtureRequest) -> None:
    url = str(store_url(kind, request))
    prefix = f"t{uuid.uuid4().hex[:10]}_"
    engine = sa.create_engine(url)
    hold_at_first_create(engine, threading.Barrier(INITIALIZERS))
    store = SqlAgentStore(engine, table_prefix=prefix)
    try:
        assert _in_threads(store.schema.initialize) == []
    finally:
        engine.dispose()
    _check_works(url, prefix)


def initialize_in_a_process(url: str, prefix: str, barrier: Any) -> None:
    """A child process: its own engine, held at its first ``CREATE TABLE`` by ``barrier``."""
    engine = sa.create_engine(url)
    hold_at_first_create(engine, barrier)
    try:
        SqlAgentStore(engine, table_prefix=prefix).schema.initialize()
    finally:
        engine.dispose()


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_processes_initialize_at_once(kind: str, request: pytest.FixtureRequest) -> None:
    url = str(store_url(kind, request))
    prefix = f"p{uuid.uuid4().hex[:10]}_"
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        barrier = manager.Barrier(INITIALIZERS)
        with ProcessPoolExecutor(INITIALIZERS, mp_context=context) as pool:
            futures = [
                pool.submit(initialize_in_a_process, url, prefix, barrier)
                for _ in range(INITIALIZERS)
            ]
            for future in futures:
                future.result(timeout=120)
    _check_works(url, prefix)


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_event_loops_initialize_one_async_store_at_once(
    kind: str, request: pytest.FixtureRequest
) -> None:
    """Two threads each running ``asyncio.run(store.schema.initialize())`` on one store."""
    url = str(store_url(kind, request))
    prefix = f"a{uuid.uuid4().hex[:10]}_"
    store = AsyncSqlAgentStore(url, table_prefix=prefix)
    engine = getattr(store.engine, "sync_engine", store.engine)  # SQLite's: a blocking engine
    hold_at_first_create(engine, threading.Barrier(INITIALIZERS))
    start = threading.Barrier(INITIALIZERS)

    def initialize() -> None:
        start.wait(10)
        asyncio.run(asyncio.wait_for(store.schema.initialize(), 30))

    try:
        assert _in_threads(initialize) == []
    finally:
        asyncio.run(store.aclose())
    _check_works(url, prefix)
