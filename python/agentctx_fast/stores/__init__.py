"""Stores (SPEC §12): chat memories and compression states in memory, SQL or Redis.

`SqlAgentStore` needs SQLAlchemy (and psycopg for PostgreSQL), `RedisAgentStore` needs
redis-py; they are imported on first use, so the in-memory store works without either.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentctx_fast.stores.memory import InMemoryAgentStore
from agentctx_fast.stores.serializer import AgentStoreSerializer, JsonAgentStoreSerializer

if TYPE_CHECKING:
    from agentctx_fast.stores.redis import RedisAgentStore
    from agentctx_fast.stores.sql import SqlAgentStore

__all__ = [
    "AgentStoreSerializer",
    "InMemoryAgentStore",
    "JsonAgentStoreSerializer",
    "RedisAgentStore",
    "SqlAgentStore",
]


def __getattr__(name: str) -> Any:
    if name == "SqlAgentStore":
        from agentctx_fast.stores.sql import SqlAgentStore

        return SqlAgentStore
    if name == "RedisAgentStore":
        from agentctx_fast.stores.redis import RedisAgentStore

        return RedisAgentStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
