"""Stores decode each distinct stored record once and reuse the message object after that."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from types import SimpleNamespace
from typing import Any

import pytest

from agentctx_fast import AgentCtxError, AiMessage, SerializationError, UserMessage
from agentctx_fast.core._cache import GenerationCache
from agentctx_fast.stores import serializer as serializer_module
from agentctx_fast.stores._loader import MAX_CACHED_RECORD_BYTES, MessageLoader
from store_fixtures import make_store, new_conversation_id, store_url
from store_workers import update_and_append

SERVER_KINDS = ("sqlite", "postgresql", "redis")


class _Lying(int):
    """An int whose comparisons say it is not below anything."""

    def __lt__(self, other: object) -> bool:
        return False

    def __ge__(self, other: object) -> bool:
        return True


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
@pytest.mark.parametrize("off", ["message_cache_size", "message_cache_bytes"])
def test_cache_off_decodes_every_read(kind: str, off: str, request: pytest.FixtureRequest) -> None:
    serializer = _CountingSerializer()
    store = make_store(kind, request, serializer=serializer, **{off: 0})
    try:
        memory = store.chat_memory(new_conversation_id())
        memory.add_message(UserMessage("hi", message_id="u1"))
        first, second = memory.get_messages(), memory.get_messages()
        assert first == second and first[0] is not second[0]
        assert serializer.loads_calls == 2
        assert store.message_cache_info().entries == 0
    finally:
        store.close()


@pytest.mark.parametrize("kind", SERVER_KINDS)
@pytest.mark.parametrize("size", [-1, 1.5, True, "8"])
def test_invalid_cache_size(kind: str, size: Any, request: pytest.FixtureRequest) -> None:
    with pytest.raises(AgentCtxError, match="message_cache_size"):
        make_store(kind, request, message_cache_size=size)


@pytest.mark.parametrize("kind", SERVER_KINDS)
@pytest.mark.parametrize("size", [-1, 2.0, False, "64", _Lying(-5)])
def test_invalid_cache_bytes(kind: str, size: Any, request: pytest.FixtureRequest) -> None:
    with pytest.raises(
        AgentCtxError, match=f"message_cache_bytes must be an int >= 0, got {size!r}"
    ):
        make_store(kind, request, message_cache_bytes=size)


@pytest.mark.parametrize("kind", SERVER_KINDS)
def test_cache_is_bounded_in_bytes(kind: str, request: pytest.FixtureRequest) -> None:
    """A byte budget of about four records keeps at most about that many, whatever the count."""
    record = len(serializer_module.dump(
        serializer_module.JsonAgentStoreSerializer(), UserMessage("x" * 1_000, message_id="u00")
    ))  # fmt: skip
    store = make_store(kind, request, message_cache_bytes=4 * record)
    try:
        memory = store.chat_memory(new_conversation_id())
        for i in range(20):
            memory.add_message(UserMessage("x" * 1_000, message_id=f"u{i:02d}"))
        messages = memory.get_messages()
        assert len(messages) == 20
        # Two generations of about two records each (a generation rotates once it is full).
        assert store.message_cache_info().entries <= 6
        assert memory.get_message("u19") is messages[-1]  # the newest are kept
    finally:
        store.close()


def test_loader_rotates_a_generation_at_half_the_byte_budget() -> None:
    serializer, records = _records(6)
    size = max(len(r) for r in records)
    loader = MessageLoader(SimpleNamespace(serializer=serializer), 100, 4 * size)
    first = loader.load_all("c", records)
    assert loader.info().entries <= 6 and loader.misses == 6
    misses = loader.misses
    assert loader.load_all("c", records[-1:])[0] is first[-1]  # kept
    assert loader.load_all("c", records[:1])[0] is not first[0]  # rotated out
    assert loader.misses == misses + 1


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


@pytest.mark.parametrize("kind", SERVER_KINDS)
def test_warm_reads_see_another_process_writes(kind: str, request: pytest.FixtureRequest) -> None:
    """A reader whose cache holds a conversation's tail sees another process's compare-and-set
    update (same length, new bytes at the same position) and its append on the next read."""
    store = make_store(kind, request)
    try:
        conversation_id = new_conversation_id()
        memory = store.chat_memory(conversation_id)
        memory.add_messages_if_absent(
            [
                UserMessage("Where is ORD-1?", message_id="u1"),
                AiMessage("Checking.", message_id="a1"),
            ]
        )
        first = memory.get_messages()
        assert all(a is b for a, b in zip(first, memory.get_messages(), strict=True))  # warm
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(1, mp_context=context) as pool:
            version = pool.submit(
                update_and_append, kind, str(store_url(kind, request)), conversation_id
            ).result(timeout=120)
        assert version == 1
        after = memory.get_messages()
        assert [(m.message_id, m.text, m.version) for m in after] == [
            ("u1", "Where is ORD-2?", 1),
            ("a1", "Checking.", 0),
            ("a2", "ORD-2 is on its way.", 0),
        ]
        assert after[1] is first[1]  # the unchanged record is still the cached object
        assert memory.get_messages(2, offset=1) == after[:2]
        assert memory.get_model_messages(3) == after
        updated = memory.get_message("u1")
        assert updated is not None and (updated.text, updated.version) == ("Where is ORD-2?", 1)
    finally:
        store.close()


@pytest.mark.parametrize("kind", [*SERVER_KINDS, "async-redis", "async-sqlite"])
def test_warm_reads_follow_every_update_of_another_store(
    kind: str, request: pytest.FixtureRequest
) -> None:
    """A second store (its own client and cache) updates a message again and again by
    compare-and-set between the reader's reads: every read returns the latest version."""
    reader, writer = make_store(kind, request), make_store(kind, request)
    try:
        conversation_id = new_conversation_id()
        mine = reader.chat_memory(conversation_id)
        theirs = writer.chat_memory(conversation_id)
        theirs.add_messages_if_absent(
            [UserMessage("q", message_id="u1"), AiMessage("v0", message_id="a1")]
        )
        for version in range(8):
            page = mine.get_messages()
            assert [(m.text, m.version) for m in page] == [("q", 0), (f"v{version}", version)]
            assert mine.get_messages() == page
            theirs.update_message(AiMessage(f"v{version + 1}", message_id="a1"), version)
        assert mine.get_messages(1)[0].text == "v8"
    finally:
        reader.close()
        writer.close()


