"""Stores decode each distinct stored record once and reuse the message object after that."""

from __future__ import annotations

from typing import Any

import pytest

from agentctx_fast import AgentCtxError, AiMessage, UserMessage
from agentctx_fast._cache import GenerationCache
from agentctx_fast.stores import serializer as serializer_module
from agentctx_fast.stores._loader import MAX_CACHED_RECORD_BYTES
from store_fixtures import make_store, new_conversation_id

SERVER_KINDS = ("sqlite", "postgresql", "redis")


class _CountingSerializer(serializer_module.JsonAgentStoreSerializer):
    def __init__(self) -> None:
        super().__init__()
        self.loads_calls = 0

    def loads(self, data: bytes) -> object:
        self.loads_calls += 1
        return super().loads(data)


@pytest.mark.parametrize("kind", SERVER_KINDS)
def test_a_record_read_again_is_not_decoded_again(
    kind: str, request: pytest.FixtureRequest
) -> None:
    serializer = _CountingSerializer()
    store = make_store(kind, request, serializer=serializer)
    try:
        memory = store.chat_memory(new_conversation_id())
        memory.add_message(UserMessage("Where is ORD-1?", message_id="u1"))
        memory.add_message(AiMessage("Shipped.", message_id="a1"))
        first = memory.get_messages()
        assert serializer.loads_calls == 2
        second = memory.get_messages()
        assert serializer.loads_calls == 2
        assert [a is b for a, b in zip(first, second, strict=True)] == [True, True]
        assert memory.get_message("a1") is first[1]
        assert memory.get_model_messages(1)[0] is first[1]
        assert serializer.loads_calls == 2
    finally:
        store.close()


@pytest.mark.parametrize("kind", SERVER_KINDS)
def test_an_updated_record_is_read_as_updated(kind: str, request: pytest.FixtureRequest) -> None:
    store = make_store(kind, request)
    try:
        memory = store.chat_memory(new_conversation_id())
        memory.add_message(UserMessage("hi", message_id="u1"))
        before = memory.get_message("u1")
        assert before is not None and before.version == 0
        memory.update_message(UserMessage("hi, edited", message_id="u1"), 0)
        after = memory.get_message("u1")
        assert after is not None and (after.text, after.version) == ("hi, edited", 1)
        assert memory.get_messages() == [after]
    finally:
        store.close()


@pytest.mark.parametrize("kind", SERVER_KINDS)
def test_cache_off_decodes_every_read(kind: str, request: pytest.FixtureRequest) -> None:
    serializer = _CountingSerializer()
    store = make_store(kind, request, serializer=serializer, message_cache_size=0)
    try:
        memory = store.chat_memory(new_conversation_id())
        memory.add_message(UserMessage("hi", message_id="u1"))
        first, second = memory.get_messages(), memory.get_messages()
        assert first == second and first[0] is not second[0]
        assert serializer.loads_calls == 2
    finally:
        store.close()


@pytest.mark.parametrize("kind", SERVER_KINDS)
@pytest.mark.parametrize("size", [-1, 1.5, True, "8"])
def test_invalid_cache_size(kind: str, size: Any, request: pytest.FixtureRequest) -> None:
    with pytest.raises(AgentCtxError, match="message_cache_size"):
        make_store(kind, request, message_cache_size=size)


def test_generation_cache_is_bounded_and_keeps_what_is_in_use() -> None:
    cache: GenerationCache[int, str] = GenerationCache(3)
    for key in range(3):
        cache.put(key, str(key))
    cache.put(3, "3")  # the young generation rotates: 0..2 are old now
    assert cache.get(0) == "0"  # promoted back to the young generation
    for key in range(4, 7):
        cache.put(key, str(key))
    assert len(cache) <= 6
    assert cache.get(1) is None and cache.get(2) is None  # rotated out twice
    assert cache.get(0) == "0"  # survived the second rotation because it was promoted
    assert cache.get(6) == "6"
    with pytest.raises(AgentCtxError, match="cache_size"):
        GenerationCache(0)


def test_generation_cache_bounds_the_weight() -> None:
    cache: GenerationCache[int, int] = GenerationCache(1_000, max_weight=100)
    for key in range(50):
        cache.put(key, key, weight=30)
        assert len(cache) <= 8  # at most two generations of four entries of weight 30
    assert cache.get(49) == 49 and cache.get(0) is None


@pytest.mark.parametrize("kind", SERVER_KINDS)
def test_conversations_never_share_a_decoded_object(
    kind: str, request: pytest.FixtureRequest
) -> None:
    store = make_store(kind, request)
    try:
        first = store.chat_memory(new_conversation_id())
        forked = store.chat_memory(new_conversation_id())
        for memory in (first, forked):  # byte-identical records in two conversations
            memory.add_message(UserMessage("hi", message_id="u1", metadata={"tenant": "acme"}))
        mine = first.get_messages()[0]
        theirs = forked.get_messages()[0]
        assert mine == theirs and mine is not theirs
        mine.metadata["rendered_for"] = "user-7"  # a caller breaking immutability
        assert forked.get_messages()[0].metadata == {"tenant": "acme"}
    finally:
        store.close()


@pytest.mark.parametrize("kind", SERVER_KINDS)
def test_large_records_are_not_kept(kind: str, request: pytest.FixtureRequest) -> None:
    serializer = _CountingSerializer()
    store = make_store(kind, request, serializer=serializer)
    try:
        memory = store.chat_memory(new_conversation_id())
        big = "x" * (MAX_CACHED_RECORD_BYTES + 1)
        memory.add_message(UserMessage(big, message_id="u1"))
        assert memory.get_messages() == memory.get_messages()
        assert serializer.loads_calls == 2
    finally:
        store.close()


@pytest.mark.parametrize("kind", SERVER_KINDS)
def test_a_replaced_serializer_is_used_for_reads(kind: str, request: pytest.FixtureRequest) -> None:
    store = make_store(kind, request)
    try:
        memory = store.chat_memory(new_conversation_id())
        memory.add_message(UserMessage("hi", message_id="u1"))
        assert memory.get_messages()[0].text == "hi"
        replacement = _CountingSerializer()
        store.serializer = replacement
        assert memory.get_messages()[0].text == "hi"
        assert replacement.loads_calls == 1
    finally:
        store.close()


@pytest.mark.parametrize("kind", SERVER_KINDS)
def test_cache_info_counts_hits_and_misses(kind: str, request: pytest.FixtureRequest) -> None:
    store = make_store(kind, request)
    try:
        assert store.message_cache_info().hit_rate == 0.0
        memory = store.chat_memory(new_conversation_id())
        for i in range(4):
            memory.add_message_if_absent(UserMessage(f"q{i}", message_id=f"u{i}"))
        memory.get_messages()  # four records decoded
        memory.get_messages(2)  # two of them again
        info = store.message_cache_info()
        assert (info.hits, info.misses, info.entries) == (2, 4, 4)
        assert info.hit_rate == pytest.approx(2 / 6)
    finally:
        store.close()
    uncached = make_store(kind, request, message_cache_size=0)
    try:
        memory = uncached.chat_memory(new_conversation_id())
        memory.add_message_if_absent(UserMessage("q", message_id="u"))
        memory.get_messages()
        assert uncached.message_cache_info() == type(info)(0, 0, 0)
    finally:
        uncached.close()
