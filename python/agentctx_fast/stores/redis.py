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

import copy
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from agentctx_fast._ids import check_identifier
from agentctx_fast._sync import run_sync
from agentctx_fast.coordinator import AgentContextCompressionState, check_expected_version
from agentctx_fast.errors import (
    InvalidArgumentError,
    MessageNotFoundError,
    SerializationError,
    VersionConflictError,
)
from agentctx_fast.memory import (
    AsyncChatMemory,
    AsyncChatMemoryProvider,
    BlockingChatMemory,
    ChatMemoryProvider,
    check_first,
    check_message,
    check_messages,
    check_page,
    check_version,
)
from agentctx_fast.messages import Message
from agentctx_fast.stores._bridge import BlockingCompressionStateStore
from agentctx_fast.stores._common import check_conversation_id, check_key_prefix
from agentctx_fast.stores._lifecycle import check_delete, check_listing, check_ttl
from agentctx_fast.stores._loader import (
    DEFAULT_MESSAGE_CACHE_BYTES,
    DEFAULT_MESSAGE_CACHE_SIZE,
    MessageCacheInfo,
    MessageLoader,
)
from agentctx_fast.stores._records import UndecodableRecord
from agentctx_fast.stores._redis_io import (
    AsyncRedisCluster,
    RedisCluster,
    RedisPort,
    conversation_key,
    expiring,
    own_async_client,
    own_client,
    raw,
    redis,
    write_script,
)
from agentctx_fast.stores._redis_lifecycle import (
    conversation_keys,
    delete_conversation,
    list_conversations,
)
from agentctx_fast.stores._redis_records import REMOVE_RECORD, RedisRecords
from agentctx_fast.stores.redis_turns import AsyncRedisAgentTurnStore, RedisAgentTurnStore
from agentctx_fast.stores.serializer import (
    AgentStoreSerializer,
    JsonAgentStoreSerializer,
    dump,
    load_state,
)
from agentctx_fast.stores.turns import Fence

# The entry of a message in the index hash is "position version kind": its place in the record
# list, its version (kept as the client wrote it: Lua numbers are doubles, which lose versions
# above 2**53) and its class name.

# Every write script is made by `write_script`: run as it is, or fenced (the lease key after
# its keys, the fence after its arguments; ARGC counts its own arguments).

# A fenced append re-sent that finds the same record stored under its id reports it appended.
_FOUND_APPLIED = """
local function found_applied(id, record)
  if not FENCED then return false end
  local entry = redis.call('HGET', KEYS[2], id)
  local position = entry and string.match(entry, '^(%d+) ')
  return position ~= nil and redis.call('LINDEX', KEYS[1], position) == record
end
"""

# KEYS: records, index, visible. ARGV: id, record, version, kind, visible.
_ADD_IF_ABSENT = write_script(
    _FOUND_APPLIED
    + """
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then
  if found_applied(ARGV[1], ARGV[2]) then return 1 end
  return 0
end
local position = redis.call('RPUSH', KEYS[1], ARGV[2]) - 1
redis.call('HSET', KEYS[2], ARGV[1], position .. ' ' .. ARGV[3] .. ' ' .. ARGV[4])
if ARGV[5] == '1' then redis.call('RPUSH', KEYS[3], position) end
return 1
"""
)

# KEYS: records, index, visible. ARGV: (id, record, version, kind, visible) per message. One
# script, so a batch is atomic; returns 1 (appended) or 0 (id stored) per message.
_ADD_MANY_IF_ABSENT = write_script(
    _FOUND_APPLIED
    + """
local out = {}
for i = 1, ARGC, 5 do
  if redis.call('HEXISTS', KEYS[2], ARGV[i]) == 1 then
    out[#out + 1] = found_applied(ARGV[i], ARGV[i + 1]) and 1 or 0
  else
    local position = redis.call('RPUSH', KEYS[1], ARGV[i + 1]) - 1
    redis.call('HSET', KEYS[2], ARGV[i], position .. ' ' .. ARGV[i + 2] .. ' ' .. ARGV[i + 3])
    if ARGV[i + 4] == '1' then redis.call('RPUSH', KEYS[3], position) end
    out[#out + 1] = 1
  end
end
return out
"""
)