def test_redis_str_replies_are_read_and_cached(request: pytest.FixtureRequest) -> None:
    """A caller's client that decodes replies to str: its records are read right, cached, and
    an update is seen."""
    import redis

    from agentctx_fast.stores.redis import RedisAgentStore

    url = str(store_url("redis", request))
    client = redis.Redis.from_url(url, decode_responses=True)
    serializer = _CountingSerializer()
    store = RedisAgentStore(client, serializer=serializer)
    try:
        memory = store.chat_memory(new_conversation_id())
        memory.add_message(UserMessage("hi", message_id="u1"))
        first = memory.get_messages()
        assert memory.get_messages()[0] is first[0] and serializer.loads_calls == 1
        memory.update_message(UserMessage("hi again", message_id="u1"), 0)
        assert [(m.text, m.version) for m in memory.get_messages()] == [("hi again", 1)]
    finally:
        client.close()


def _records(count: int) -> tuple[Any, list[bytes]]:
    serializer = serializer_module.JsonAgentStoreSerializer()
    messages = [UserMessage(f"q{i}", message_id=f"u{i}") for i in range(count)]
    return serializer, [serializer_module.dump(serializer, m) for m in messages]


def test_loader_generations_are_bounded_and_keep_what_is_in_use() -> None:
    serializer, records = _records(5)
    loader = MessageLoader(SimpleNamespace(serializer=serializer), 2)
    first = loader.load_all("c", records[:2])
    loader.load_all("c", records[2:3])  # the young generation rotates: u0, u1 are old
    assert loader.load_all("c", records[:1])[0] is first[0]  # promoted back
    loader.load_all("c", records[3:5])  # rotates again: u1 is dropped, u0 (promoted) is old
    assert loader.info().entries <= 4
    assert loader.load_all("c", records[:1])[0] is first[0]  # survived the second rotation
    misses = loader.misses
    again = loader.load_all("c", records[1:2])[0]
    assert again == first[1] and again is not first[1] and loader.misses == misses + 1
    assert loader.load_all("other", records[1:2])[0] is not again  # never shared


def test_loader_counts_a_page_of_hits_and_reads_mixed_pages() -> None:
    serializer, records = _records(4)
    loader = MessageLoader(SimpleNamespace(serializer=serializer), 100)
    page = loader.load_all("c", records[:3])
    assert (loader.hits, loader.misses) == (0, 3)
    assert loader.load_all("c", records[:3]) == page and loader.hits == 3  # all hits
    mixed = loader.load_all("c", [memoryview(records[2]), records[3]])  # a driver buffer too
    assert mixed[0] is page[2] and mixed[1].message_id == "u3"
    assert (loader.hits, loader.misses) == (4, 4)


def test_loader_rejects_a_reply_that_is_no_record_after_a_warm_read() -> None:
    from agentctx_fast.stores._redis_io import raw

    serializer, records = _records(1)
    loader = MessageLoader(SimpleNamespace(serializer=serializer), 100)
    loader.load_all("c", records, raw)
    for reply in ([b"x"], 7):  # unhashable, and hashable but no record
        with pytest.raises(SerializationError, match="unexpected Redis reply"):
            loader.load_all("c", [records[0], reply], raw)


def test_loader_compares_no_str_reply_with_a_bytes_record() -> None:
    """A client decoding replies to str (``decode_responses=True``) hands the loader str
    records; a warm read never compares them with the bytes it keeps (``python -bb`` would
    raise BytesWarning). redis-py itself compares bytes with str when imported (8.2), so the
    imports run with BytesWarning ignored, and everything after them with it an error."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        """
        import warnings
        from types import SimpleNamespace

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", BytesWarning)
            from agentctx_fast import UserMessage
            from agentctx_fast.stores import serializer as s
            from agentctx_fast.stores._loader import MessageLoader
            from agentctx_fast.stores._redis_io import raw
        try:
            b"x" == "x"
        except BytesWarning:
            pass
        else:
            raise AssertionError("BytesWarning is no error after the imports")

        serializer = s.JsonAgentStoreSerializer()
        records = [s.dump(serializer, UserMessage(f"q{i}", message_id=f"u{i}")) for i in range(3)]
        loader = MessageLoader(SimpleNamespace(serializer=serializer), 100)
        first = loader.load_all("c", records, raw)
        replies = [r.decode() for r in records]
        again = loader.load_all("c", replies, raw)
        assert [a is b for a, b in zip(first, again)] == [True] * 3, again
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-bb", "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
