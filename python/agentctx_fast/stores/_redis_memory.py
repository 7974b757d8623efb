"""The chat memories and compression states of the Redis stores: the one implementation of
each, awaited by `AsyncRedisAgentStore` and driven blocking by `RedisAgentStore` (the key
layout is described in `agentctx_fast.stores.redis`)."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from agentctx_fast._ids import check_conversation_id, check_identifier
from agentctx_fast.compression.coordinator import (
    BlockingCompressionStateStore,
    CompressionState,
    check_expected_version,
)
from agentctx_fast.core.messages import Message
from agentctx_fast.errors import (
    InvalidArgumentError,
    MessageNotFoundError,
    SerializationError,
    VersionConflictError,
)
from agentctx_fast.memory import (
    AsyncChatMemory,
    BlockingChatMemory,
    check_first,
    check_message,
    check_messages,
    check_page,
    check_version,
)
from agentctx_fast.stores._records import UndecodableRecord
from agentctx_fast.stores._redis_io import raw, write_script
from agentctx_fast.stores._redis_records import REMOVE_RECORD, RedisRecords
from agentctx_fast.stores.serializer import dump, load_state
from agentctx_fast.stores.turn_store import Fence

if TYPE_CHECKING:
    from agentctx_fast.stores.redis import _RedisStoreBase

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

# KEYS: the state hash. ARGV: expected version, record, next version, call token. The hash
# keeps the token of the save that made its version: a client library re-sending the script
# after a lost reply finds its own token and reports it applied, while another save (a new
# token) from the same version is a conflict.
_SAVE_STATE = write_script(
    """
local version = redis.call('HGET', KEYS[1], 'version') or '0'
if version == ARGV[3] and redis.call('HGET', KEYS[1], 'call') == ARGV[4] then return 1 end
if version ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'version', ARGV[3], 'data', ARGV[2], 'call', ARGV[4])
return 1
"""
)


async def _write(
    store: _RedisStoreBase,
    fence: Fence | None,
    conversation_id: str,
    action: str,
    script: tuple[str, str],
    keys: list[str],
    args: list[Any],
) -> Any:
    """Run a write script (`write_script`) on ``conversation_id``'s keys, fenced when
    ``fence`` is given: the lease key after the script's keys, the fence after its arguments."""
    if fence is None:
        return await store._script(action, script[0], keys, args, conversation_id)
    lease = store._key("lease", conversation_id)
    return await store._script(
        action, script[1], [*keys, lease], [*args, fence.turn_id, fence.owner], conversation_id
    )


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
        store, cid = self._store, self.conversation_id
        return await _write(store, self._fence, cid, action, script, keys, args)

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

    def __init__(self, store: _RedisStoreBase, fence: Fence | None = None) -> None:
        self._store = store
        self._fence = fence

    def fenced(self, fence: Fence) -> AsyncRedisCompressionStateStore:
        """These states with saves accepted only while ``fence`` holds the lease, checked in
        the save's own script."""
        return AsyncRedisCompressionStateStore(self._store, fence)

    async def load(self, conversation_id: str) -> CompressionState | None:
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

    async def save(self, state: CompressionState, expected_version: int) -> bool:
        check_expected_version(state, expected_version)
        data = dump(self._store.serializer, replace(state, version=expected_version + 1))
        applied = await _write(
            self._store,
            self._fence,
            state.conversation_id,
            "saving a compression state",
            _SAVE_STATE,
            [self._store._key("compression", state.conversation_id)],
            [expected_version, data, expected_version + 1, uuid.uuid4().hex],
        )
        return bool(applied == 1)


class RedisCompressionStateStore(BlockingCompressionStateStore):
    """Compression states of a `RedisAgentStore` (blocking)."""


def _corrupt_index(conversation_id: str, message_id: str) -> SerializationError:
    return SerializationError(
        f"conversation {conversation_id!r}, message {message_id!r}: its stored index entry is "
        "not 'position version kind'"
    )
