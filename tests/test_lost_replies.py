"""A reply lost after the server acted, at each write of a turn (SPEC §20, "Retries are safe").

A loopback proxy in front of the real server drops the reply to one chosen write after the
server ran it. On Redis, a client that retries (redis-py's `Retry`) sends the script again:
each write finds its own effect, so `run` and `resume` complete as if nothing happened. On
PostgreSQL the store raises `StoreUnavailableError` and the caller retries: a resume whose
reply was lost is taken again once its lease expires. Afterwards, the audit: the refund ran
once, the stored protocol is whole, no form is pending, the conversation is free.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from agentctx_fast import (
    Agent,
    AgentFormMessage,
    AgentRunner,
    AiMessage,
    ScriptedChatModel,
    StoreUnavailableError,
    Tool,
    ToolCall,
    ToolMessage,
    TurnStateError,
    TurnStatus,
    validate_tool_protocol,
)
from agentctx_fast.stores import redis as redis_store
from agentctx_fast.stores import redis_turns
from faults import FaultProxy
from server_fixtures import require_module
from servers import PostgresServer, RedisServer

redis = require_module("redis")

# Every write script a turn with an approval sends, fenced or not.
_SCRIPTS = {
    "acquire": redis_turns._ACQUIRE,
    "renew": redis_turns._RENEW,
    "suspend": redis_turns._SUSPEND,
    "reacquire": redis_turns._REACQUIRE,
    "release": redis_turns._RELEASE,
    "save turn": redis_turns._SAVE_TURN[1],
    "append": redis_store._ADD_IF_ABSENT[1],
    "update": redis_store._UPDATE[1],
}


def _sha(lua: str) -> bytes:
    return hashlib.sha1(lua.encode("utf-8"), usedforsecurity=False).hexdigest().encode()


def _agent(calls: list[str], *, ask: bool) -> Agent:
    """Asks for the refund of o1 (needs approval) when ``ask``, then answers."""

    def refund(order: str) -> str:
        calls.append(order)
        return "refunded"

    asks = [AiMessage(tool_calls=(ToolCall("c1", "refund", '{"order": "o1"}'),))] if ask else []
    model = ScriptedChatModel([*asks, AiMessage("done")])
    return Agent("support", model, tools=[Tool("refund", refund, requires_approval=True)])


def _audit(store: Any, conversation: str, calls: list[str]) -> None:
    assert calls == ["o1"]
    stored = store.chat_memory(conversation).get_messages()
    assert validate_tool_protocol(stored) == []
    assert [m.tool_call_id for m in stored if isinstance(m, ToolMessage)] == ["c1"]
    assert all(m.status != "pending" for m in stored if isinstance(m, AgentFormMessage))
    assert store.turn_store().open_turn(conversation) is None


@pytest.fixture
def retrying_redis(redis_server: RedisServer) -> Iterator[tuple[Any, FaultProxy]]:
    from agentctx_fast.stores.redis import RedisAgentStore

    with FaultProxy(redis_server.port) as proxy:
        client = redis.Redis(host="127.0.0.1", port=proxy.port)  # redis-py retries by default
        store = RedisAgentStore(client)
        try:
            yield store, proxy
        finally:
            store.close()
            client.close()


# (script, n): the reply to the n-th run of the script in the turn is dropped
_DROPS = [(name, 1) for name in sorted(_SCRIPTS)] + [
    ("renew", 2),
    ("save turn", 2),
    ("save turn", 3),
    ("append", 2),
    ("append", 3),
]


@pytest.mark.parametrize(("script", "nth"), _DROPS)
def test_a_lost_redis_reply_is_sent_again_and_the_turn_goes_on(
    retrying_redis: tuple[Any, FaultProxy], script: str, nth: int
) -> None:
    store, proxy = retrying_redis
    runner = AgentRunner(store)
    try:
        warm: list[str] = []  # every script loaded on the server before the fault is armed
        warm_id = f"warm-{uuid.uuid4().hex}"
        turn = runner.run(_agent(warm, ask=True), warm_id, "refund o1")
        runner.resume(_agent(warm, ask=False), warm_id, turn.turn_id, {"c1": True})

        calls: list[str] = []
        conversation = f"conv-{uuid.uuid4().hex}"
        proxy.drop_reply(_sha(_SCRIPTS[script]), nth=nth)
        suspended = runner.run(_agent(calls, ask=True), conversation, "refund o1")
        assert suspended.status is TurnStatus.SUSPENDED
        resumed = runner.resume(_agent(calls, ask=False), conversation, suspended.turn_id,
                                {"c1": True})  # fmt: skip
        assert resumed.status is TurnStatus.COMPLETED
    finally:
        runner.close()
    assert proxy.fired == 1, f"no {script} reply was dropped"
    _audit(store, conversation, calls)


def test_a_resume_whose_postgresql_reply_was_lost_is_taken_again_after_its_lease(
    postgres_server: PostgresServer,
) -> None:
    """The reply to the statement that takes the suspension back is lost; the resume raises
    `StoreUnavailableError`. Resuming again is refused while that lease lives, and completes
    once it has expired (a runner whose clock is past it), the refund run once."""
    from agentctx_fast.stores.sql import SqlAgentStore

    direct = SqlAgentStore(postgres_server.url)
    direct.schema.initialize()
    with FaultProxy(postgres_server.port) as proxy:
        proxied = SqlAgentStore(proxy.url(postgres_server.url))
        clock = [time.time()]
        runner = AgentRunner(proxied, lease_seconds=5.0, clock=lambda: clock[0])
        calls: list[str] = []
        conversation = f"conv-{uuid.uuid4().hex}"
        try:
            suspended = runner.run(_agent(calls, ask=True), conversation, "refund o1")
            proxy.drop_reply(b"UPDATE agent_conversation_leases SET status")
            with pytest.raises(StoreUnavailableError):
                runner.resume(_agent(calls, ask=False), conversation, suspended.turn_id,
                              {"c1": True})  # fmt: skip
            assert proxy.fired == 1
            assert calls == []
            with pytest.raises(TurnStateError):
                runner.resume(_agent(calls, ask=False), conversation, suspended.turn_id,
                              {"c1": True})  # fmt: skip
            clock[0] += 6.0
            turn = runner.resume(_agent(calls, ask=False), conversation, suspended.turn_id,
                                 {"c1": True})  # fmt: skip
            assert turn.status is TurnStatus.COMPLETED
        finally:
            runner.close()
            proxied.close()
    try:
        _audit(direct, conversation, calls)
    finally:
        direct.close()


def _compress(store: Any, conversation: str) -> Any:
    """A coordinator that compresses every pending message of a two-turn history."""
    from agentctx_fast import AiMessage as Ai
    from agentctx_fast import UserMessage
    from agentctx_fast.compression import compressors
    from agentctx_fast.compression.coordinator import CompressionCoordinator

    history = [UserMessage("refund o1", message_id="u1"), Ai("done", message_id="a1")]
    coordinator = CompressionCoordinator(
        store.compression_state_store(), lambda _: True, compressors.text_excerpt(200)
    )
    return coordinator.compress(conversation, history)


def test_a_compression_state_save_re_sent_after_a_lost_redis_reply_finds_its_own_effect(
    retrying_redis: tuple[Any, FaultProxy],
) -> None:
    """redis-py sends the compare-and-set script again after the reply was lost: the state is
    saved (version 1) and the coordinator reports its compression, not a conflict."""
    from agentctx_fast.stores._redis_memory import _SAVE_STATE

    store, proxy = retrying_redis
    _compress(store, f"warm-{uuid.uuid4().hex}")  # the script is loaded on the server
    conversation = f"conv-{uuid.uuid4().hex}"
    proxy.drop_reply(_sha(_SAVE_STATE[0]))
    result = _compress(store, conversation)
    assert proxy.fired == 1
    assert result.compressed
    stored = store.compression_state_store().load(conversation)
    assert stored is not None
    assert (stored.version, stored.covered_until_message_id) == (1, "a1")
    assert stored.summary == result.state.summary
