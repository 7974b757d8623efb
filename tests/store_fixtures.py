"""Store fixtures: one parametrised ``store`` over memory, SQLite, PostgreSQL and Redis."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentctx_fast.stores import InMemoryAgentStore
from servers import PostgresServer, RedisServer

__all__ = [
    "STORE_KINDS",
    "make_store",
    "new_conversation_id",
    "server_store_kind",
    "sqlite_path",
    "store",
    "store_kind",
]

STORE_KINDS = ("memory", "sqlite", "postgresql", "redis")


def new_conversation_id() -> str:
    """A conversation id no other test uses, so session-wide stores need no cleanup."""
    return f"conv-{uuid.uuid4().hex}"


def make_store(kind: str, request: pytest.FixtureRequest, **options: Any) -> Any:
    """A fresh store of ``kind``; servers come from the session fixtures."""
    if kind == "memory":
        return InMemoryAgentStore()
    if kind == "sqlite":
        from agentctx_fast.stores.sql import SqlAgentStore

        path: Path = request.getfixturevalue("sqlite_path")
        sql = SqlAgentStore(f"sqlite:///{path}", **options)
        sql.schema().initialize()
        return sql
    if kind == "postgresql":
        from agentctx_fast.stores.sql import SqlAgentStore

        server: PostgresServer = request.getfixturevalue("postgres_server")
        sql = SqlAgentStore(server.url, **options)
        sql.schema().initialize()
        return sql
    if kind == "redis":
        from agentctx_fast.stores.redis import RedisAgentStore

        redis_server: RedisServer = request.getfixturevalue("redis_server")
        return RedisAgentStore(redis_server.url, **options)
    raise ValueError(f"unknown store kind {kind!r}")


@pytest.fixture(scope="session")
def sqlite_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sqlite") / "agent.db"


@pytest.fixture(params=STORE_KINDS)
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=("postgresql", "redis"))
def server_store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store(store_kind: str, request: pytest.FixtureRequest) -> Iterator[Any]:
    opened = make_store(store_kind, request)
    try:
        yield opened
    finally:
        opened.close()



