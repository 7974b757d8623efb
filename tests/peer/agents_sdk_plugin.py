"""A pytest plugin running the OpenAI Agents SDK's own tests on `AgentCtxSession`.

Loaded with ``-p agents_sdk_plugin`` (this directory on ``PYTHONPATH``) when pytest runs tests
from the SDK's unpacked source distribution; ``scripts/peer_suites.py`` drives it. At import,
before any SDK test module is collected, it puts a class of its own in place of each SDK session
class the tests construct (`SQLiteSession`, `AsyncSQLiteSession`, `SQLAlchemySession`,
`RedisSession`), in every module the tests import them from. Each is an `AgentCtxSession` on the
matching store of this library, taking the SDK class's constructor arguments:

- ``SQLiteSession(id, db_path)``: a blocking `SqlAgentStore` on that SQLite file (or an
  in-memory database of its own), so the blocking-store path (a worker thread) is exercised;
- ``AsyncSQLiteSession(id, db_path)``: an `AsyncSqlAgentStore` on that file;
- ``SQLAlchemySession(id, engine=...)`` / ``.from_url(id, url=...)``: an `AsyncSqlAgentStore`
  on that engine or URL;
- ``RedisSession(id, redis_client=...)`` / ``.from_url(id, url=...)``: an `AsyncRedisAgentStore`
  on that client or URL. The tests' ``REDIS_URL`` points at the real server the peer script
  started (``AGENTCTX_PEER_REDIS_URL``), in every mode.

``AGENTCTX_PEER_MODE``: ``sdk`` (the SDK's own classes: the baseline), ``plain`` (ours,
``window=None``: ``get_items`` returns what was stored) or ``window`` (ours,
``window=WindowOptions()``). Tests listed in ``agents_sdk_exclusions.toml`` for the mode are
deselected. ``AGENTCTX_PEER_REPORT`` names a JSON file the plugin writes at the end: every
outcome, the skip reasons, the exclusions applied and how many sessions of ours each test made
(the script fails a run of ours that made none).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import agents
import agents.extensions.memory
import agents.extensions.memory.advanced_sqlite_session
import agents.extensions.memory.async_sqlite_session
import agents.extensions.memory.encrypt_session
import agents.extensions.memory.redis_session
import agents.extensions.memory.sqlalchemy_session
import agents.memory
import agents.memory.sqlite_session
import pytest

from agentctx_fast.core.window import WindowOptions
from agentctx_fast.integrations.openai_agents import AgentCtxSession
from agentctx_fast.stores.redis import AsyncRedisAgentStore
from agentctx_fast.stores.sql import AsyncSqlAgentStore, SqlAgentStore

MODES = ("sdk", "plain", "window")
MODE = os.environ.get("AGENTCTX_PEER_MODE", "plain")
if MODE not in MODES:
    raise pytest.UsageError(f"AGENTCTX_PEER_MODE must be one of {MODES}, got {MODE!r}")
REDIS_URL = os.environ.get("AGENTCTX_PEER_REDIS_URL")
EXCLUSIONS = Path(__file__).with_name("agents_sdk_exclusions.toml")

_made = {"sessions": 0}
_made_by_test: dict[str, int] = {}
_count_lock = threading.Lock()
_current: list[str] = ["(collection)"]


def _window() -> WindowOptions | None:
    return WindowOptions() if MODE == "window" else None


def _counted() -> None:
    with _count_lock:
        _made["sessions"] += 1
        _made_by_test[_current[0]] = _made_by_test.get(_current[0], 0) + 1


def _table_prefix(sessions_table: str, messages_table: str) -> str:
    """The store's table prefix for the SDK's table names: the default names share one set of
    tables, other names another set (two sessions on other names in one file stay apart)."""
    if (sessions_table, messages_table) == ("agent_sessions", "agent_messages"):
        return "agent_"
    return f"{messages_table}_"


def _sqlite_url(db_path: str | Path) -> str:
    return "sqlite://" if str(db_path) == ":memory:" else f"sqlite:///{db_path}"


class SQLiteSession(AgentCtxSession):
    """`AgentCtxSession` on a blocking `SqlAgentStore` in the SQLite file ``db_path``."""

    def __init__(
        self,
        session_id: str,
        db_path: str | Path = ":memory:",
        sessions_table: str = "agent_sessions",
        messages_table: str = "agent_messages",
        session_settings: Any = None,
    ) -> None:
        store = SqlAgentStore(
            _sqlite_url(db_path), table_prefix=_table_prefix(sessions_table, messages_table)
        )
        store.schema.initialize()
        super().__init__(session_id, store, window=_window(), session_settings=session_settings)
        self.db_path = db_path
        self.sessions_table = sessions_table
        self.messages_table = messages_table
        self._sql_store = store
        _counted()

    def close(self) -> None:  # type: ignore[override]
        self._sql_store.close()


class AsyncSQLiteSession(AgentCtxSession):
    """`AgentCtxSession` on an `AsyncSqlAgentStore` in the SQLite file ``db_path``."""

    def __init__(
        self,
        session_id: str,
        db_path: str | Path = ":memory:",
        sessions_table: str = "agent_sessions",
        messages_table: str = "agent_messages",
        session_settings: Any = None,
    ) -> None:
        store = AsyncSqlAgentStore(
            _sqlite_url(db_path), table_prefix=_table_prefix(sessions_table, messages_table)
        )
        super().__init__(session_id, store, window=_window(), session_settings=session_settings)
        self.db_path = db_path
        self.sessions_table = sessions_table
        self.messages_table = messages_table
        self._sql_store = store
        self._create_tables = True  # as `from_url(create_tables=True)`: on first use
        _counted()

    async def close(self) -> None:
        await self._sql_store.aclose()


class SQLAlchemySession(AgentCtxSession):
    """`AgentCtxSession` on an `AsyncSqlAgentStore` on the caller's ``engine``."""

    def __init__(
        self,
        session_id: str,
        *,
        engine: Any,
        create_tables: bool = False,
        sessions_table: str = "agent_sessions",
        messages_table: str = "agent_messages",
        session_settings: Any = None,
        ensure_ascii: bool = True,
    ) -> None:
        store = AsyncSqlAgentStore(
            engine, table_prefix=_table_prefix(sessions_table, messages_table)
        )
        super().__init__(session_id, store, window=_window(), session_settings=session_settings)
        self._sql_store = store
        self._create_tables = create_tables
        _counted()

    @classmethod
    def from_url(  # type: ignore[override]
        cls,
        session_id: str,
        *,
        url: str,
        engine_kwargs: dict[str, Any] | None = None,
        session_settings: Any = None,
        **kwargs: Any,
    ) -> SQLAlchemySession:
        from sqlalchemy.ext.asyncio import create_async_engine

        engine = create_async_engine(url, **(engine_kwargs or {}))
        return cls(session_id, engine=engine, session_settings=session_settings, **kwargs)

    @property
    def engine(self) -> Any:
        return self._sql_store.engine


