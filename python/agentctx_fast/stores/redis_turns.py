"""Turn snapshots and conversation leases in Redis: every decision is one Lua script.

Keys under prefix ``p`` for conversation ``c`` and turn ``t``: ``p turn:{c}:t`` (hash: version,
data), ``p turns:{c}`` (set: the ids of its turns, for `delete_conversation`) and
``p lease:{c}`` (hash: turn_id, status, owner, expires_at, cancel_requested), tagged
like the conversation's messages (`agentctx_fast.stores._redis_io.conversation_tag`), so on a
cluster they live in its slot. Times are the caller's wall-clock seconds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentctx_fast._ids import check_conversation_id
from agentctx_fast.core.turns import TurnStatus
from agentctx_fast.errors import SerializationError, StoreError, StoreUnavailableError
from agentctx_fast.stores._records import decode_lease, naming, record_error
from agentctx_fast.stores._redis_io import raw, text, write_script
from agentctx_fast.stores.turn_store import (
    AgentTurnSnapshot,
    BlockingAgentTurnStore,
    ConversationLease,
    Fence,
    LeaseRenewal,
    busy_error,
    check_lease_arguments,
    check_snapshot_save,
    check_turn_ids,
    dump_snapshot,
    load_snapshot,
)

if TYPE_CHECKING:
    from agentctx_fast.stores.redis import _RedisStoreBase

_OPEN = frozenset((TurnStatus.RUNNING.value, TurnStatus.SUSPENDED.value))

# KEYS: the turn hash, the conversation's set of turn ids. ARGV: expected version, data, next
# version (computed by the client: Lua numbers are doubles, which lose versions above 2**53),
# turn id. A fenced save re-sent that finds itself applied (the next version holding the same
# data) is 1 too.
_SAVE_TURN = write_script(
    """
local version = redis.call('HGET', KEYS[1], 'version') or '0'
if FENCED and version == ARGV[3] and redis.call('HGET', KEYS[1], 'data') == ARGV[2] then
  return 1
end
if version ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'version', ARGV[3], 'data', ARGV[2])
redis.call('SADD', KEYS[2], ARGV[4])
return 1
"""
)

# KEYS: the lease hash. ARGV: turn_id, owner, expires_at, now.
# Returns {1} taken, {2, old turn} taken over an expired lease, {0, turn, status} busy. A
# re-sent call that finds the lease taken by this owner answers as the first one did.
_ACQUIRE = """
local lease = redis.call('HMGET', KEYS[1], 'turn_id', 'status', 'expires_at', 'owner',
                         'previous')
if lease[1] == ARGV[1] and lease[4] == ARGV[2] then
  if lease[5] then return {2, lease[5]} end
  return {1}
end
if lease[1] then
  if lease[2] ~= 'running' or tonumber(lease[3]) > tonumber(ARGV[4]) then
    return {0, lease[1], lease[2]}
  end
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'turn_id', ARGV[1], 'status', 'running', 'owner', ARGV[2],
           'expires_at', ARGV[3], 'cancel_requested', '0')
if lease[1] then
  redis.call('HSET', KEYS[1], 'previous', lease[1])
  return {2, lease[1]}
end
return {1}
"""

# KEYS: the lease hash. ARGV: turn_id, owner, expires_at. Returns 0 lost, 1 renewed, 2 cancel.
_RENEW = """
local lease = redis.call('HMGET', KEYS[1], 'turn_id', 'owner', 'cancel_requested')
if lease[1] ~= ARGV[1] or lease[2] ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], 'expires_at', ARGV[3])
if lease[3] == '1' then return 2 end
return 1
"""

# KEYS: the lease hash. ARGV: turn_id, owner.
_SUSPEND = """
local lease = redis.call('HMGET', KEYS[1], 'turn_id', 'owner')
if lease[1] ~= ARGV[1] or lease[2] ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[1], 'owner', 'expires_at')
redis.call('HSET', KEYS[1], 'status', 'suspended', 'cancel_requested', '0')
return 1
"""

# KEYS: the lease hash, the turn hash. ARGV: turn_id, owner, expires_at, the turn record's
# expected version ('' for any). A re-sent call that finds this owner holding it is 1.
_REACQUIRE = """
local lease = redis.call('HMGET', KEYS[1], 'turn_id', 'status', 'owner')
if lease[1] == ARGV[1] and lease[3] == ARGV[2] then return 1 end
if lease[1] ~= ARGV[1] or lease[2] ~= 'suspended' then return 0 end
if ARGV[4] ~= '' and (redis.call('HGET', KEYS[2], 'version') or '0') ~= ARGV[4] then
  return 0
