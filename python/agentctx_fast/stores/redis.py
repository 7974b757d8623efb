"""`RedisAgentStore` and `AsyncRedisAgentStore` on redis-py: every write is one Lua script,
atomic on the server. A single server or Redis Cluster (`redis.cluster.RedisCluster` and its
asyncio twin).

Keys of a conversation ``c`` under prefix ``p``, all tagged ``{c}`` (the id with ``%``, ``{``
and ``}`` percent-encoded, see `conversation_tag`) so that on a cluster they share one hash slot
and each script touches one node: ``p conv:{c}:r`` (list of records in append order),
``…:i`` (hash id → ``"position version kind"``, position in the record list) and ``…:vp``
(list of the positions of model-visible records). A page of `get_messages` is one plain
``LRANGE`` of the record list from the tail: it costs the server what a range read costs (no
script, no per-record lookups) and is one consistent snapshot. Add-if-absent and
compare-and-set stay Lua scripts, decided on the server; an update rewrites its record in place
(``LSET`` at its position); a delete (or a quarantine) closes the gap and moves the positions
after it in the same script, and notes its call's token in ``p deleted:{c}`` (hash id →
token) so a re-sent delete finds its own effect. Compression states live in
``p compression:{c}``; turns and leases in ``p turn:{c}:t`` and ``p lease:{c}`` (see
`agentctx_fast.stores.redis_turns`), the ids of its turns in ``p turns:{c}``.

With ``ttl_seconds``, every write script also renews (``PEXPIRE``, in the same script) the idle
expiry of its own keys and of every key of the conversation but the other turn records: a
conversation nobody writes to for ``ttl_seconds`` disappears whole. A turn record is renewed
by its own writes and, while the lease names it, by every write (renewing each on every
append would cost a command per turn ever run): a finished turn's record expires
``ttl_seconds`` after it ended.

The rules are written once, as coroutines over a `RedisPort`: `AsyncRedisAgentStore` awaits
redis.asyncio, and `RedisAgentStore` drives the same code over a blocking client. Both write the
same keys, so one reads what the other wrote.
"""

from __future__ import annotations

import functools
import time
from typing import Any, Generic, TypeVar

from agentctx_fast._ids import check_conversation_id
from agentctx_fast.errors import InvalidArgumentError
from agentctx_fast.stores._common import check_key_prefix
from agentctx_fast.stores._front import AsyncStoreFront, StoreFront
from agentctx_fast.stores._loader import (
    DEFAULT_MESSAGE_CACHE_BYTES,
    DEFAULT_MESSAGE_CACHE_SIZE,
    MessageCacheInfo,
    MessageLoader,
)
from agentctx_fast.stores._redis_io import (
    AsyncRedisCluster,
    RedisCluster,
    RedisPort,
    conversation_key,
    expiring,
    own_async_client,
    own_client,
    redis,
)
from agentctx_fast.stores._redis_lifecycle import (
    conversation_keys,
    delete_conversation,
    list_conversations,
)

# The write scripts, by the names the tests and benchmarks recognise them by on the wire.
from agentctx_fast.stores._redis_memory import _ADD_IF_ABSENT as _ADD_IF_ABSENT
from agentctx_fast.stores._redis_memory import _DELETE as _DELETE
from agentctx_fast.stores._redis_memory import _UPDATE as _UPDATE
from agentctx_fast.stores._redis_memory import (
    AsyncRedisChatMemory,
    AsyncRedisCompressionStateStore,
    RedisChatMemory,
    RedisCompressionStateStore,
)
from agentctx_fast.stores.lifecycle import check_delete, check_listing, check_ttl
from agentctx_fast.stores.redis_turns import AsyncRedisAgentTurnStore, RedisAgentTurnStore
from agentctx_fast.stores.serializer import AgentStoreSerializer, JsonAgentStoreSerializer


class _RedisStoreBase:
    """What both Redis stores share: key layout, serializer, decoded-record cache, the port
    (set up by `_RedisStore`'s constructor)."""

    client: Any
    key_prefix: str
    serializer: AgentStoreSerializer
    ttl_seconds: float | None
    _owns_client: bool
    _expiry_ms: int | None
    _port: RedisPort
    _load_message: MessageLoader

    def message_cache_info(self) -> MessageCacheInfo:
        """Hits, misses and entries of the decoded-record cache (its hit rate is a metric a
        service should watch: a low one means the cache is too small for its conversations)."""
        return self._load_message.info()

    def _key(self, kind: str, conversation_id: str, *parts: str) -> str:
        """The key of one of ``conversation_id``'s records (all in the slot of its tag)."""
        return conversation_key(self.key_prefix, kind, conversation_id, *parts)

    async def _script(
        self, action: str, lua: str, keys: list[str], args: list[Any], conversation_id: str
    ) -> Any:
        """Run the write script ``lua`` on ``conversation_id``'s keys; with ``ttl_seconds``,
        renewing the conversation's idle expiry in the same script (`expiring`)."""
        expiry = self._expiry_ms
        if expiry is None:
            return await self._port.script(action, lua, keys, args)
        lease = self._key("lease", conversation_id)
        named = {*keys, lease}
        renewed = [key for key in conversation_keys(self, conversation_id) if key not in named]
        turn_head = self._key("turn", conversation_id) + ":"
        return await self._port.script(
            action,
            expiring(lua),
            [*keys, *renewed, lease],
            [*args, turn_head, len(renewed) + 1, expiry],
        )

    async def _delete_conversation(self, conversation_id: str, force: bool) -> bool:
        conversation_id, force = check_delete(conversation_id, force)
        return await delete_conversation(self, conversation_id, force, time.time())

    async def _list_conversations(
        self, prefix: str | None, limit: int, after: str | None
    ) -> list[str]:
        return await list_conversations(self, *check_listing(prefix, limit, after))


