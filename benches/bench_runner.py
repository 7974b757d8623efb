"""Runner overhead per turn beyond the model call (issue 4).

A scripted model that answers at once; conversations of 1,000 and 10,000 stored messages
(tool-heavy turns written as the runner writes them) on SQLite (file), Redis and, for
reference, memory and PostgreSQL. The history read follows the window, so 10,000 messages
should cost at most 1.5x what 1,000 cost. ``extra_info`` holds the share of each turn spent
building windows, reading the store and writing it, measured on an instrumented copy of the
same turn.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from agentctx_fast.core.messages import AiMessage, Message, ToolCall, ToolMessage, UserMessage
from agentctx_fast.memory import ChatMemory
from agentctx_fast.models.scripted import ScriptedChatModel
from agentctx_fast.runner import Agent, AgentRunner
from agentctx_fast.runner import _windows as runner_module
from agentctx_fast.runner.tools import Tool
from agentctx_fast.stores import InMemoryAgentStore
from agentctx_fast.stores.redis import RedisAgentStore
from agentctx_fast.stores.sql import SqlAgentStore
from agentctx_fast.stores.turn_store import awaitable_turn_store
from bench_stores import bulk_load

SIZES = (1_000, 10_000)
KINDS = ("memory", "sqlite", "redis", "postgresql")


def tool_history(size: int) -> list[Message]:
    """Turns of user → AI(call) → tool result → final answer, every other turn plain."""
    out: list[Message] = []
    turn = 0
    while len(out) < size:
        tid = f"h{turn}"
        out.append(
            UserMessage(
                f"question {turn} about ORD-{turn:06d}", message_id=f"{tid}:user", turn_id=tid
            )
        )
        if turn % 2 == 0:
            call = ToolCall(f"call_{turn}", "get_order", f'{{"order_id": "ORD-{turn:06d}"}}')
            out.append(AiMessage(tool_calls=(call,), message_id=f"{tid}:ai:1", turn_id=tid))
            out.append(
                ToolMessage(
                    call.id,
                    '{"status": "shipped"}' + " detail" * 60,
                    tool_name="get_order",
                    message_id=f"{tid}:tool:1",
                    turn_id=tid,
                )
            )
        out.append(
            AiMessage(f"answer {turn}: " + "words " * 30, message_id=f"{tid}:ai:2", turn_id=tid)
        )
        turn += 1
    return out[:size]


def _store(kind: str, request: pytest.FixtureRequest, tmp_path_factory: Any) -> Any:
    if kind == "memory":
        return InMemoryAgentStore()
    if kind == "sqlite":
        store = SqlAgentStore(f"sqlite:///{tmp_path_factory.mktemp('runner') / 'agent.db'}")
    elif kind == "postgresql":
        store = SqlAgentStore(
            request.getfixturevalue("postgres_server").url, table_prefix=f"r{uuid.uuid4().hex[:8]}_"
        )
    else:
        return RedisAgentStore(
            request.getfixturevalue("redis_server").url, key_prefix=f"r{uuid.uuid4().hex[:8]}:"
        )
    store.schema.initialize()
    return store


@pytest.fixture(scope="module", params=KINDS)
def runner_store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Any, dict[int, str]]]:
    kind = str(request.param)
    store = _store(kind, request, tmp_path_factory)
    conversations = {}
    for size in SIZES:
        conversation_id = f"runner-{size}-{uuid.uuid4().hex[:6]}"
        bulk_load(store, conversation_id, tool_history(size))
        conversations[size] = conversation_id
    if kind == "postgresql":  # what autovacuum does after a bulk load: planner statistics
        with store.engine.begin() as connection:  # committed, or the statistics roll back
            connection.exec_driver_sql(f"ANALYZE {store._tables.messages.name}")
    yield kind, store, conversations
    store.close()


def _agent(replies: Sequence[AiMessage]) -> Agent:
    return Agent(
        "bench",
        ScriptedChatModel(list(replies), cycle=True),
        instructions="You are a support agent.",
        tools=[Tool("get_order", lambda order_id: {"order_id": order_id, "status": "shipped"})],
        compact_completed_tool_turns=True,
    )


_PLAIN = [AiMessage("Your order has shipped.")]
_TOOL = [
    AiMessage(tool_calls=(ToolCall("call_0", "get_order", '{"order_id": "ORD-1"}'),)),
    AiMessage("ORD-1 has shipped."),
]


class _Timer:
    def __init__(self) -> None:
        self.spent = {"window": 0.0, "reads": 0.0, "writes": 0.0}

    def timed(self, bucket: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.spent[bucket] += time.perf_counter() - start

        return wrapper


class _TimedMemory(ChatMemory):
    """Delegates to a store's memory, adding each call's time to a bucket."""

    def __init__(self, inner: ChatMemory, timer: _Timer) -> None:
        self._inner = inner
        self._timer = timer

    def _time(self, bucket: str, name: str, *args: Any, **kwargs: Any) -> Any:
        return self._timer.timed(bucket, getattr(self._inner, name))(*args, **kwargs)

    def add_message_if_absent(self, message: Message) -> bool:
        return bool(self._time("writes", "add_message_if_absent", message))

    def update_message(self, message: Message, expected_version: int) -> Message:
        result: Message = self._time("writes", "update_message", message, expected_version)
        return result

    def get_messages(self, count: int | None = None, *, offset: int = 0) -> list[Message]:
        result: list[Message] = self._time("reads", "get_messages", count, offset=offset)
        return result

    def get_message(self, message_id: str) -> Message | None:
        result: Message | None = self._time("reads", "get_message", message_id)
        return result

    def message_count(self) -> int:
        return int(self._time("reads", "message_count"))

    def clear(self) -> None:
        raise AssertionError("the runner never clears memory")


class _TimedTurnStore:
    def __init__(self, inner: Any, timer: _Timer) -> None:
        for name in ("load_turn", "open_turn"):
            setattr(self, name, timer.timed("reads", getattr(inner, name)))
        for name in (
            "save_turn",
            "acquire_conversation",
            "renew_lease",
            "suspend_conversation",
            "reacquire_conversation",
            "request_cancel",
            "release_conversation",
        ):
            setattr(self, name, timer.timed("writes", getattr(inner, name)))


def _shares(
    store: Any, conversation_id: str, replies: Sequence[AiMessage], turns: int = 30
) -> dict[str, float]:
    timer = _Timer()
    runner = AgentRunner(store, lambda cid: _TimedMemory(store.chat_memory(cid), timer))
    runner._engine.turn_store = awaitable_turn_store(_TimedTurnStore(runner.turn_store, timer))  # type: ignore[arg-type]
    original = runner_module.build_window
    runner_module.build_window = timer.timed("window", original)  # type: ignore[assignment]
    agent = _agent(replies)
    try:
        start = time.perf_counter()
        for _ in range(turns):
            runner.run(agent, conversation_id, "Where is my order?")
        total = time.perf_counter() - start
    finally:
        runner_module.build_window = original  # type: ignore[assignment]
        runner.close()
    shares = {f"share_{k}": round(v / total, 3) for k, v in timer.spent.items()}
    shares["instrumented_us_per_turn"] = round(total / turns * 1e6, 1)
    return shares


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("turn_kind", ["plain", "tool"])
def test_runner_turn(
    benchmark: Any, runner_store: tuple[str, Any, dict[int, str]], size: int, turn_kind: str
) -> None:
    kind, store, conversations = runner_store
    conversation_id = conversations[size]
    replies = _PLAIN if turn_kind == "plain" else _TOOL
    benchmark.group = f"runner turn ({turn_kind}) {kind}"
    benchmark.extra_info.update(_shares(store, conversation_id, replies))
    runner = AgentRunner(store)
    agent = _agent(replies)
    turn = benchmark(runner.run, agent, conversation_id, "Where is my order?")
    runner.close()
    assert turn.status.value == "completed"
    assert len(turn.messages) == (2 if turn_kind == "plain" else 4)