# KEYS: records, index. ARGV: id, expected version, record, kind, next version (the client
# computes it). Returns {1} applied (or, fenced, found applied: a re-sent update), {0, version}
# conflict, {-1} unknown id, {-2, kind} other
# class, {-3} an index entry that is not "position version kind".
_UPDATE = write_script(
    """
local entry = redis.call('HGET', KEYS[2], ARGV[1])
if not entry then return {-1} end
local position, version, kind = string.match(entry, '^(%d+) (%S+) (.*)$')
if not position then return {-3} end
if kind ~= ARGV[4] then return {-2, kind} end
if FENCED and version == ARGV[5] and redis.call('LINDEX', KEYS[1], position) == ARGV[3] then
  return {1}
end
if version ~= ARGV[2] then return {0, version} end
redis.call('LSET', KEYS[1], position, ARGV[3])
redis.call('HSET', KEYS[2], ARGV[1], position .. ' ' .. ARGV[5] .. ' ' .. kind)
return {1}
"""
)

# KEYS: records, index, visible, deleted. ARGV: id, expected version, call token. Removes the
# message (`remove_record`) and notes the token of the call that did in the deleted hash
# (id → token): a client library re-sending the script after a lost reply finds its own token
# and reports it applied, while any other call finds the id absent. Returns {1} applied, {0,
# version} conflict, {-1} unknown id, {-3} an index entry that is not "position version kind".
_DELETE = write_script(
    REMOVE_RECORD
    + """
local entry = redis.call('HGET', KEYS[2], ARGV[1])
if not entry then
  if redis.call('HGET', KEYS[4], ARGV[1]) == ARGV[3] then return {1} end
  return {-1}
end
local position, version = string.match(entry, '^(%d+) (%S+) .*$')
if not position then return {-3} end
if version ~= ARGV[2] then return {0, version} end
remove_record(tonumber(position), ARGV[1], '\0deleted ' .. ARGV[3])
redis.call('HSET', KEYS[4], ARGV[1], ARGV[3])
return {1}
"""
)

# KEYS: records, index. ARGV: id. The record, nil, or {-3}: an index entry that is not
# "position version kind".
_GET = """
local entry = redis.call('HGET', KEYS[2], ARGV[1])
if not entry then return false end
local position = string.match(entry, '^(%d+) %S+ .*$')
if not position then return {-3} end
return redis.call('LINDEX', KEYS[1], position)
"""

# KEYS: visible, records. ARGV: start, stop (LRANGE indexes of the visible list). The records
# at those positions, read as one LRANGE of the span they cover: one consistent snapshot.
_VISIBLE_PAGE = """
local positions = redis.call('LRANGE', KEYS[1], ARGV[1], ARGV[2])
if #positions == 0 then return {} end
local first = tonumber(positions[1])
local last = tonumber(positions[#positions])
local span = redis.call('LRANGE', KEYS[2], first, last)
if #span == #positions then return span end
local out = {}
for i = 1, #positions do out[i] = span[tonumber(positions[i]) - first + 1] end
return out
"""

# KEYS: the state hash. ARGV: expected version, record, next version.
_SAVE_STATE = """
local version = redis.call('HGET', KEYS[1], 'version') or '0'
if version ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'version', ARGV[3], 'data', ARGV[2])
return 1
"""


class _RedisStoreBase:
    """What both Redis stores share: key layout, serializer, decoded-record cache, the port."""

    def __init__(
        self,
        client: Any,
        owns_client: bool,
        key_prefix: str,
        serializer: AgentStoreSerializer | None,
        message_cache_size: int,
        message_cache_bytes: int,
        ttl_seconds: float | None,
        timeout: float | None = None,
    ) -> None:
        self._expiry_ms = check_ttl(ttl_seconds)
        self.ttl_seconds = ttl_seconds
        self.client = client
        self._owns_client = owns_client
        self._port = RedisPort(client, timeout)
        self.key_prefix = key_prefix
        self.serializer: AgentStoreSerializer = serializer or JsonAgentStoreSerializer()
        self._load_message = MessageLoader(self, message_cache_size, message_cache_bytes)

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


