"""Stores: chat memories and compression states in memory, SQL or Redis.

`SqlAgentStore` / `AsyncSqlAgentStore` need SQLAlchemy (and psycopg for PostgreSQL),
`RedisAgentStore` / `AsyncRedisAgentStore` need redis-py; they are imported
on first use, so the in-memory stores work without either, and a missing package raises
`MissingDependencyError` naming the extra to install (where the store is made, when the name
was imported from this package: ``from agentctx_fast import *`` works without the extras).
"""

from __future__ import annotations

import functools
import importlib
from typing import TYPE_CHECKING, Any

from agentctx_fast._extras import stand_in
from agentctx_fast.errors import MissingDependencyError
from agentctx_fast.stores.base import AgentStore, AsyncAgentStore
from agentctx_fast.stores.in_memory import AsyncInMemoryAgentStore, InMemoryAgentStore
from agentctx_fast.stores.lifecycle import Purged
from agentctx_fast.stores.serializer import AgentStoreSerializer, JsonAgentStoreSerializer

if TYPE_CHECKING:
    from agentctx_fast.stores.redis import AsyncRedisAgentStore, RedisAgentStore
    from agentctx_fast.stores.sql import AsyncSqlAgentStore, SqlAgentStore

__all__ = [
    "AgentStore",
    "AgentStoreSerializer",
    "AsyncAgentStore",
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
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return _load(name)


@functools.cache
def _load(name: str) -> Any:
    try:
        return getattr(importlib.import_module(_LAZY[name]), name)
    except MissingDependencyError as error:
        return stand_in(name, error)
