"""Session fixtures with real PostgreSQL and Redis servers (see servers.py).

Import into conftest.py with ``from server_fixtures import *``. The CI rule: with CI=true a
server (or client library) that is not there fails the run; elsewhere the tests needing it are
skipped with the reason.
"""

from __future__ import annotations

import importlib
import os
import subprocess
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import TypeVar

import pytest

from servers import PostgresServer, RedisClusterServer, RedisServer, Server, ServerUnavailable

__all__ = [
    "postgres_server",
    "redis_cluster",
    "redis_server",
    "require_module",
    "require_server",
]

S = TypeVar("S", bound=Server | RedisClusterServer)


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def _unavailable(reason: str) -> None:
    if _in_ci():
        pytest.fail(f"{reason} (CI=true: a missing server fails the run)", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def require_server(factory: Callable[[], S]) -> S:
    """The server ``factory()`` returns, started; if it cannot start, fail in CI, else skip."""
    server: S | None = None
    try:
        server = factory()
        if not server.running:
            server.start()
    except (ServerUnavailable, OSError, subprocess.SubprocessError) as exc:
        if server is not None:
            server.close()
        name = type(server).__name__ if server is not None else getattr(factory, "__name__", "")
        _unavailable(f"{name or 'server'} unavailable: {exc}")
        raise AssertionError("unreachable") from exc  # pytest.fail/skip raised already
    return server


def require_module(name: str) -> ModuleType:
    """``importlib.import_module(name)``; if it is not installed, fail in CI, else skip."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        _unavailable(f"Python module {name!r} not installed: {exc}")
        raise AssertionError("unreachable") from exc


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A PostgreSQL server for the session: ``.url`` (SQLAlchemy), ``.dsn`` (libpq)."""
    server = require_server(PostgresServer)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """A Redis server for the session: ``.url`` is ``redis://127.0.0.1:PORT/0``."""
    server = require_server(RedisServer)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisClusterServer]:
    """A Redis Cluster of three masters for the session: ``.url`` is a startup node's
    ``redis://127.0.0.1:PORT/0`` (for ``redis.cluster.RedisCluster.from_url``)."""
    cluster = require_server(RedisClusterServer)
    try:
        yield cluster
    finally:
        cluster.close()
