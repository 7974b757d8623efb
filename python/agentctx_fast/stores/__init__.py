"""Stores (SPEC §12): chat memories and compression states in memory, SQL or Redis.

`SqlAgentStore` / `AsyncSqlAgentStore` need SQLAlchemy (and psycopg for PostgreSQL, aiosqlite
for async SQLite), `RedisAgentStore` / `AsyncRedisAgentStore` need redis-py; they are imported
on first use, so the in-memory stores work without either, and a missing package raises
`MissingDependencyError` naming the extra to install.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from agentctx_fast.stores._lifecycle import Purged
from agentctx_fast.stores.memory import AsyncInMemoryAgentStore, InMemoryAgentStore
from agentctx_fast.stores.serializer import AgentStoreSerializer, JsonAgentStoreSerializer

if TYPE_CHECKING:
    from agentctx_fast.stores.redis import AsyncRedisAgentStore, RedisAgentStore
    from agentctx_fast.stores.sql import AsyncSqlAgentStore, SqlAgentStore

__all__ = [
    "AgentStoreSerializer",
    "AsyncInMemoryAgentStore",
    "AsyncRedisAgentStore",
    "AsyncSqlAgentStore",
    "InMemoryAgentStore",
    "JsonAgentStoreSerializer",
    "Purged",
    "RedisAgentStore",
    "SqlAgentStore",
]


_LAZY = {
    "SqlAgentStore": "agentctx_fast.stores.sql",
    "AsyncSqlAgentStore": "agentctx_fast.stores.sql",
    "RedisAgentStore": "agentctx_fast.stores.redis",
    "AsyncRedisAgentStore": "agentctx_fast.stores.redis",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
