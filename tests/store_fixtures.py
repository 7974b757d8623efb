"""Store fixtures: one parametrised ``store`` over memory, SQLite, PostgreSQL, Redis and a Redis
Cluster of three masters (``redis-cluster``: the store on a `redis.cluster.RedisCluster`)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentctx_fast.stores import InMemoryAgentStore
from servers import PostgresServer, RedisServer

__all__ = [
    "ASYNC_STORE_KINDS",
    "SERVER_KINDS",
    "STORE_KINDS",
    "async_cluster_store",
    "cluster_store",
    "make_async_store",
    "make_store",
    "new_conversation_id",
    "process_store",
    "server_store_kind",
    "sqlite_path",
    "store",
    "store_kind",
    "store_url",
]

STORE_KINDS = ("memory", "sqlite", "postgresql", "redis", "redis-cluster")
ASYNC_STORE_KINDS = (
    "async-memory",
    "async-sqlite",
    "async-postgresql",
    "async-redis",
    "async-redis-cluster",
)
SERVER_KINDS = (
    "postgresql",
    "redis",
    "redis-cluster",
    "async-postgresql",
    "async-redis",
    "async-redis-cluster",
)


def new_conversation_id() -> str:
    """A conversation id no other test uses, so session-wide stores need no cleanup."""
    return f"conv-{uuid.uuid4().hex}"


def make_store(kind: str, request: pytest.FixtureRequest, **options: Any) -> Any:
    """A fresh store of ``kind``; servers come from the session fixtures."""
    if kind.startswith("async-"):
        return _bridged(kind.removeprefix("async-"), request, **options)
    if kind == "memory":
        return InMemoryAgentStore()
    if kind == "sqlite":
        from agentctx_fast.stores.sql import SqlAgentStore

        path: Path = request.getfixturevalue("sqlite_path")
        sql = SqlAgentStore(f"sqlite:///{path}", **options)
        sql.schema.initialize()
        return sql
    if kind == "postgresql":
        from agentctx_fast.stores.sql import SqlAgentStore

        server: PostgresServer = request.getfixturevalue("postgres_server")
        sql = SqlAgentStore(server.url, **options)
        sql.schema.initialize()
        return sql
    if kind == "redis":
        from agentctx_fast.stores.redis import RedisAgentStore

        redis_server: RedisServer = request.getfixturevalue("redis_server")
        return RedisAgentStore(redis_server.url, **options)
    if kind == "redis-cluster":
        return cluster_store(str(store_url(kind, request)), **options)
    raise ValueError(f"unknown store kind {kind!r}")


def _bridged(kind: str, request: pytest.FixtureRequest, **options: Any) -> Any:
    """The async store of ``kind`` behind the blocking interface, with its blocking twin on the
    same database for tests that read or corrupt records directly."""
    from async_bridge import BridgedStore

    twin = None if kind == "memory" else make_store(kind, request, **options)
    url = store_url(kind, request)

    async def factory() -> Any:
        return await make_async_store(kind, url, **options)

    return BridgedStore(factory, twin)


def store_url(kind: str, request: pytest.FixtureRequest) -> str | None:
    """The database URL of a store kind's test server (None for the in-memory store)."""
    if kind == "sqlite":
        path: Path = request.getfixturevalue("sqlite_path")
        return f"sqlite:///{path}"
    if kind == "postgresql":
        return str(request.getfixturevalue("postgres_server").url)
    if kind == "redis":
        return str(request.getfixturevalue("redis_server").url)
    if kind == "redis-cluster":
        return str(request.getfixturevalue("redis_cluster").url)
    return None


async def make_async_store(kind: str, url: str | None, **options: Any) -> Any:
    """A fresh async store of ``kind`` on ``url`` (its schema initialized), on the running loop."""
    from agentctx_fast.stores import AsyncInMemoryAgentStore

    if kind == "memory":
        return AsyncInMemoryAgentStore()
    assert url is not None
    if kind in ("sqlite", "postgresql"):
        from agentctx_fast.stores.sql import AsyncSqlAgentStore

        sql = AsyncSqlAgentStore(url, **options)
        await sql.schema.initialize()
        return sql
    if kind == "redis":
        from agentctx_fast.stores.redis import AsyncRedisAgentStore

        return AsyncRedisAgentStore(url, **options)
    if kind == "redis-cluster":
        return async_cluster_store(url, **options)
    raise ValueError(f"unknown store kind {kind!r}")


def cluster_store(url: str, **options: Any) -> Any:
    """A `RedisAgentStore` on a `RedisCluster` client made from a startup node's ``url``; its
    ``close`` closes that client too (a store closes only clients it made itself)."""
    from redis.cluster import RedisCluster

    from agentctx_fast.stores.redis import RedisAgentStore

    class ClusterStore(RedisAgentStore):
        def close(self) -> None:
            self.client.close()

    return ClusterStore(RedisCluster.from_url(url), **options)


def async_cluster_store(url: str, **options: Any) -> Any:
    """`cluster_store` for asyncio: an `AsyncRedisAgentStore` on redis.asyncio's cluster
    client, closed by ``aclose``; make it on the loop that uses it."""
    from redis.asyncio.cluster import RedisCluster

    from agentctx_fast.stores.redis import AsyncRedisAgentStore

    class AsyncClusterStore(AsyncRedisAgentStore):
        async def aclose(self) -> None:
            await self.client.aclose()

    return AsyncClusterStore(RedisCluster.from_url(url), **options)


@pytest.fixture(scope="session")
def sqlite_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sqlite") / "agent.db"


@pytest.fixture(params=STORE_KINDS)
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(name="store_kind", params=STORE_KINDS + ASYNC_STORE_KINDS)
def every_store_kind(request: pytest.FixtureRequest) -> str:
    """``store_kind`` over every store, blocking and async (the async ones behind a blocking
    bridge): a module that imports this runs its ``store`` tests on all of them. Not in
    ``__all__``: the conftest's ``store_kind`` stays the blocking stores'."""
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


@pytest.fixture(params=("sqlite", "postgresql", "redis", "redis-cluster"))
def process_store(request: pytest.FixtureRequest) -> Iterator[tuple[str, str, Any]]:
    """``(kind, url, store)`` of a store child processes can open too (SQLite on a file)."""
    kind = str(request.param)
    store = make_store(kind, request)  # creates the SQL tables before any child starts
    try:
        yield kind, str(store_url(kind, request)), store
    finally:
        store.close()
