"""Work run in child processes by the reliability tests (importable without pytest)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from agentctx_fast import AiMessage, StoreUnavailableError, UserMessage
from agentctx_fast.compression.coordinator import CompressionState


def open_store(kind: str, url: str) -> Any:
    if kind == "redis-cluster":
        from store_fixtures import cluster_store

        return cluster_store(url)
    if kind == "redis":
        from agentctx_fast.stores.redis import RedisAgentStore

        return RedisAgentStore(url)
    from agentctx_fast.stores.sql import SqlAgentStore

    return SqlAgentStore(url)


def cas_increments(kind: str, url: str, conversation_id: str, attempts: int) -> tuple[int, int]:
    """``attempts`` load-increment-save rounds; returns (wins, conflicts)."""
    store = open_store(kind, url)
    states = store.compression_state_store()
    wins = conflicts = 0
    try:
        for _ in range(attempts):
            state = states.load(conversation_id) or CompressionState(conversation_id)
            bumped = replace(
                state,
                covered_tokens=state.covered_tokens + 1,
                covered_until_message_id=f"w{wins}",
            )
            if states.save(bumped, state.version):
                wins += 1
            else:
                conflicts += 1
    finally:
        store.close()
    return wins, conflicts


def add_same_message(kind: str, url: str, conversation_id: str, text: str) -> bool:
    store = open_store(kind, url)
    try:
        memory = store.chat_memory(conversation_id)
        return bool(memory.add_message_if_absent(UserMessage(text, message_id="once")))
    finally:
        store.close()


def write_until_unavailable(
    kind: str, url: str, conversation_id: str, limit: int
) -> tuple[list[str], str | None, str]:
    """Appends messages and CAS-saves a state until the server goes away.

    Returns the ids whose append was acknowledged, the id in flight when the error came, and
    the error's class name.
    """
    store = open_store(kind, url)
    memory = store.chat_memory(conversation_id)
    states = store.compression_state_store()
    acknowledged: list[str] = []
    in_flight: str | None = None
    try:
        for i in range(limit):
            in_flight = f"m{i}"
            memory.add_message_if_absent(UserMessage("x" * 2000, message_id=in_flight))
            acknowledged.append(in_flight)
            in_flight = f"state{i}"
            state = states.load(conversation_id) or CompressionState(conversation_id)
            states.save(replace(state, covered_tokens=state.covered_tokens + 1), state.version)
        return acknowledged, None, "none"
    except StoreUnavailableError as error:
        return acknowledged, in_flight, type(error).__name__
    except Exception as error:  # reported to the test, which fails on anything untyped
        return acknowledged, in_flight, f"untyped {type(error).__name__}: {error}"
    finally:
        store.close()


def update_and_append(kind: str, url: str, conversation_id: str) -> int:
    """Another process's writes to a conversation a reader has cached: a compare-and-set update
    of ``u1`` (from version 0) and a new message ``a2``; returns the updated version."""
    store = open_store(kind, url)
    try:
        memory = store.chat_memory(conversation_id)
        updated = memory.update_message(UserMessage("Where is ORD-2?", message_id="u1"), 0)
        memory.add_message(AiMessage("ORD-2 is on its way.", message_id="a2"))
        return int(updated.version)
    finally:
        store.close()