def _client_argument(
    client_or_url: object, client_types: tuple[type, ...], from_url: Any
) -> tuple[Any, bool]:
    """The client a store uses and whether it owns it (it does when it made it from a URL)."""
    if isinstance(client_or_url, str):
        try:
            return from_url(client_or_url), True
        except ValueError as error:
            raise InvalidArgumentError(f"cannot use Redis URL: {error}") from error
    if isinstance(client_or_url, client_types):
        return client_or_url, False
    names = " or ".join(f"{t.__module__}.{t.__name__}" for t in client_types)
    raise InvalidArgumentError(
        f"client_or_url must be a {names} client or a URL, got {type(client_or_url).__name__}"
    )


class RedisAgentStore(_RedisStoreBase):
    """Chat memories, compression states, turns and leases in Redis under ``key_prefix``.

    ``client_or_url`` is a `redis.Redis` or `redis.cluster.RedisCluster` client (the caller
    closes it) or a URL such as ``redis://127.0.0.1:6379/0`` (the store creates a `redis.Redis`
    client and `close` closes it). On a cluster, each conversation lives on the master of its
    hash tag's slot.
    """

    def __init__(
        self,
        client_or_url: redis.Redis | RedisCluster | str,
        key_prefix: str = "agent:",
        serializer: AgentStoreSerializer | None = None,
        *,
        message_cache_size: int = DEFAULT_MESSAGE_CACHE_SIZE,
        message_cache_bytes: int = DEFAULT_MESSAGE_CACHE_BYTES,
        ttl_seconds: float | None = None,
    ) -> None:
        check_key_prefix(key_prefix)
        check_ttl(ttl_seconds)
        client, owns = _client_argument(client_or_url, (redis.Redis, RedisCluster), own_client)
        super().__init__(
            client,
            owns,
            key_prefix,
            serializer,
            message_cache_size,
            message_cache_bytes,
            ttl_seconds,
        )
        self.client: redis.Redis | RedisCluster = client
        self._turn_store: RedisAgentTurnStore | None = None

    def chat_memory(self, conversation_id: str) -> RedisChatMemory:
        """The memory of ``conversation_id`` (a light handle; create as many as you like)."""
        return RedisChatMemory(AsyncRedisChatMemory(self, check_conversation_id(conversation_id)))

    def chat_memory_provider(self) -> ChatMemoryProvider:
        """A provider that locates each conversation's memory in this store."""
        return self.chat_memory

    def compression_state_store(self) -> RedisCompressionStateStore:
        """The compression states of every conversation in this store."""
        return RedisCompressionStateStore(AsyncRedisCompressionStateStore(self))

    def turn_store(self) -> RedisAgentTurnStore:
        """Turn snapshots and conversation leases (the runner's busy protection)."""
        if self._turn_store is None:
            self._turn_store = RedisAgentTurnStore(AsyncRedisAgentTurnStore(self))
        return self._turn_store

    def delete_conversation(self, conversation_id: str, *, force: bool = False) -> bool:
        """Remove everything of the conversation (messages, turn records, lease, compression
        state, quarantined records) in one script; True when there was anything.

        Raises `AgentConversationBusyError` while a turn is running under a live lease (the
        check and the delete are one step on the server), unless ``force``."""
        return run_sync(self._delete_conversation(conversation_id, force))

    def list_conversations(
        self, prefix: str | None = None, limit: int = 100, after: str | None = None
    ) -> list[str]:
        """Up to ``limit`` conversation ids starting with ``prefix``, after ``after``, in
        code-point order (a ``SCAN`` of the store's keys per page: for tools and jobs)."""
        return run_sync(self._list_conversations(prefix, limit, after))

    def close(self) -> None:
        """Close the client if this store created it."""
        if self._owns_client:
            self.client.close()


