"""Store reads and the coordinator: page cost flat in the conversation's length (issue 3).

Conversations of 1,000 and 100,000 messages (a fifth UI messages) are bulk-loaded once per
store; ``get_messages(100)`` and ``get_model_messages(100)`` must cost about the same on both.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from agentctx_fast import AgentActionMessage, AiMessage, Message, UserMessage
from agentctx_fast.compression import compressors
from agentctx_fast.compression.coordinator import (
    CompressionCoordinator,
    CompressionState,
)
from agentctx_fast.stores import InMemoryAgentStore
from agentctx_fast.stores.redis import _ADD_IF_ABSENT, RedisAgentStore
from agentctx_fast.stores.serializer import dump
from agentctx_fast.stores.sql import SqlAgentStore

SIZES = (1_000, 100_000)
KINDS = ("memory", "sqlite", "postgresql", "redis")


def history(size: int, prefix: str = "m") -> list[Message]:
    out: list[Message] = []
    for i in range(size):
        if i % 5 == 4:
            out.append(AgentActionMessage(payload={"button": i}, message_id=f"{prefix}{i}"))
        elif i % 2 == 0:
            text = f"question {i} about order ORD-{i:06d}"
            out.append(UserMessage(text, message_id=f"{prefix}{i}"))
        else:
            out.append(AiMessage(f"answer {i}: " + "details " * 20, message_id=f"{prefix}{i}"))
    return out


def bulk_load(store: Any, conversation_id: str, messages: list[Message]) -> None:
    """Fill a conversation fast, through the store's own tables or keys (benchmark setup)."""
    if isinstance(store, SqlAgentStore):
        rows = [
            {
                "conversation_id": conversation_id,
                "message_id": m.message_id,
                "kind": type(m).__name__,
                "model_visible": m.model_visible,
                "version": m.version,
                "data": dump(store.serializer, m),
            }
            for m in messages
        ]
        with store.engine.begin() as connection:
            for start in range(0, len(rows), 10_000):
                connection.execute(sa.insert(store._tables.messages), rows[start : start + 10_000])
        return
    memory = store.chat_memory(conversation_id)
    if isinstance(store, RedisAgentStore):
        inner = memory._inner  # the store's one implementation holds the key names
        keys = inner._keys()
        add = store.client.register_script(_ADD_IF_ABSENT[0])  # unfenced
        for start in range(0, len(messages), 5_000):
            pipe = store.client.pipeline(transaction=False)
            for m in messages[start : start + 5_000]:
                add(keys=keys, args=inner._fields(m), client=pipe)
            pipe.execute()
        return
    for m in messages:
        memory.add_message_if_absent(m)


@pytest.fixture(scope="module", params=KINDS)
def loaded_store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Any, dict[int, str]]]:
    kind = str(request.param)
    if kind == "memory":
        store: Any = InMemoryAgentStore()
    elif kind == "sqlite":
        store = SqlAgentStore(f"sqlite:///{tmp_path_factory.mktemp('bench') / 'agent.db'}")
    elif kind == "postgresql":
        store = SqlAgentStore(request.getfixturevalue("postgres_server").url)
    else:
        store = RedisAgentStore(request.getfixturevalue("redis_server").url)
    if isinstance(store, SqlAgentStore):
        store.schema.initialize()
    conversations = {}
    for size in SIZES:
        conversations[size] = f"bench-{size}-{uuid.uuid4().hex[:8]}"
        bulk_load(store, conversations[size], history(size))
    yield kind, store, conversations
    store.close()


def _uncached(store: Any) -> Any:
    """The same tables or keys through a store that decodes every record it reads."""
    if isinstance(store, SqlAgentStore):
        return SqlAgentStore(store.engine, message_cache_size=0)
    if isinstance(store, RedisAgentStore):
        return RedisAgentStore(store.client, message_cache_size=0)
    pytest.skip("the in-memory store keeps objects: nothing to decode")


@pytest.mark.parametrize("decode", ["cached", "uncached"])
@pytest.mark.parametrize("read", ["get_messages", "get_model_messages"])
@pytest.mark.parametrize("size", SIZES)
def test_page_of_100(
    benchmark: Any, loaded_store: tuple[str, Any, dict[int, str]], size: int, read: str, decode: str
) -> None:
    """``cached``: the steady state of a service re-reading a tail (records decoded before);
    ``uncached``: every record decoded, as on a first read."""
    kind, store, conversations = loaded_store
    reader = store if decode == "cached" else _uncached(store)
    memory = reader.chat_memory(conversations[size])
    page = benchmark(getattr(memory, read), 100)
    assert len(page) == 100
    benchmark.extra_info.update(store=kind, size=size)


@pytest.mark.parametrize("size", SIZES)
def test_get_message_by_id(
    benchmark: Any, loaded_store: tuple[str, Any, dict[int, str]], size: int
) -> None:
    _, store, conversations = loaded_store
    memory = store.chat_memory(conversations[size])
    assert benchmark(memory.get_message, "m1").message_id == "m1"


def _never(_: Any) -> bool:
    return False


@pytest.mark.parametrize("call", ["bare_load", "coordinator_no_trigger"])
def test_coordinator_when_the_trigger_says_no(
    benchmark: Any, loaded_store: tuple[str, Any, dict[int, str]], call: str
) -> None:
    kind, store, _ = loaded_store
    benchmark.extra_info.update(store=kind)
    states = store.compression_state_store()
    conversation_id = f"coord-{uuid.uuid4().hex}"
    compressible = [m for m in history(200, "c") if m.model_visible]
    seeded = CompressionState(
        conversation_id,
        covered_until_message_id="c98",
        summary=(UserMessage("summary", message_id="s"),),
    )
    assert states.save(seeded, 0)
    calls = []

    def compressor(messages: list[Message]) -> list[Message]:
        calls.append(messages)
        return messages

    coordinator = CompressionCoordinator(states, _never, compressor)
    if call == "bare_load":
        benchmark(states.load, conversation_id)
    else:
        result = benchmark(coordinator.compress, conversation_id, compressible)
        assert not result.compressed
    assert calls == []


def test_incremental_model_input_after_10_new_messages(benchmark: Any) -> None:
    """Reports the summary model's input size: the first summary vs the update after 10 more."""

    class Echo:
        def chat(self, messages: Any, tools: Any) -> AiMessage:
            return AiMessage("Summary: orders discussed; see ids in the history.")

    base = [m for m in history(10_000, "h") if m.model_visible]
    grown = [*base, *[m for m in history(12, "n") if m.model_visible][:10]]
    compressor = compressors.incremental(Echo(), require_identifiers=False)
    compressor(base)
    first_chars = compressor.last_input_chars

    def update() -> None:
        compressor.restore(first_summary, base[-1].message_id)
        compressor(grown)

    first_summary = compressor.summary
    benchmark.pedantic(update, rounds=20, iterations=1)
    benchmark.extra_info.update(
        first_input_chars=first_chars, update_input_chars=compressor.last_input_chars
    )
    assert compressor.last_input_chars < first_chars / 100
