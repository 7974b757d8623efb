"""The I/O ports of the Redis store: its one implementation awaits them, blocking or async.

Every write is one Lua script (atomic on the server); reads are single commands. Scripts are
registered once per port and run by ``EVALSHA`` (redis-py loads them again after a restart).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from agentctx_fast.errors import SerializationError, StoreError, StoreUnavailableError
from agentctx_fast.stores._extras import missing_dependency

try:
    import redis
    from redis import exceptions as redis_exc
except ImportError as _error:
    raise missing_dependency("redis", _error) from _error


@contextmanager
def translated(action: str) -> Iterator[None]:
    """Redis errors become typed store errors."""
    try:
        yield
    except (redis_exc.ConnectionError, redis_exc.TimeoutError) as error:
        raise StoreUnavailableError(f"Redis unavailable while {action}: {error}") from error
    except redis_exc.RedisError as error:
        raise StoreError(f"Redis error while {action}: {error}") from error


def raw(value: object) -> bytes:
    """A reply as bytes: the store's own client returns bytes; a caller's may decode to str."""
    if isinstance(value, str):
        return value.encode("utf-8")
    if not isinstance(value, bytes):
        raise SerializationError(f"unexpected Redis reply of type {type(value).__name__}")
    return value


def text(value: Any) -> str:
    """A reply as str."""
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


class RedisPort:
    """The port over a Redis client: a blocking `redis.Redis`, whose replies come back as they
    are, or a `redis.asyncio.Redis`, whose replies are awaited."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self._scripts: dict[str, Any] = {}

    async def script(self, action: str, lua: str, keys: list[str], args: list[Any]) -> Any:
        """Run the Lua script ``lua`` atomically on the server."""
        handle = self._scripts.get(lua)
        if handle is None:
            handle = self._scripts[lua] = self.client.register_script(lua)
        with translated(action):
            return await _reply(handle(keys=keys, args=args))

    async def command(self, action: str, name: str, *args: Any) -> Any:
        """Run one Redis command (a client method by name: ``hget``, ``llen``, …)."""
        with translated(action):
            return await _reply(getattr(self.client, name)(*args))


async def _reply(reply: Any) -> Any:
    return await reply if inspect.isawaitable(reply) else reply


__all__ = ["RedisPort", "raw", "redis", "text", "translated"]
