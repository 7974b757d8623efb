"""Bounded waits on SQLite (SPEC §20): a store call that meets another connection's write lock
waits the configured busy timeout once, then fails with `StoreUnavailableError`."""

from __future__ import annotations

import asyncio
import inspect
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from agentctx_fast import (
    Agent,
    AgentRunner,
    AiMessage,
    CompressionState,
    ScriptedChatModel,
    StoreBusyError,
    StoreUnavailableError,
    Tool,
    ToolCall,
    TurnStatus,
    UserMessage,
    validate_tool_protocol,
)
from agentctx_fast.stores.sql import AsyncSqlAgentStore, SqlAgentStore

BUSY_TIMEOUT = 0.3


@pytest.fixture
def path(tmp_path: Path) -> str:
    database = str(tmp_path / "busy.db")
    store = SqlAgentStore(f"sqlite:///{database}")
    store.schema.initialize()
    store.chat_memory("c1").add_message_if_absent(UserMessage("hi", message_id="m1"))
    store.close()
    return database


@pytest.fixture
def write_lock(path: str) -> Iterator[None]:
    """Another connection holds the database's write lock for the whole test."""
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        holder.execute("ROLLBACK")
        holder.close()


class Attempts:
    """Statements the store's engine ran (the async store dispatches its engine's statement
    events too), and, on the blocking store, how many met a locked database."""

    def __init__(self, engine: sa.engine.Engine) -> None:
        self.statements: list[str] = []
        self.busy = 0
        sa.event.listen(engine, "before_cursor_execute", self._statement)
        sa.event.listen(engine, "handle_error", self._error)

    def _statement(self, _c: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        self.statements.append(statement.split()[0])

    def _error(self, context: Any) -> None:
        if "database is locked" in str(context.original_exception):
            self.busy += 1


def _writes(store: Any) -> list[tuple[str, Callable[[], Any]]]:
    memory = store.chat_memory("c1")
    turns = store.turn_store()
    states = store.compression_state_store()
    return [
        ("add", lambda: memory.add_message_if_absent(UserMessage("x", message_id="m2"))),
        ("batch", lambda: memory.add_messages_if_absent([UserMessage("y", message_id="m3")])),
        ("update", lambda: memory.update_message(UserMessage("z", message_id="m1"), 0)),
        ("state", lambda: states.save(CompressionState("c1"), 0)),
        ("acquire", lambda: turns.acquire_conversation("c1", "t1", "me", 30.0, 1.0)),
    ]


def _check_one_wait(name: str, attempts: Attempts, error: Any, elapsed: float) -> None:
    """One statement ran (the one that waited and failed): no retry, no second statement
    waiting its own busy timeout."""
    assert isinstance(error, StoreUnavailableError), (name, error)
    assert "database is locked" in str(error)
    assert len(attempts.statements) == 1, (name, attempts.statements)
    assert elapsed < 2 * BUSY_TIMEOUT, (name, elapsed)  # a sanity bound only


def test_a_blocking_write_waits_the_configured_busy_timeout_once(
    path: str, write_lock: None
) -> None:
    store = SqlAgentStore(f"sqlite:///{path}?timeout={BUSY_TIMEOUT}")
    try:
        with store.engine.connect() as connection:
            assert connection.exec_driver_sql("PRAGMA busy_timeout").scalar() == 300
        for name, write in _writes(store):
            attempts = Attempts(store.engine)
            start = time.perf_counter()
            with pytest.raises(StoreUnavailableError) as caught:
                write()
            _check_one_wait(name, attempts, caught.value, time.perf_counter() - start)
            assert attempts.busy == 1, name
            sa.event.remove(store.engine, "before_cursor_execute", attempts._statement)
            sa.event.remove(store.engine, "handle_error", attempts._error)
    finally:
        store.close()


def test_an_async_write_waits_the_configured_busy_timeout_once(path: str, write_lock: None) -> None:
    async def main() -> None:
        store = AsyncSqlAgentStore(f"sqlite:///{path}?timeout={BUSY_TIMEOUT}")
        try:
            engine = store.engine
            assert isinstance(engine, sa.engine.Engine)  # the blocking store's
            with engine.connect() as connection:
                timeout = connection.exec_driver_sql("PRAGMA busy_timeout")
                assert timeout.scalar() == 300
            for name, write in _writes(store):
                attempts = Attempts(engine)
                start = time.perf_counter()
                with pytest.raises(StoreUnavailableError) as caught:
                    result = write()
                    assert inspect.isawaitable(result)
                    await result
                _check_one_wait(name, attempts, caught.value, time.perf_counter() - start)
                sa.event.remove(engine, "before_cursor_execute", attempts._statement)
                sa.event.remove(engine, "handle_error", attempts._error)
        finally:
            await store.aclose()

    asyncio.run(main())


def test_a_turn_that_meets_a_locked_database_fails_after_one_busy_timeout(path: str) -> None:
    """A tool's result cannot be stored (another connection took the write lock while the
    tool ran): `run` fails after one busy timeout, not one per clean-up write; the turn is
    left to the next run, which closes it once its lease expires and the lock is gone."""
    store = SqlAgentStore(f"sqlite:///{path}?timeout={BUSY_TIMEOUT}")
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)

    def lock_the_database() -> str:
        holder.execute("BEGIN IMMEDIATE")
        return "ok"

    clock = [1_000.0]
    agent = Agent(
        "support",
        ScriptedChatModel([
            AiMessage("", tool_calls=(ToolCall("c1", "lock", "{}"),)), AiMessage("done"),
            AiMessage("done again"),
        ]),
        tools=[Tool("lock", lock_the_database, "Takes the write lock.", {"type": "object"})],
    )  # fmt: skip
    runner = AgentRunner(store, lease_seconds=5.0, clock=lambda: clock[0])
    attempts = Attempts(store.engine)
    try:
        with pytest.raises(StoreBusyError, match="database is locked"):
            runner.run(agent, "c1", "hello", turn_id="t1")
        assert attempts.busy == 1  # the write that met the lock; no clean-up write waited
        holder.execute("ROLLBACK")
        clock[0] += 6.0
        turn = runner.run(agent, "c1", "again", turn_id="t2")
        assert turn.status is TurnStatus.COMPLETED
        assert runner.turn_store.load_turn("c1", "t1").status is TurnStatus.FAILED
        assert validate_tool_protocol(store.chat_memory("c1").get_messages()) == []
    finally:
        runner.close()
        holder.close()
        store.close()
