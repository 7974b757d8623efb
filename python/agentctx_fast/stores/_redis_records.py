"""The Redis stores' records as stored, for naming a bad one and for `agentctx doctor`.

Keys are those of `agentctx_fast.stores.redis` (``p conv:{c}:r`` records, ``…:i`` index,
``…:vp`` visible positions, ``p turn:{c}:t``, ``p lease:{c}``). A quarantined record moves into
the hash ``p quarantine:{c}`` (same slot): field ``"N kind id"`` holds its bytes and ``"N kind id
problem"`` why it was moved. Each move is one Lua script that first checks the record still
holds what was read; a message's removal closes the gap in the record list and shifts the
positions after it in the index and the visible list, in the same script.
"""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING, Any

from agentctx_fast.stores._records import QuarantinedRecord, StoredRecord, UndecodableRecord
from agentctx_fast.stores._redis_io import (
    glob_escaped,
    raw,
    tag_conversation,
    text,
)

if TYPE_CHECKING:
    from agentctx_fast.errors import SerializationError
    from agentctx_fast.stores.redis import _RedisStoreBase

# Removes the record at position p (a number) from the record list KEYS[1], closing the gap:
# the index entry at p goes (HDEL of ``id`` when known, else found by a scan) and the positions
# after p in the index KEYS[2] and the visible list KEYS[3] move down one. ``marker`` is a value
# no record holds (LSET then LREM, as Redis removes list items by value). The newest record
# with its id known (a session popping its last item) costs a few commands, not a scan.
REMOVE_RECORD = """
local function remove_record(p, id, marker)
  if id and p == redis.call('LLEN', KEYS[1]) - 1 then
    redis.call('RPOP', KEYS[1])
    redis.call('HDEL', KEYS[2], id)
    if tonumber(redis.call('LINDEX', KEYS[3], -1)) == p then redis.call('RPOP', KEYS[3]) end
    return
  end
  redis.call('LSET', KEYS[1], p, marker)
  redis.call('LREM', KEYS[1], 1, marker)
  if id then redis.call('HDEL', KEYS[2], id) end
  local index = redis.call('HGETALL', KEYS[2])
  for i = 1, #index, 2 do
    local position, rest = string.match(index[i + 1], '^(%d+) (.*)$')
    if position then
      position = tonumber(position)
      if position == p then
        redis.call('HDEL', KEYS[2], index[i])
      elseif position > p then
        redis.call('HSET', KEYS[2], index[i], string.format('%d', position - 1) .. ' ' .. rest)
      end
    end
  end
  local visible = redis.call('LRANGE', KEYS[3], 0, -1)
  redis.call('DEL', KEYS[3])
  for i = 1, #visible do
    local position = tonumber(visible[i])
    if position == nil or position < p then
      redis.call('RPUSH', KEYS[3], visible[i])
    elseif position > p then
      redis.call('RPUSH', KEYS[3], string.format('%d', position - 1))
    end
  end
end
"""

# KEYS: records, index, visible, quarantine. ARGV: position, record, label, problem, marker.
_QUARANTINE_MESSAGE = (
    REMOVE_RECORD
    + """
local p = tonumber(ARGV[1])
if redis.call('LINDEX', KEYS[1], p) ~= ARGV[2] then return 0 end
local n = redis.call('HINCRBY', KEYS[4], '#', 1)
redis.call('HSET', KEYS[4], n .. ' ' .. ARGV[3], ARGV[2], n .. ' ' .. ARGV[3] .. ' problem',
           ARGV[4])
remove_record(p, false, ARGV[5])
return 1
"""
)

# KEYS: the record's hash, quarantine. ARGV: the fields read (JSON), what to keep, label,
# problem, then the field names and their values as read ('' for absent).
_QUARANTINE_HASH = """
for i = 5, #ARGV, 2 do
  if (redis.call('HGET', KEYS[1], ARGV[i]) or '') ~= ARGV[i + 1] then return 0 end
end
local n = redis.call('HINCRBY', KEYS[2], '#', 1)
redis.call('HSET', KEYS[2], n .. ' ' .. ARGV[3], ARGV[2], n .. ' ' .. ARGV[3] .. ' problem',
           ARGV[4])
redis.call('DEL', KEYS[1])
return 1
"""