class AsyncRedisAgentStore(_RedisStoreBase):
    """`RedisAgentStore` for asyncio programs, on redis.asyncio: the same keys and records, so a
    conversation written by one is read, continued and resumed by the other.

    ``client_or_url`` is a `redis.asyncio.Redis` or `redis.asyncio.cluster.RedisCluster`
    client (the caller closes it) or a URL (the store creates a `redis.asyncio.Redis` client and
    `aclose` closes it).
    """

    def __init__(
        self,
        client_or_url: redis.asyncio.Redis | AsyncRedisCluster | str,
        key_prefix: str = "agent:",
        serializer: AgentStoreSerializer | None = None,
        *,
        message_cache_size: int = DEFAULT_MESSAGE_CACHE_SIZE,
        message_cache_bytes: int = DEFAULT_MESSAGE_CACHE_BYTES,
        ttl_seconds: float | None = None,
    ) -> None:
        check_key_prefix(key_prefix)
        check_ttl(ttl_seconds)
        made: list[float | None] = []

        def from_url(url: str) -> Any:
            client, timeout = own_async_client(url)
            made.append(timeout)
            return client

        client, owns = _client_argument(
            client_or_url, (redis.asyncio.Redis, AsyncRedisCluster), from_url
        )
        super().__init__(
            client,
            owns,
            key_prefix,
            serializer,
            message_cache_size,
            message_cache_bytes,
            ttl_seconds,
            made[0] if made else None,
        )
        self.client: redis.asyncio.Redis | AsyncRedisCluster = client
        self._turn_store: AsyncRedisAgentTurnStore | None = None

    def chat_memory(self, conversation_id: str) -> AsyncRedisChatMemory:
        """The memory of ``conversation_id`` (a light handle; create as many as you like)."""
        return AsyncRedisChatMemory(self, check_conversation_id(conversation_id))

    def chat_memory_provider(self) -> AsyncChatMemoryProvider:
        """A provider that locates each conversation's memory in this store."""
        return self.chat_memory

    def compression_state_store(self) -> AsyncRedisCompressionStateStore:
        """The compression states of every conversation in this store."""
        return AsyncRedisCompressionStateStore(self)

    def turn_store(self) -> AsyncRedisAgentTurnStore:
        """Turn snapshots and conversation leases (the runner's busy protection)."""
        if self._turn_store is None:
            self._turn_store = AsyncRedisAgentTurnStore(self)
        return self._turn_store

    async def delete_conversation(self, conversation_id: str, *, force: bool = False) -> bool:
        """Remove everything of the conversation (see `RedisAgentStore.delete_conversation`)."""
        return await self._delete_conversation(conversation_id, force)

    async def list_conversations(
        self, prefix: str | None = None, limit: int = 100, after: str | None = None
    ) -> list[str]:
        """A page of conversation ids (see `RedisAgentStore.list_conversations`)."""
        return await self._list_conversations(prefix, limit, after)

    async def aclose(self) -> None:
        """Close the client if this store created it."""
        if self._owns_client:
            await self.client.aclose()


