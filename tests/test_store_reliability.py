"""Reliability against the real servers: many processes, one conversation; a server that dies."""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import pytest

from agentctx_fast import StoreUnavailableError, UserMessage
from agentctx_fast.memory import ChatMemory
from server_fixtures import require_server
from servers import PostgresServer, RedisServer, Server
from store_fixtures import new_conversation_id
from store_workers import add_same_message, cas_increments, open_store, write_until_unavailable

PROCESSES = 8
SAVES_PER_PROCESS = 200


def _pool(workers: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))


def _url(kind: str, request: pytest.FixtureRequest) -> str:
    server: Server = request.getfixturevalue(
        "postgres_server" if kind == "postgresql" else "redis_server"
    )
    if kind == "postgresql":
        store = open_store(kind, server.url)  # tables exist before the children race
        store.schema.initialize()
        store.close()
    return str(server.url)


def test_cas_from_many_processes_loses_nothing(
    server_store_kind: str, request: pytest.FixtureRequest
) -> None:
    url = _url(server_store_kind, request)
    conversation_id = new_conversation_id()
    with _pool(PROCESSES) as pool:
        futures = [
            pool.submit(cas_increments, server_store_kind, url, conversation_id, SAVES_PER_PROCESS)
            for _ in range(PROCESSES)
        ]
        outcomes = [f.result(timeout=300) for f in futures]
    wins = sum(w for w, _ in outcomes)
    conflicts = sum(c for _, c in outcomes)
    assert wins + conflicts == PROCESSES * SAVES_PER_PROCESS
    assert wins >= SAVES_PER_PROCESS  # at least one writer makes progress each round
    store = open_store(server_store_kind, url)
    try:
        state = store.compression_state_store().load(conversation_id)
    finally:
        store.close()
    assert state is not None
    assert state.version == wins
    assert state.covered_tokens == wins  # every win incremented exactly what it had loaded


def test_add_if_absent_from_many_processes_has_one_winner(
    server_store_kind: str, request: pytest.FixtureRequest
) -> None:
    url = _url(server_store_kind, request)
    conversation_id = new_conversation_id()
    with _pool(4) as pool:
        futures = [
            pool.submit(add_same_message, server_store_kind, url, conversation_id, f"copy {i}")
            for i in range(16)
        ]
        outcomes = [f.result(timeout=120) for f in futures]
    assert outcomes.count(True) == 1
    store = open_store(server_store_kind, url)
    try:
        stored = store.chat_memory(conversation_id).get_messages()
    finally:
        store.close()
    assert [m.message_id for m in stored] == ["once"]


@pytest.fixture(params=("postgresql", "redis"))
def own_server(request: pytest.FixtureRequest) -> Iterator[tuple[str, Server]]:
    """A server of this test's own, so stopping it disturbs no other test."""
    kind = str(request.param)
    server = require_server(PostgresServer if kind == "postgresql" else RedisServer)
    try:
        yield kind, server
    finally:
        server.close()


def _check_consistent(memory: ChatMemory, acknowledged: list[str], in_flight: str | None) -> None:
    stored = [m.message_id for m in memory.get_messages()]
    appending = in_flight is not None and in_flight.startswith("m")
    allowed = [*acknowledged, in_flight] if appending else acknowledged
    assert stored == allowed[: len(stored)]
    assert stored[: len(acknowledged)] == acknowledged  # every acknowledged append survived
    for message_id in stored:
        message = memory.get_message(message_id)
        assert message is not None
        assert message.text == "x" * 2000  # whole records only


@pytest.mark.parametrize("kill", [False, True], ids=["stop", "kill"])
def test_server_stopped_mid_run(own_server: tuple[str, Server], kill: bool) -> None:
    kind, server = own_server
    if kind == "postgresql":
        setup = open_store(kind, server.url)
        setup.schema.initialize()
        setup.close()
    conversation_id = new_conversation_id()
    result: list[Any] = []
    writer = threading.Thread(
        target=lambda: result.append(
            write_until_unavailable(kind, server.url, conversation_id, 100_000)
        )
    )
    writer.start()
    time.sleep(1.0)
    server.stop(kill=kill)
    writer.join(timeout=120)
    assert not writer.is_alive()
    acknowledged, in_flight, error = result[0]
    assert error == "StoreUnavailableError", error
    assert len(acknowledged) > 10  # the run was really under way

    store = open_store(kind, server.url)
    try:
        with pytest.raises(StoreUnavailableError):
            store.chat_memory(conversation_id).get_messages(1)
        server.start()
        memory = store.chat_memory(conversation_id)
        _check_consistent(memory, acknowledged, in_flight)
        state = store.compression_state_store().load(conversation_id)
        assert state is not None
        # One CAS save per acknowledged append, plus possibly the one in flight.
        assert state.covered_tokens == state.version
        assert len(acknowledged) - 1 <= state.version <= len(acknowledged)
        # The store works again after the restart.
        assert memory.add_message_if_absent(UserMessage("after", message_id="after"))
        assert memory.get_messages(1)[0].message_id == "after"
    finally:
        store.close()