class RedisSession(AgentCtxSession):
    """`AgentCtxSession` on an `AsyncRedisAgentStore` on the caller's ``redis_client``."""

    def __init__(
        self,
        session_id: str,
        *,
        redis_client: Any,
        key_prefix: str = "agents:session",
        ttl: int | None = None,
        session_settings: Any = None,
    ) -> None:
        store = AsyncRedisAgentStore(redis_client, key_prefix=key_prefix, ttl_seconds=ttl)
        super().__init__(session_id, store, window=_window(), session_settings=session_settings)
        self._redis_store = store
        self._owns_redis = False
        _counted()

    @classmethod
    def from_url(  # type: ignore[override]
        cls,
        session_id: str,
        *,
        url: str,
        redis_kwargs: dict[str, Any] | None = None,
        session_settings: Any = None,
        **kwargs: Any,
    ) -> RedisSession:
        import redis.asyncio

        client = redis.asyncio.from_url(url, **(redis_kwargs or {}))
        session = cls(session_id, redis_client=client, session_settings=session_settings, **kwargs)
        session._owns_redis = True
        return session

    async def ping(self) -> bool:
        try:
            return bool(await self._redis_store.client.ping())
        except Exception:
            return False

    async def close(self) -> None:
        if self._owns_redis:
            self._owns_redis = False
            await self._redis_store.client.aclose()


