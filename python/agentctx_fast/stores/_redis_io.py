"""The I/O ports of the Redis store: its one implementation awaits them, blocking or async.

Every write is one Lua script (atomic on the server); reads are single commands. Scripts are
registered once per port and run by ``EVALSHA`` (redis-py loads them again after a restart,
and on a cluster on every master when a node answers ``NOSCRIPT``).

On Redis Cluster a script may only touch keys of one hash slot, so every key of a conversation
carries the same hash tag (`conversation_tag`), and redis-py's cluster clients route each
``EVALSHA`` and each single-key read to the master of that slot.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from agentctx_fast.errors import SerializationError, StoreError, StoreUnavailableError
from agentctx_fast.stores._extras import missing_dependency

try:
    import redis
    from redis import exceptions as redis_exc
    from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
    from redis.cluster import RedisCluster
except ImportError as _error:
    raise missing_dependency("redis", _error) from _error


_UNAVAILABLE = (
    redis_exc.ConnectionError,
    redis_exc.TimeoutError,
    redis_exc.ClusterDownError,
    redis_exc.SlotNotCoveredError,
)


_ERRORS = (redis_exc.RedisError, redis_exc.RedisClusterException)


@contextmanager
def translated(action: str) -> Iterator[None]:
    """Redis errors become typed store errors (a cluster that is down or has a slot without a
    master is unavailable too)."""
    try:
        yield
    except _ERRORS as error:
        raise _typed(error, action) from error


def _typed(error: BaseException, action: str) -> StoreError:
    if isinstance(error, _UNAVAILABLE):
        return StoreUnavailableError(f"Redis unavailable while {action}: {error}")
    return StoreError(f"Redis error while {action}: {error}")


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


def conversation_tag(conversation_id: str) -> str:
    """The ``{…}`` hash tag of a conversation's keys: the id with ``%``, ``{`` and ``}``
    percent-encoded, so a brace inside an id cannot end the tag early (Redis hashes the text
    between the first ``{`` and the next ``}``) and two ids never share a tag.

    >>> conversation_tag("conv-1"), conversation_tag("a}b{c%")
    ('{conv-1}', '{a%7Db%7Bc%25}')
    """
    encoded = conversation_id.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")
    return "{" + encoded + "}"


def conversation_key(prefix: str, kind: str, conversation_id: str, *parts: str) -> str:
    """The key ``{prefix}{kind}:{tag}[:part…]``; every key of one conversation hashes to the
    slot of its tag (the prefix holds no brace, `check_key_prefix` sees to it).

    >>> conversation_key("agent:", "turn", "c1", "t1")
    'agent:turn:{c1}:t1'
    """
    return ":".join((prefix + kind, conversation_tag(conversation_id), *parts))


class RedisPort:
    """The port over a Redis client: a blocking `redis.Redis` or `redis.cluster.RedisCluster`,
    whose replies come back as they are, or a `redis.asyncio.Redis` or
    `redis.asyncio.cluster.RedisCluster`, whose replies are awaited."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self._scripts: dict[str, Any] = {}
        # An asyncio cluster client learns the slot map on its first command. Commands sent
        # concurrently before that went to the wrong masters; after five MOVED replies redis-py
        # closes every connection, those of commands in flight too, and retries them (a script
        # could then run twice). So the map is loaded once, before any command.
        self._initialized = not isinstance(client, AsyncRedisCluster)
        self._initializing: asyncio.Lock | None = None
        self._blocking = isinstance(client, (redis.Redis, RedisCluster))  # replies not awaited

    async def script(self, action: str, lua: str, keys: list[str], args: list[Any]) -> Any:
        """Run the Lua script ``lua`` atomically on the server."""
        handle = self._scripts.get(lua)
        if handle is None:
            handle = self._scripts[lua] = self.client.register_script(lua)
        with translated(action):
            await self._initialize()
            return await _reply(handle(keys=keys, args=args))

    async def command(self, action: str, name: str, *args: Any) -> Any:
        """Run one Redis command (a client method by name: ``hget``, ``llen``, …)."""
        try:  # `translated`, inline: a page read is the hot path
            if not self._initialized:
                await self._initialize()
            reply = getattr(self.client, name)(*args)
            return reply if self._blocking else await _reply(reply)
        except _ERRORS as error:
            raise _typed(error, action) from error

    async def _initialize(self) -> None:
        if self._initialized:
            return
        if self._initializing is None:
            self._initializing = asyncio.Lock()
        async with self._initializing:
            if not self._initialized:
                await self.client.initialize()
                self._initialized = True


async def _reply(reply: Any) -> Any:
    return await reply if inspect.isawaitable(reply) else reply


__all__ = [
    "RedisCluster",
    "RedisPort",
    "conversation_key",
    "conversation_tag",
    "raw",
    "redis",
    "text",
    "translated",
]
