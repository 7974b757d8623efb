"""Limits are arguments, not outages (SPEC §20): ids over 512 bytes are refused before any I/O,
on every store, blocking and async."""

from __future__ import annotations

from typing import Any

import pytest

from agentctx_fast import (
    AgentTurnSnapshot,
    AiMessage,
    InvalidArgumentError,
    ToolCall,
    ToolMessage,
    TurnStatus,
    UserMessage,
)
from store_fixtures import (
    every_store_kind,  # noqa: F401  (store_kind: every store)
    new_conversation_id,
)

# Counted in UTF-8 bytes, not characters: "é" is 2 bytes, "中" 3.
AT_LIMIT = "é" * 256  # 256 characters, 512 bytes
CJK_AT_LIMIT = "中" * 170 + "ab"  # 172 characters, 512 bytes
OVER = "é" * 256 + "a"  # 257 characters, 513 bytes
FAR_OVER = "x" * 10_000


def test_the_limit_counts_utf8_bytes() -> None:
    assert len(AT_LIMIT.encode()) == len(CJK_AT_LIMIT.encode()) == 512
    assert len(OVER.encode()) == 513 and len(OVER) < 512
    UserMessage("hi", message_id=AT_LIMIT)
    ToolCall(CJK_AT_LIMIT, "lookup")
    for long_id in (OVER, "中" * 171, FAR_OVER):
        with pytest.raises(InvalidArgumentError, match="at most 512 bytes in UTF-8"):
            UserMessage("hi", message_id=long_id)
        with pytest.raises(InvalidArgumentError, match="at most 512 bytes"):
            UserMessage("hi", turn_id=long_id)
        with pytest.raises(InvalidArgumentError, match="at most 512 bytes"):
            ToolCall(long_id, "lookup")
        with pytest.raises(InvalidArgumentError, match="at most 512 bytes"):
            ToolMessage(long_id, "result")
        with pytest.raises(InvalidArgumentError, match="at most 512 bytes"):
            AgentTurnSnapshot("c", long_id, "agent", TurnStatus.RUNNING)


@pytest.mark.parametrize("long_id", [OVER, FAR_OVER], ids=["513-bytes", "10-kB"])
def test_ids_over_512_bytes_are_refused_and_nothing_is_written(store: Any, long_id: str) -> None:
    cid = new_conversation_id()
    memory = store.chat_memory(cid)
    turns = store.turn_store()
    refused = pytest.raises(InvalidArgumentError, match="at most 512 bytes")
    with refused:
        store.chat_memory(long_id)
    with refused:
        store.compression_state_store().load(long_id)
    with refused:
        memory.get_message(long_id)
    with refused:
        turns.acquire_conversation(long_id, "t1", "owner", 30.0, 1.0)
    with refused:
        turns.acquire_conversation(cid, long_id, "owner", 30.0, 1.0)
    with refused:
        turns.acquire_conversation(cid, "t1", long_id, 30.0, 1.0)
    with refused:
        turns.open_turn(long_id)
    with refused:
        turns.load_turn(cid, long_id)
    with refused:
        turns.suspend_conversation(cid, long_id, "owner")
    with refused:
        turns.request_cancel(cid, long_id, 1.0)
    with refused:
        turns.release_conversation(cid, long_id, None, 1.0)
    assert memory.message_count() == 0
    assert turns.open_turn(cid) is None


def at_limit(filler: str) -> str:
    """A fresh id of exactly 512 UTF-8 bytes: a unique ASCII head, then ``filler``."""
    out = new_conversation_id()
    while len((out + filler).encode()) <= 512:
        out += filler
    return out + "a" * (512 - len(out.encode()))


@pytest.mark.parametrize("filler", ["é", "中"])
def test_ids_of_512_bytes_work(store: Any, filler: str) -> None:
    cid, turn_id, owner, call_id = (at_limit(filler) for _ in range(4))
    memory = store.chat_memory(cid)
    messages = [
        UserMessage("hi", message_id=at_limit(filler), turn_id=turn_id),
        AiMessage(None, (ToolCall(call_id, "lookup"),), message_id=at_limit(filler)),
        ToolMessage(call_id, "ok", message_id=at_limit(filler), turn_id=turn_id),
    ]
    assert all(len(m.message_id.encode()) == 512 for m in messages)
    assert memory.add_messages_if_absent(messages) == [True, True, True]
    assert memory.get_messages() == messages
    assert memory.get_message(messages[1].message_id) == messages[1]
    turns = store.turn_store()
    assert turns.acquire_conversation(cid, turn_id, owner, 30.0, 1.0) is None
    lease = turns.open_turn(cid)
    assert lease is not None and lease.turn_id == turn_id and lease.owner == owner
    assert turns.save_turn(AgentTurnSnapshot(cid, turn_id, "agent", TurnStatus.RUNNING), 0)
    loaded = turns.load_turn(cid, turn_id)
    assert loaded is not None and loaded.turn_id == turn_id
    assert turns.request_cancel(cid, turn_id, 2.0)
    assert turns.suspend_conversation(cid, turn_id, owner)
    assert turns.release_conversation(cid, turn_id, None, 2.0)
    assert turns.open_turn(cid) is None