OURS: dict[str, type[AgentCtxSession]] = {
    "SQLiteSession": SQLiteSession,
    "AsyncSQLiteSession": AsyncSQLiteSession,
    "SQLAlchemySession": SQLAlchemySession,
    "RedisSession": RedisSession,
}
# Every module the SDK's tests import these names from. The SDK's own modules that use
# `SQLiteSession` (AdvancedSQLiteSession's base, EncryptedSession's isinstance check) were
# imported above and keep the SDK's class.
HOMES = {
    "SQLiteSession": (agents, agents.memory, agents.memory.sqlite_session),
    "AsyncSQLiteSession": (
        agents.extensions.memory,
        agents.extensions.memory.async_sqlite_session,
    ),
    "SQLAlchemySession": (agents.extensions.memory, agents.extensions.memory.sqlalchemy_session),
    "RedisSession": (agents.extensions.memory, agents.extensions.memory.redis_session),
}

if MODE != "sdk":
    for _name, _homes in HOMES.items():
        for _module in _homes:
            setattr(_module, _name, OURS[_name])


# -- exclusions ----------------------------------------------------------------------------------


def load_exclusions(mode: str, path: Path = EXCLUSIONS) -> dict[str, str]:
    """The node ids (or id prefixes: a file, ``file::test``) excluded in ``mode``, each with its
    reason."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    out: dict[str, str] = {}
    for group in data.get("exclude", []):
        if mode in group.get("modes", ["sdk", "plain", "window"]):
            for test in group["tests"]:
                out[test] = group["reason"]
    return out


def _excluded(nodeid: str, exclusions: dict[str, str]) -> str | None:
    for test, reason in exclusions.items():
        if nodeid == test or nodeid.startswith((test + "::", test + "[")):
            return reason
    return None


# -- hooks ---------------------------------------------------------------------------------------

_report: dict[str, Any] = {"mode": MODE, "outcomes": {}, "skips": {}, "excluded": {}}


def pytest_configure(config: pytest.Config) -> None:
    if MODE == "sdk":
        return
    for name, homes in HOMES.items():
        for module in homes:
            found = getattr(module, name)
            if found is not OURS[name] or not issubclass(found, AgentCtxSession):
                raise pytest.UsageError(f"{module.__name__}.{name} is not AgentCtxSession's")


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    exclusions = load_exclusions(MODE)
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        reason = _excluded(item.nodeid, exclusions)
        if reason is None:
            kept.append(item)
        else:
            dropped.append(item)
            _report["excluded"][item.nodeid] = reason
        module = getattr(item, "module", None)
        if MODE != "sdk" and module is not None:
            for name, ours in OURS.items():  # the test module took our class, not the SDK's
                found = module.__dict__.get(name)
                if found is not None and found is not ours:
                    raise pytest.UsageError(f"{module.__name__}.{name} is the SDK's class")
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture(autouse=True)
def _peer_redis_url(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK's Redis tests reach the real server the peer script started."""
    module = request.module
    if REDIS_URL is not None and hasattr(module, "REDIS_URL"):
        monkeypatch.setattr(module, "REDIS_URL", REDIS_URL)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    _current[0] = item.nodeid
    try:
        return (yield)
    finally:
        _current[0] = "(between tests)"


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    outcomes = _report["outcomes"]
    if report.failed:
        outcomes[report.nodeid] = "failed"
    elif report.skipped:
        outcomes[report.nodeid] = "skipped"
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        _report["skips"][report.nodeid] = reason
    elif report.when == "call" and report.nodeid not in outcomes:
        outcomes[report.nodeid] = "passed"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    path = os.environ.get("AGENTCTX_PEER_REPORT")
    if not path:
        return
    _report["sessions_made"] = _made["sessions"]
    _report["sessions_by_test"] = dict(_made_by_test)
    _report["exitstatus"] = int(exitstatus)
    Path(path).write_text(json.dumps(_report, indent=1, sort_keys=True), encoding="utf-8")


if __name__ == "__main__":  # pragma: no cover
    sys.exit("load me with pytest -p agents_sdk_plugin")
