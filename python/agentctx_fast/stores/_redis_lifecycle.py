"""The data lifecycle of the Redis stores (SPEC §21): delete a conversation, list them.

A conversation's keys (see `agentctx_fast.stores.redis`) all carry its hash tag, so one Lua
script deletes them all on one node, the lease check first in the same script. Its turn
records are one key each (``p turn:{c}:t``); their ids are kept in the set ``p turns:{c}``,
which the save script extends, so the delete script finds them without a scan.

`list_conversations` scans (``SCAN``, on a cluster every master) and sorts per page: a global
sorted index could not be kept in the same script as a conversation's writes on a cluster
(another slot), nor expire with the conversation's keys (``ttl_seconds``). So a page costs a
scan of the store's keys: a call for tools and jobs, not for a request's hot path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentctx_fast.core.turns import TurnStatus
from agentctx_fast.errors import SerializationError, StoreError
from agentctx_fast.stores._redis_io import (
    conversation_tag,
    glob_escaped,
    tag_conversation,
    text,
)
from agentctx_fast.stores.lifecycle import page_of
from agentctx_fast.stores.turn_store import ConversationLease, busy_error

if TYPE_CHECKING:
    from agentctx_fast.stores.redis import _RedisStoreBase

# The kinds of keys that make a conversation listed (a quarantine alone does not).
_LISTED = ("conv", "compression", "turn", "turns", "lease")

# KEYS: the conversation's keys (`conversation_keys`; the lease fifth, the turn ids sixth).
# ARGV: the head of its turn keys, now, '1' to force. {1, keys removed}, {0, turn} busy, {-1}
# a running lease whose expiry is not a number.
_DELETE = """
local lease = redis.call('HMGET', KEYS[5], 'turn_id', 'status', 'expires_at')
if ARGV[3] ~= '1' and lease[2] == 'running' then
  local expires = tonumber(lease[3])
  if expires == nil then return {-1} end
  if expires > tonumber(ARGV[2]) then return {0, lease[1] or ''} end
end
local removed = 0
for _, turn in ipairs(redis.call('SMEMBERS', KEYS[6])) do
  removed = removed + redis.call('DEL', ARGV[1] .. turn)
end
for i = 1, #KEYS do removed = removed + redis.call('DEL', KEYS[i]) end
return {1, removed}
"""


def conversation_keys(store: _RedisStoreBase, conversation_id: str) -> list[str]:
    """Every key of the conversation but its turn records: messages (records, index, visible
    positions), compression state, lease, turn ids, quarantine, deleted message ids."""
    messages = store._key("conv", conversation_id)
    return [
        messages + ":r",
        messages + ":i",
        messages + ":vp",
        store._key("compression", conversation_id),
        store._key("lease", conversation_id),
        store._key("turns", conversation_id),
        store._key("quarantine", conversation_id),
        store._key("deleted", conversation_id),
    ]


async def delete_conversation(
    store: _RedisStoreBase, conversation_id: str, force: bool, now: float
) -> bool:
    """One script: refuses while a turn runs under a live lease (unless ``force``), else
    deletes every key of the conversation; True when there was any."""
    head = store._key("turn", conversation_id) + ":"
    reply = await store._port.script(
        "deleting a conversation",
        _DELETE,
        conversation_keys(store, conversation_id),
        [head, repr(float(now)), "1" if force else "0"],
    )
    code = int(reply[0])
    if code == 1:
        return int(reply[1]) > 0
    if code == 0:
        lease = ConversationLease(conversation_id, text(reply[1]), TurnStatus.RUNNING, None, None)
        raise busy_error(conversation_id, lease)
    if code == -1:
        raise SerializationError(
            f"conversation {conversation_id!r}, lease: a running lease whose expiry is not a "
            "number; delete with force=True"
        )
    raise StoreError(f"unexpected delete script reply {reply!r}")


async def list_conversations(
    store: _RedisStoreBase, prefix: str, limit: int, after: str | None
) -> list[str]:
    """A page of conversation ids (a ``SCAN`` of the store's keys, then sorted)."""
    encoded = conversation_tag(prefix)[:-1]  # "{" and the encoded prefix: a prefix of the tag
    match = glob_escaped(store.key_prefix) + "*:" + glob_escaped(encoded) + "*"
    found: set[str] = set()
    for key in await store._port.scan("listing conversations", match):
        conversation_id = _conversation_of(text(key), store.key_prefix)
        if conversation_id is not None:
            found.add(conversation_id)
    return page_of(found, prefix, limit, after)


def _conversation_of(key: str, key_prefix: str) -> str | None:
    """The conversation of a store key ``{key_prefix}{kind}:{tag}…`` of a listed kind."""
    if not key.startswith(key_prefix):
        return None
    kind, opened, rest = key[len(key_prefix) :].partition(":{")
    tag, closed, _ = rest.partition("}")
    if not opened or not closed or kind not in _LISTED:
        return None
    return tag_conversation(tag)