end
redis.call('HSET', KEYS[1], 'status', 'running', 'owner', ARGV[2], 'expires_at', ARGV[3])
return 1
"""

# KEYS: the lease hash. ARGV: turn_id, now.
_REQUEST_CANCEL = """
local lease = redis.call('HMGET', KEYS[1], 'turn_id', 'status', 'expires_at')
if lease[1] ~= ARGV[1] or lease[2] ~= 'running' then return 0 end
if tonumber(lease[3]) <= tonumber(ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], 'cancel_requested', '1')
return 1
"""

# KEYS: the lease hash. ARGV: turn_id, owner ('' for none), now.
_RELEASE = """
local lease = redis.call('HMGET', KEYS[1], 'turn_id', 'status', 'owner', 'expires_at')
if lease[1] ~= ARGV[1] then return 0 end
if ARGV[2] ~= '' then
  if lease[3] ~= ARGV[2] then return 0 end
elseif lease[2] ~= 'suspended' and tonumber(lease[4]) > tonumber(ARGV[3]) then
  return 0
end
redis.call('DEL', KEYS[1])
return 1
"""


class AsyncRedisAgentTurnStore:
    """The turn store of the Redis stores: the one implementation, awaited by
    `AsyncRedisAgentStore` and driven blocking by `RedisAgentStore`."""

    def __init__(self, store: _RedisStoreBase) -> None:
        self._store = store

    def _turn_key(self, conversation_id: str, turn_id: str) -> str:
        return self._store._key("turn", conversation_id, turn_id)

    def _lease_key(self, conversation_id: str) -> str:
        return self._store._key("lease", conversation_id)

    async def _run(
        self, action: str, script: str, keys: list[str], args: list[Any], conversation_id: str
    ) -> Any:
        return await self._store._script(action, script, keys, args, conversation_id)

    async def load_turn(self, conversation_id: str, turn_id: str) -> AgentTurnSnapshot | None:
        check_turn_ids(conversation_id, turn_id)
        version, data = await self._store._port.command(
            f"loading turn {turn_id!r}",
            "hmget",
            self._turn_key(conversation_id, turn_id),
            ["version", "data"],
        )
        if version is None or data is None:
            return None
        with naming(conversation_id, f"turn {turn_id!r}"):
            try:
                number = int(text(version))
            except ValueError:
                raise SerializationError(f"stored version {version!r} is not a number") from None
            return load_snapshot(raw(data), number)

    async def save_turn(
        self, snapshot: AgentTurnSnapshot, expected_version: int, fence: Fence | None = None
    ) -> bool:
        check_snapshot_save(snapshot, expected_version)
        data = dump_snapshot(snapshot)
        conversation_id = snapshot.conversation_id
        keys = [
            self._turn_key(conversation_id, snapshot.turn_id),
            self._store._key("turns", conversation_id),
        ]
        args: list[Any] = [
            str(expected_version),
            data,
            str(expected_version + 1),
            snapshot.turn_id,
        ]
        script = _SAVE_TURN[0]
        if fence is not None:
            script = _SAVE_TURN[1]
            keys.append(self._lease_key(snapshot.conversation_id))
            args += [fence.turn_id, fence.owner]
        action = f"saving turn {snapshot.turn_id!r}"
        applied = await self._run(action, script, keys, args, conversation_id)
        return bool(applied == 1)

    async def open_turn(self, conversation_id: str) -> ConversationLease | None:
        check_conversation_id(conversation_id)
        fields = await self._store._port.command(
            "reading a conversation lease", "hgetall", self._lease_key(conversation_id)
        )
        if not fields:
            return None
        with naming(conversation_id, "lease"):
            lease = {text(k): text(v) for k, v in fields.items()}
        return decode_lease(
            conversation_id,
            lease.get("turn_id"),
            lease.get("status"),
            lease.get("owner"),
            lease.get("expires_at"),
            lease.get("cancel_requested") == "1",
            lease.get("previous"),
        )

    async def acquire_conversation(
        self, conversation_id: str, turn_id: str, owner: str, lease_seconds: float, now: float
    ) -> str | None:
        check_lease_arguments(conversation_id, turn_id, owner, lease_seconds)
        try:
            reply = await self._run(
                "taking a conversation lease",
                _ACQUIRE,
                [self._lease_key(conversation_id)],
                [turn_id, owner, repr(now + lease_seconds), repr(float(now))],
                conversation_id,
            )
        except StoreUnavailableError:
            raise
        except StoreError:
            await self.open_turn(conversation_id)  # a corrupt lease fails the script: name it
            raise
        code = int(reply[0])
        if code == 1:
            return None
        if code == 2:
            return text(reply[1])
        if code == 0:
            open_id = text(reply[1]) if len(reply) > 1 else ""
            status = text(reply[2]) if len(reply) > 2 else ""
            if not open_id or status not in _OPEN:  # a corrupt lease is named, never "busy"
                await self.open_turn(conversation_id)
                raise record_error(conversation_id, "lease", f"status {status!r}")
            lease = ConversationLease(conversation_id, open_id, TurnStatus(status), None, None)
            raise busy_error(conversation_id, lease)
        raise StoreError(f"unexpected lease script reply {reply!r}")

    async def renew_lease(
        self, conversation_id: str, turn_id: str, owner: str, lease_seconds: float, now: float
    ) -> LeaseRenewal:
        check_lease_arguments(conversation_id, turn_id, owner, lease_seconds)
        code = await self._run(
            "renewing a conversation lease",
            _RENEW,
            [self._lease_key(conversation_id)],
            [turn_id, owner, repr(now + lease_seconds)],
            conversation_id,
        )
        return {1: LeaseRenewal.RENEWED, 2: LeaseRenewal.CANCEL_REQUESTED}.get(
            int(code), LeaseRenewal.LOST
        )

    async def suspend_conversation(self, conversation_id: str, turn_id: str, owner: str) -> bool:
        check_turn_ids(conversation_id, turn_id, owner)
        key = self._lease_key(conversation_id)
        args = [turn_id, owner]
        return bool(
            await self._run("suspending a turn", _SUSPEND, [key], args, conversation_id) == 1
        )

    async def reacquire_conversation(
        self,
        conversation_id: str,
        turn_id: str,
        owner: str,
        lease_seconds: float,
        now: float,
        expected_version: int | None = None,
    ) -> bool:
        check_lease_arguments(conversation_id, turn_id, owner, lease_seconds)
        version = "" if expected_version is None else str(expected_version)
        args = [turn_id, owner, repr(now + lease_seconds), version]
        keys = [self._lease_key(conversation_id), self._turn_key(conversation_id, turn_id)]
        action = "resuming a turn"
        return bool(await self._run(action, _REACQUIRE, keys, args, conversation_id) == 1)

    async def request_cancel(self, conversation_id: str, turn_id: str, now: float) -> bool:
        check_turn_ids(conversation_id, turn_id)
        key = self._lease_key(conversation_id)
        args = [turn_id, repr(float(now))]
        action = "flagging a cancellation"
        return bool(await self._run(action, _REQUEST_CANCEL, [key], args, conversation_id) == 1)

    async def release_conversation(
        self, conversation_id: str, turn_id: str, owner: str | None, now: float
    ) -> bool:
        check_turn_ids(conversation_id, turn_id, owner)
        key = self._lease_key(conversation_id)
        args = [turn_id, owner or "", repr(float(now))]
        action = "releasing a conversation"
        return bool(await self._run(action, _RELEASE, [key], args, conversation_id) == 1)


class RedisAgentTurnStore(BlockingAgentTurnStore):
    """The `AgentTurnStore` of a `RedisAgentStore` (blocking)."""