class RedisRecords:
    """Raw access to one async Redis store's records."""

    def __init__(self, store: _RedisStoreBase) -> None:
        self._store = store
        self._port = store._port
        self._prefix = store.key_prefix
        self._turn_keys: dict[str, list[str]] | None = None

    async def _command(self, action: str, name: str, *args: Any) -> Any:
        return await self._port.command(action, name, *args)

    async def conversations(self) -> list[str]:
        """Every conversation with messages, turns or a lease (a ``SCAN`` of every master)."""
        found: set[str] = set()
        for kind in ("conv", "turn", "lease"):
            pattern = f"{glob_escaped(self._prefix + kind)}:{{*"
            for key in await self._port.scan("listing conversations", pattern):
                conversation = _conversation_of(text(key), self._prefix + kind + ":")
                if conversation is not None:
                    found.add(conversation)
        return sorted(found)

    def _message_keys(self, conversation_id: str) -> list[str]:
        keys = self._store._key("conv", conversation_id)
        return [keys + ":r", keys + ":i", keys + ":vp"]

    async def _positions(self, conversation_id: str) -> dict[int, str]:
        """Message ids by record position, from the index (entries that parse)."""
        index = await self._command(
            "reading a message index", "hgetall", self._message_keys(conversation_id)[1]
        )
        ids: dict[int, str] = {}
        for message_id, entry in index.items():
            head = text(entry).split(" ", 1)[0]
            if head.isdigit():
                ids[int(head)] = text(message_id)
        return ids

    async def messages(self, conversation_id: str) -> list[StoredRecord]:
        records = await self._command(
            "reading message records", "lrange", self._message_keys(conversation_id)[0], 0, -1
        )
        ids = await self._positions(conversation_id)
        return [
            StoredRecord("message", ids.get(position), raw(data), position)
            for position, data in enumerate(records)
        ]

    async def named_message(self, bad: UndecodableRecord) -> SerializationError:
        """``bad`` naming its message: its position in the record list, then the index."""
        for record in await self.messages(bad.conversation_id):
            if record.data == bad.data:
                return bad.named(record.record_id)
        return bad.named(None)

    async def turns(self, conversation_id: str) -> list[StoredRecord]:
        """The conversation's turn records. Turn keys are found by one ``SCAN`` of every
        master, the first time this object is asked (a doctor's pass makes a new one)."""
        if self._turn_keys is None:
            self._turn_keys = {}
            head = self._prefix + "turn:"
            for key in await self._port.scan("listing turn records", glob_escaped(head) + "{*"):
                name = text(key)
                owner = _conversation_of(name, head)
                if owner is not None:
                    self._turn_keys.setdefault(owner, []).append(name)
        prefix = self._store._key("turn", conversation_id) + ":"
        out: list[StoredRecord] = []
        for name in self._turn_keys.get(conversation_id, []):
            if not name.startswith(prefix):
                continue
            version, data = await self._command(
                "reading a turn record", "hmget", name, ["version", "data"]
            )
            if version is None and data is None:
                continue  # gone since the scan
            kept = b"" if data is None else raw(data)
            out.append(StoredRecord("turn", name[len(prefix) :], kept, name, version))
        return sorted(out, key=lambda record: str(record.record_id))

    async def lease(self, conversation_id: str) -> StoredRecord | None:
        key = self._store._key("lease", conversation_id)
        fields = await self._command("reading a lease record", "hgetall", key)
        if not fields:
            return None
        plain = {text(k): raw(v).decode("utf-8", "replace") for k, v in fields.items()}
        return StoredRecord("lease", None, json.dumps(plain).encode("utf-8"), plain)

    async def quarantine(self, conversation_id: str, record: StoredRecord, problem: str) -> bool:
        """Move ``record`` into the conversation's quarantine hash; False when it changed since
        it was read."""
        quarantine = self._store._key("quarantine", conversation_id)
        label = record.kind if record.record_id is None else f"{record.kind} {record.record_id}"
        if record.kind == "message":
            keys = [*self._message_keys(conversation_id), quarantine]
            marker = f"\x00quarantined {uuid.uuid4().hex}"
            args: list[Any] = [record.key, record.data, label, problem, marker]
            moved = await self._store._script(
                "quarantining a message record", _QUARANTINE_MESSAGE, keys, args, conversation_id
            )
            return bool(moved == 1)
        if record.kind == "turn":
            key = str(record.key)
            version = "" if record.version is None else raw(record.version)
            checks: list[Any] = ["version", version, "data", record.data]
        else:
            key = self._store._key("lease", conversation_id)
            checks = [item for pair in record.key.items() for item in pair]
        args = ["", record.data, label, problem, *checks]
        moved = await self._store._script(
            f"quarantining a {record.kind} record",
            _QUARANTINE_HASH,
            [key, quarantine],
            args,
            conversation_id,
        )
        return bool(moved == 1)

    async def quarantined(self, conversation_id: str) -> list[QuarantinedRecord]:
        """The records quarantined from ``conversation_id``, oldest first."""
        fields = await self._command(
            "reading quarantined records",
            "hgetall",
            self._store._key("quarantine", conversation_id),
        )
        entries = {text(k): raw(v) for k, v in fields.items()}
        out: list[tuple[int, QuarantinedRecord]] = []
        for name, data in entries.items():
            number, _, label = name.partition(" ")
            if not number.isdigit() or label.endswith(" problem"):
                continue
            kind, _, record_id = label.partition(" ")
            problem = entries.get(f"{name} problem", b"").decode("utf-8", "replace")
            record = QuarantinedRecord(conversation_id, kind, record_id or None, data, problem)
            out.append((int(number), record))
        return [record for _, record in sorted(out, key=lambda item: item[0])]


def _conversation_of(key: str, head: str) -> str | None:
    """The conversation id in the ``{…}`` tag of ``key`` (which starts with ``head``)."""
    if not key.startswith(head + "{"):
        return None
    tag, closed, _ = key[len(head) + 1 :].partition("}")
    if not closed:
        return None
    return tag_conversation(tag)