class AsyncRedisChatMemory(AsyncChatMemory):
    """One conversation's messages in Redis (the one implementation: awaited by
    `AsyncRedisAgentStore`, driven blocking by `RedisAgentStore`)."""

    def __init__(self, store: _RedisStoreBase, conversation_id: str) -> None:
        self._store = store
        self.conversation_id = conversation_id
        keys = store._key("conv", conversation_id)  # each key is this plus ":r", ":i", ":vp"
        self._records = keys + ":r"
        self._index = keys + ":i"
        self._visible = keys + ":vp"
        self._deleted = store._key("deleted", conversation_id)
        self._fence: Fence | None = None

    def fenced(self, fence: Fence) -> AsyncRedisChatMemory:
        """A copy whose writes are fenced (a method replaced on this instance is kept)."""
        view = copy.copy(self)
        view._fence = fence
        return view

    async def _write(
        self, action: str, script: tuple[str, str], keys: list[str], args: list[Any]
    ) -> Any:
        """Run a write script (`write_script`), fenced when this memory is."""
        fence, store = self._fence, self._store
        if fence is None:
            return await store._script(action, script[0], keys, args, self.conversation_id)
        lease = store._key("lease", self.conversation_id)
        return await store._script(
            action,
            script[1],
            [*keys, lease],
            [*args, fence.turn_id, fence.owner],
            self.conversation_id,
        )

    async def add_message_if_absent(self, message: Message) -> bool:
        check_message(message)
        action = f"adding message {message.message_id!r}"
        args = self._fields(message)
        return bool(await self._write(action, _ADD_IF_ABSENT, self._keys(), args) == 1)

    async def add_messages_if_absent(self, messages: Sequence[Message]) -> list[bool]:
        """One Lua script for the whole batch, so it is atomic on the server."""
        batch = check_messages(messages)
        args = [field for message in batch for field in self._fields(message)]
        if not batch:
            return []
        action = f"adding {len(batch)} messages"
        flags = await self._write(action, _ADD_MANY_IF_ABSENT, self._keys(), args)
        return [int(flag) == 1 for flag in flags]

    def _keys(self) -> list[str]:
        return [self._records, self._index, self._visible]

    def _fields(self, message: Message) -> list[Any]:
        return [
            message.message_id,
            dump(self._store.serializer, message),
            message.version,
            type(message).__name__,
            "1" if message.model_visible else "0",
        ]

    async def get_messages(self, count: int | None = None, *, offset: int = 0) -> list[Message]:
        """One ``LRANGE`` of the record list: the page costs the server a plain range read."""
        check_page(count, offset)
        if count == 0:
            return []
        start, stop = _tail_range(count, offset)
        records = await self._store._port.command(
            "reading messages", "lrange", self._records, start, stop
        )
        try:
            return self._load(records)
        except UndecodableRecord as bad:
            raise await RedisRecords(self._store).named_message(bad) from bad

    async def get_model_messages(self, count: int | None = None) -> list[Message]:
        check_page(count, 0)
        if count == 0:
            return []
        records = await self._store._port.script(
            "reading messages",
            _VISIBLE_PAGE,
            [self._visible, self._records],
            list(_tail_range(count, 0)),
        )
        try:
            return self._load(records)
        except UndecodableRecord as bad:
            raise await RedisRecords(self._store).named_message(bad) from bad

    def _load(self, records: Sequence[Any]) -> list[Message]:
        return self._store._load_message.load_all(self.conversation_id, records, raw)

    async def get_message(self, message_id: str) -> Message | None:
        check_identifier(message_id, "message_id")
        record = await self._store._port.script(
            f"reading message {message_id!r}", _GET, [self._records, self._index], [message_id]
        )
        if record is None:
            return None
        if isinstance(record, list):
            raise _corrupt_index(self.conversation_id, message_id)
        try:
            return self._store._load_message(self.conversation_id, raw(record))
        except UndecodableRecord as bad:
            raise bad.named(message_id) from bad

    async def update_message(self, message: Message, expected_version: int) -> Message:
        check_message(message)
        check_version(expected_version)
        updated = replace(message, version=expected_version + 1)
        record = dump(self._store.serializer, updated)
        kind = type(message).__name__
        outcome = await self._write(
            f"updating message {message.message_id!r}",
            _UPDATE,
            [self._records, self._index],
            [message.message_id, expected_version, record, kind, expected_version + 1],
        )
        status = int(outcome[0])
        if status == 1:
            return updated
        if status == -1:
            raise MessageNotFoundError(f"no stored message {message.message_id!r}")
        if status == -3:
            raise _corrupt_index(self.conversation_id, message.message_id)
        if status == -2:
            stored_kind = outcome[1].decode() if isinstance(outcome[1], bytes) else outcome[1]
            raise InvalidArgumentError(
                f"update_message cannot turn {stored_kind} {message.message_id!r} into a {kind}"
            )
        raise VersionConflictError(
            f"message {message.message_id!r} is at version {int(outcome[1])}, "
            f"not {expected_version}"
        )

    async def delete_message(self, message_id: str, expected_version: int) -> None:
        """One script (`_DELETE`); a message in the middle costs a pass over the index to
        move the positions after it, the newest one a few commands."""
        check_identifier(message_id, "message_id")
        check_version(expected_version)
        outcome = await self._write(
            f"deleting message {message_id!r}",
            _DELETE,
            [self._records, self._index, self._visible, self._deleted],
            [message_id, expected_version, uuid.uuid4().hex],
        )
        status = int(outcome[0])
        if status == 1:
            return
        if status == -1:
            raise MessageNotFoundError(f"no stored message {message_id!r}")
        if status == -3:
            raise _corrupt_index(self.conversation_id, message_id)
        raise VersionConflictError(
            f"message {message_id!r} is at version {int(outcome[1])}, not {expected_version}"
        )

    async def get_first_messages(self, count: int) -> list[Message]:
        """One ``LRANGE`` from the head of the record list."""
        if check_first(count) == 0:
            return []
        records = await self._store._port.command(
            "reading messages", "lrange", self._records, 0, count - 1
        )
        try:
            return self._load(records)
        except UndecodableRecord as bad:
            raise await RedisRecords(self._store).named_message(bad) from bad

    async def message_count(self) -> int:
        return int(await self._store._port.command("counting messages", "llen", self._records))

    async def clear(self) -> None:
        """The messages and the compression state built from them, in one ``DEL`` (the keys
        share a slot)."""
        compression = self._store._key("compression", self.conversation_id)
        keys = (self._records, self._index, self._visible, self._deleted, compression)
        await self._store._port.command("clearing messages", "delete", *keys)


