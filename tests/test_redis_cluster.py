"""The Redis key layout on a cluster (SPEC §19): one hash slot per conversation, whatever its id.

The contract, turn-store and runner suites run on the ``redis-cluster`` store kinds too; these
tests pin what those suites cannot see: the tag of ids holding braces, the spread of
conversations over the masters, and the refusal of prefixes that would break the tag.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentctx_fast import AiMessage, InvalidArgumentError, UserMessage, VersionConflictError
from agentctx_fast.compression.coordinator import CompressionState
from agentctx_fast.stores._redis_io import conversation_key, conversation_tag
from store_fixtures import cluster_store, new_conversation_id

redis = pytest.importorskip("redis")
from redis.crc import key_slot  # noqa: E402

# Ids a conversation may have: any text without NUL, braces, colons and percent signs included.
conversation_ids = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1
)


def _decode(tag: str) -> str:
    return tag[1:-1].replace("%7D", "}").replace("%7B", "{").replace("%25", "%")


@given(conversation_ids, st.text(min_size=1))
def test_every_key_of_a_conversation_hashes_to_the_slot_of_its_whole_id(
    conversation_id: str, turn_id: str
) -> None:
    tag = conversation_tag(conversation_id)
    assert tag.count("{") == tag.count("}") == 1  # the whole id is one tag
    assert _decode(tag) == conversation_id  # and the tag says which id
    keys = [
        conversation_key("agent:", kind, conversation_id, *parts)
        for kind, parts in [
            ("conv", ("r",)), ("conv", ("i",)), ("conv", ("vp",)), ("compression", ()),
            ("turn", (turn_id,)), ("lease", ()),
        ]
    ]  # fmt: skip
    assert {key_slot(key.encode()) for key in keys} == {key_slot(tag[1:-1].encode())}


@given(conversation_ids, conversation_ids)
def test_two_ids_never_share_a_key(first: str, second: str) -> None:
    if first != second:
        assert conversation_key("p:", "conv", first, "r") != conversation_key(
            "p:", "conv", second, "r"
        )


def test_ids_that_differ_only_around_braces_keep_their_own_keys() -> None:
    assert conversation_tag("a}b") == "{a%7Db}"
    assert conversation_tag("a%7Db") == "{a%257Db}"
    # Without the tag's braces, turn "c" of conversation "a:b" and turn "b:c" of "a" collided.
    assert conversation_key("p:", "turn", "a:b", "c") != conversation_key("p:", "turn", "a", "b:c")


@pytest.mark.parametrize("prefix", ["agent{x}:", "{", "a}b:"])
def test_a_key_prefix_with_braces_is_refused(prefix: str) -> None:
    from agentctx_fast.stores.redis import AsyncRedisAgentStore, RedisAgentStore

    for store_class in (RedisAgentStore, AsyncRedisAgentStore):
        with pytest.raises(InvalidArgumentError, match="braces"):
            store_class("redis://127.0.0.1:1/0", key_prefix=prefix)


def test_a_client_of_another_kind_is_refused() -> None:
    from agentctx_fast.stores.redis import RedisAgentStore

    with pytest.raises(InvalidArgumentError, match=r"redis\.cluster\.RedisCluster"):
        RedisAgentStore(object())  # type: ignore[arg-type]


@pytest.fixture
def cluster(redis_cluster: Any) -> Iterator[Any]:
    store = cluster_store(redis_cluster.url)
    try:
        yield store
    finally:
        store.close()


@pytest.mark.parametrize("suffix", ["{x}", "}", "{", "a}b{c", "%7D", "}:m", "{}", "订单}"])
def test_ids_with_braces_work_on_the_cluster(cluster: Any, suffix: str) -> None:
    base = new_conversation_id()
    conversation_id = base + suffix
    # the id with its braces spelt as their escapes, or the escape spelt as a brace
    escaped = suffix.replace("}", "%7D").replace("{", "%7B")
    lookalike = base + (escaped if escaped != suffix else suffix.replace("%7D", "}"))
    assert lookalike != conversation_id
    memory = cluster.chat_memory(conversation_id)
    user = UserMessage("where is my order?", message_id="u1")
    assert memory.add_message_if_absent(user)
    assert memory.add_message_if_absent(AiMessage("shipped", message_id="a1"))
    assert not memory.add_message_if_absent(user)
    updated = memory.update_message(AiMessage("shipped today", message_id="a1"), 0)
    with pytest.raises(VersionConflictError):
        memory.update_message(AiMessage("stale", message_id="a1"), 0)
    assert memory.get_messages() == [user, updated]
    assert memory.get_model_messages(1) == [updated]
    assert cluster.chat_memory(lookalike).get_messages() == []

    states = cluster.compression_state_store()
    state = CompressionState(conversation_id, covered_tokens=3)
    assert states.save(state, 0)
    assert states.load(conversation_id).covered_tokens == 3  # type: ignore[union-attr]

    turns = cluster.turn_store()
    assert turns.acquire_conversation(conversation_id, "t{1}", "owner", 30.0, 0.0) is None
    lease = turns.open_turn(conversation_id)
    assert lease is not None and lease.turn_id == "t{1}"
    assert turns.release_conversation(conversation_id, "t{1}", "owner", 1.0)
    assert turns.open_turn(conversation_id) is None


def test_conversations_spread_over_every_master(cluster: Any, redis_cluster: Any) -> None:
    prefix = f"spread{new_conversation_id()}:"
    from agentctx_fast.stores.redis import RedisAgentStore

    store = RedisAgentStore(cluster.client, key_prefix=prefix)
    for i in range(60):
        store.chat_memory(f"c{i}").add_message(UserMessage("hi", message_id="u"))
    per_master = []
    for port in redis_cluster.ports:
        node = redis.Redis(port=port)
        try:
            per_master.append(len(node.keys(f"{prefix}*")))
        finally:
            node.close()
    assert sum(per_master) == 60 * 3  # three keys per conversation (records, index, visible)
    assert all(count > 0 for count in per_master), per_master


def _moved_replies(ports: list[int]) -> int:
    """How many MOVED errors the masters have answered (INFO errorstats)."""
    total = 0
    for port in ports:
        node = redis.Redis(port=port)
        try:
            total += int(node.info("errorstats").get("errorstat_MOVED", {}).get("count", 0))
        finally:
            node.close()
    return total


def test_a_fresh_async_cluster_client_routes_its_first_concurrent_commands(
    redis_cluster: Any,
) -> None:
    """Tasks that start at once on a new client: the store loads the slot map before the first
    command, so none goes to the wrong master (redis-py closes every connection, in-flight
    commands' too, after five MOVED replies, and retries them)."""
    import asyncio

    from redis.asyncio.cluster import RedisCluster

    from agentctx_fast.stores.redis import AsyncRedisAgentStore

    async def main() -> list[str | None]:
        client = RedisCluster.from_url(redis_cluster.url)
        try:
            turns = AsyncRedisAgentStore(client).turn_store()
            conversations = [new_conversation_id() for _ in range(32)]
            return await asyncio.gather(
                *(turns.acquire_conversation(cid, "t", "o", 30.0, 1.0) for cid in conversations)
            )
        finally:
            await client.aclose()

    before = _moved_replies(redis_cluster.ports)
    for _ in range(5):
        assert asyncio.run(main()) == [None] * 32  # every lease taken, none taken twice
    assert _moved_replies(redis_cluster.ports) == before