C = TypeVar("C")


class _RedisStore(_RedisStoreBase, Generic[C]):
    """The constructor of both Redis stores, over the client type ``C`` of each
    (`_client_types`, `_connect`)."""

    _client_types: tuple[type, ...]

    def __init__(
        self,
        client_or_url: C | str,
        key_prefix: str = "agent:",
        serializer: AgentStoreSerializer | None = None,
        *,
        message_cache_size: int = DEFAULT_MESSAGE_CACHE_SIZE,
        message_cache_bytes: int = DEFAULT_MESSAGE_CACHE_BYTES,
        ttl_seconds: float | None = None,
    ) -> None:
        check_key_prefix(key_prefix)
        self._expiry_ms = check_ttl(ttl_seconds)
        self.ttl_seconds = ttl_seconds
        client, self._owns_client, timeout = self._client(client_or_url)
        self.client: C = client
        self._port = RedisPort(client, timeout)
        self.key_prefix = key_prefix
        self.serializer: AgentStoreSerializer = serializer or JsonAgentStoreSerializer()
        self._load_message = MessageLoader(self, message_cache_size, message_cache_bytes)

    def _client(self, client_or_url: object) -> tuple[Any, bool, float | None]:
        """The client a store uses, whether it owns it (it does when it made it from a URL),
        and the socket timeout its port keeps."""
        if isinstance(client_or_url, str):
            try:
                client, timeout = self._connect(client_or_url)
            except ValueError as error:
                raise InvalidArgumentError(f"cannot use Redis URL: {error}") from error
            return client, True, timeout
        if isinstance(client_or_url, self._client_types):
            return client_or_url, False, None
        names = " or ".join(f"{t.__module__}.{t.__name__}" for t in self._client_types)
        raise InvalidArgumentError(
            f"client_or_url must be a {names} client or a URL, got {type(client_or_url).__name__}"
        )

    @staticmethod
    def _connect(url: str) -> tuple[Any, float | None]:
        """A client of the store's own for ``url``, and the socket timeout its port keeps."""
        raise NotImplementedError


class RedisAgentStore(_RedisStore["redis.Redis | RedisCluster"], StoreFront):
    """Chat memories, compression states, turns and leases in Redis under ``key_prefix``.

    ``client_or_url`` is a `redis.Redis` or `redis.cluster.RedisCluster` client (the caller
    closes it) or a URL such as ``redis://127.0.0.1:6379/0`` (the store creates a `redis.Redis`
    client and `close` closes it). On a cluster, each conversation lives on the master of its
    hash tag's slot. `delete_conversation` is one script; `list_conversations` a ``SCAN`` of
    the store's keys per page.
    """

    _client_types = (redis.Redis, RedisCluster)

    @staticmethod
    def _connect(url: str) -> tuple[Any, float | None]:
        return own_client(url), None

    def chat_memory(self, conversation_id: str) -> RedisChatMemory:
        """The memory of ``conversation_id`` (a light handle; create as many as you like)."""
        return RedisChatMemory(AsyncRedisChatMemory(self, check_conversation_id(conversation_id)))

    def compression_state_store(self) -> RedisCompressionStateStore:
        """The compression states of every conversation in this store."""
        return RedisCompressionStateStore(AsyncRedisCompressionStateStore(self))

    @functools.cached_property
    def _turns(self) -> RedisAgentTurnStore:
        return RedisAgentTurnStore(AsyncRedisAgentTurnStore(self))

    def turn_store(self) -> RedisAgentTurnStore:
        """Turn snapshots and conversation leases (the runner's busy protection)."""
        return self._turns

    def close(self) -> None:
        """Close the client if this store created it."""
        if self._owns_client:
            self.client.close()


class AsyncRedisAgentStore(_RedisStore["redis.asyncio.Redis | AsyncRedisCluster"], AsyncStoreFront):
    """`RedisAgentStore` for asyncio programs, on redis.asyncio: the same keys and records, so a
    conversation written by one is read, continued and resumed by the other.

    ``client_or_url`` is a `redis.asyncio.Redis` or `redis.asyncio.cluster.RedisCluster`
    client (the caller closes it) or a URL (the store creates a `redis.asyncio.Redis` client and
    `aclose` closes it).
    """

    _client_types = (redis.asyncio.Redis, AsyncRedisCluster)
    _connect = staticmethod(own_async_client)

    def chat_memory(self, conversation_id: str) -> AsyncRedisChatMemory:
        """The memory of ``conversation_id`` (a light handle; create as many as you like)."""
        return AsyncRedisChatMemory(self, check_conversation_id(conversation_id))

    def compression_state_store(self) -> AsyncRedisCompressionStateStore:
        """The compression states of every conversation in this store."""
        return AsyncRedisCompressionStateStore(self)

    @functools.cached_property
    def _turns(self) -> AsyncRedisAgentTurnStore:
        return AsyncRedisAgentTurnStore(self)

    def turn_store(self) -> AsyncRedisAgentTurnStore:
        """Turn snapshots and conversation leases (the runner's busy protection)."""
        return self._turns

    async def aclose(self) -> None:
        """Close the client if this store created it."""
        if self._owns_client:
            await self.client.aclose()


# `conversation_key` is public here: it names a conversation's keys (the layout above), for
# operators who inspect them; its home, `_redis_io`, is private.
__all__ = [
    "AsyncRedisAgentStore",
    "AsyncRedisChatMemory",
    "AsyncRedisCompressionStateStore",
    "RedisAgentStore",
    "RedisChatMemory",
    "RedisCompressionStateStore",
    "conversation_key",
]