def _tail_range(count: int | None, offset: int) -> tuple[int, int]:
    """The ``LRANGE`` indexes, from the tail, of ``count`` items (all if None) before the last
    ``offset``."""
    return (0 if count is None else -(offset + count)), -(offset + 1)


class RedisChatMemory(BlockingChatMemory):
    """One conversation's messages in a `RedisAgentStore` (blocking)."""


class AsyncRedisCompressionStateStore:
    """Compression states in Redis hashes, saved by a compare-and-set script."""

    def __init__(self, store: _RedisStoreBase) -> None:
        self._store = store

    async def load(self, conversation_id: str) -> AgentContextCompressionState | None:
        check_conversation_id(conversation_id)
        version, data = await self._store._port.command(
            "loading a compression state",
            "hmget",
            self._store._key("compression", conversation_id),
            ["version", "data"],
        )
        if data is None:
            return None
        state = load_state(self._store.serializer, raw(data))
        try:
            return replace(state, version=int(raw(version)))
        except (TypeError, ValueError) as error:
            raise SerializationError(
                f"conversation {conversation_id!r}: stored state version {version!r} is not an int"
            ) from error

    async def save(self, state: AgentContextCompressionState, expected_version: int) -> bool:
        check_expected_version(state, expected_version)
        data = dump(self._store.serializer, replace(state, version=expected_version + 1))
        applied = await self._store._script(
            "saving a compression state",
            _SAVE_STATE,
            [self._store._key("compression", state.conversation_id)],
            [expected_version, data, expected_version + 1],
            state.conversation_id,
        )
        return bool(applied == 1)


class RedisCompressionStateStore(BlockingCompressionStateStore):
    """Compression states of a `RedisAgentStore` (blocking)."""


def _corrupt_index(conversation_id: str, message_id: str) -> SerializationError:
    return SerializationError(
        f"conversation {conversation_id!r}, message {message_id!r}: its stored index entry is "
        "not 'position version kind'"
    )


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
