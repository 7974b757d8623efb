"""The Redis message layout (issue 17): a page read is one plain ``LRANGE`` of the record list.

The contract suite checks what the reads return on every store; these tests pin what it cannot
see on Redis: the commands a page read sends to the server (none a script, no per-record
lookup), and that an update rewrites a record in place, so later pages keep their positions.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from agentctx_fast import AgentActionMessage, AiMessage, SerializationError, UserMessage
from store_fixtures import new_conversation_id

redis = pytest.importorskip("redis")


@pytest.fixture
def store(redis_server: Any) -> Iterator[Any]:
    from agentctx_fast.stores.redis import RedisAgentStore

    store = RedisAgentStore(redis_server.url, key_prefix=f"layout{uuid.uuid4().hex}:")
    try:
        yield store
    finally:
        store.close()


def _calls(client: Any) -> dict[str, int]:
    return {name: stats["calls"] for name, stats in client.info("commandstats").items()}


def _sent(client: Any, read: Any) -> dict[str, int]:
    """The server commands (by commandstats) that ``read()`` ran, with their counts."""
    before = _calls(client)
    read()
    after = _calls(client)
    sent = {name: after[name] - before.get(name, 0) for name in after}
    sent.pop("cmdstat_info", None)
    return {name: count for name, count in sent.items() if count}


def test_a_page_read_is_one_lrange_and_nothing_else(store: Any) -> None:
    memory = store.chat_memory(new_conversation_id())
    memory.add_messages_if_absent([UserMessage(f"q{i}", message_id=f"u{i}") for i in range(50)])
    page: list[Any] = []
    sent = _sent(store.client, lambda: page.extend(memory.get_messages(20, offset=5)))
    assert [m.message_id for m in page] == [f"u{i}" for i in range(25, 45)]
    assert sent == {"cmdstat_lrange": 1}


def test_an_update_keeps_the_record_in_its_place(store: Any) -> None:
    memory = store.chat_memory(new_conversation_id())
    ui = AgentActionMessage(payload={"step": 1}, message_id="ui")
    memory.add_messages_if_absent(
        [UserMessage("q", message_id="u"), ui, AiMessage("first", message_id="a")]
    )
    memory.update_message(AiMessage("second", message_id="a"), 0)
    memory.update_message(AgentActionMessage(payload={"step": 2}, message_id="ui"), 0)
    memory.add_message(UserMessage("next", message_id="u2"))
    texts = [(m.message_id, m.version) for m in memory.get_messages()]
    assert texts == [("u", 0), ("ui", 1), ("a", 1), ("u2", 0)]
    assert [m.message_id for m in memory.get_model_messages(2)] == ["a", "u2"]
    assert memory.get_model_messages(2)[0].text == "second"
    assert memory.get_message("ui") == AgentActionMessage(
        payload={"step": 2}, message_id="ui", version=1
    )
    assert memory.message_count() == 4


def test_a_cleared_conversation_starts_its_positions_anew(store: Any) -> None:
    memory = store.chat_memory(new_conversation_id())
    memory.add_messages_if_absent(
        [UserMessage("old", message_id="u"), AiMessage("a", message_id="a")]
    )
    memory.clear()
    memory.add_message(AiMessage("new", message_id="a"))
    memory.update_message(AiMessage("newer", message_id="a"), 0)
    assert [(m.message_id, m.version) for m in memory.get_messages()] == [("a", 1)]
    assert memory.get_message("u") is None
    got = memory.get_message("a")
    assert got is not None and got.text == "newer"


def test_a_corrupt_index_entry_is_a_serialization_error(store: Any) -> None:
    memory = store.chat_memory(conversation := new_conversation_id())
    memory.add_message_if_absent(AiMessage("a", message_id="a"))
    store.client.hset(f"{store.key_prefix}conv:{{{conversation}}}:i", "a", "garbage")
    with pytest.raises(SerializationError, match="index entry"):
        memory.update_message(AiMessage("b", message_id="a"), 0)
    with pytest.raises(SerializationError, match="index entry"):
        memory.get_message("a")
    assert memory.get_messages() == [AiMessage("a", message_id="a")]  # nothing was written


def test_a_write_is_one_evalsha_and_a_flushed_script_is_loaded_again(store: Any) -> None:
    memory = store.chat_memory(new_conversation_id())
    memory.add_message_if_absent(UserMessage("one", message_id="m1"))  # the script is loaded
    sent = _sent(store.client, lambda: memory.add_message_if_absent(UserMessage("two")))
    assert sent.pop("cmdstat_evalsha") == 1
    assert not any(name.startswith("cmdstat_script") or name == "cmdstat_eval" for name in sent)
    store.client.script_flush()
    sent = _sent(store.client, lambda: memory.add_message_if_absent(UserMessage("three")))
    assert sent.get("cmdstat_script|load") == 1
    assert [m.text for m in memory.get_messages()] == ["one", "two", "three"]


def test_the_async_store_loads_a_flushed_script_again(redis_server: Any) -> None:
    import asyncio

    from agentctx_fast.stores.redis import AsyncRedisAgentStore

    async def main() -> list[str]:
        store = AsyncRedisAgentStore(redis_server.url, key_prefix=f"layout{uuid.uuid4().hex}:")
        memory = store.chat_memory(new_conversation_id())
        try:
            await memory.add_message_if_absent(UserMessage("one"))
            await store.client.script_flush()
            await memory.add_message_if_absent(UserMessage("two"))
            return [m.text for m in await memory.get_messages()]
        finally:
            await store.aclose()

    assert asyncio.run(main()) == ["one", "two"]
