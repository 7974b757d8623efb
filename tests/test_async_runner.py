"""`AsyncAgentRunner` (SPEC §17) on every async store, and across the blocking and async drivers.

Each test runs its own event loop (`asyncio.run`); the blocking twin of a database store reads
and continues what the async store wrote, and the reverse.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any

import pytest

from agentctx_fast import (
    Agent,
    AgentConversationBusyError,
    AgentFormMessage,
    AgentRunner,
    AiMessage,
    ApprovalRequired,
    AsyncAgentRunner,
    AsyncScriptedChatModel,
    InvalidArgumentError,
    Message,
    ScriptedChatModel,
    StoreUnavailableError,
    TextDelta,
    Tool,
    ToolCall,
    ToolCallEvent,
    TurnEnded,
    TurnStatus,
    validate_tool_protocol,
)
from runner_helpers import check_memory, ids
from store_fixtures import (
    ASYNC_STORE_KINDS,
    make_async_store,
    make_store,
    new_conversation_id,
    store_url,
)


@pytest.fixture(params=ASYNC_STORE_KINDS)
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=("async-sqlite", "async-postgresql", "async-redis", "async-redis-cluster"))
def db_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def with_store(
    kind: str, request: pytest.FixtureRequest, body: Callable[[Any], Awaitable[Any]]
) -> Any:
    """``body(store)`` on a fresh async store of ``kind`` in a new event loop."""
    base = kind.removeprefix("async-")
    url = store_url(base, request)

    async def main() -> Any:
        store = await make_async_store(base, url)
        try:
            return await body(store)
        finally:
            await store.aclose()

    return asyncio.run(main())


def refund(order_id: str) -> str:
    return f"refunded {order_id}"


def _refund_agent(model: Any) -> Agent:
    return Agent(
        "support", model, instructions="Be kind.",
        tools=[Tool("refund", refund, requires_approval=True)],
    )  # fmt: skip


def _call(call_id: str, name: str, arguments: str = "{}") -> AiMessage:
    return AiMessage(tool_calls=(ToolCall(call_id, name, arguments),))


class _WaitingModel:
    """An async model that sets ``entered`` when called and then waits until cancelled."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()

    async def chat(self, messages: Sequence[Message], tools: Sequence[Any]) -> AiMessage:
        self.entered.set()
        await asyncio.sleep(3600)
        raise AssertionError("never reached")


def _blocked_tool(name: str, result: str) -> tuple[Tool, threading.Event, threading.Event]:
    """A plain tool that sets ``entered`` once it runs and returns ``result`` once
    ``release`` is set."""
    entered, release = threading.Event(), threading.Event()

    def blocked() -> str:
        entered.set()
        release.wait(10)
        return result

    return Tool(name, blocked), entered, release


def test_run_writes_the_turn_and_the_blocking_store_reads_it(
    db_kind: str, request: pytest.FixtureRequest
) -> None:
    conversation = new_conversation_id()
    lookups: list[str] = []

    async def lookup(order_id: str) -> dict[str, str]:
        await asyncio.sleep(0)
        lookups.append(order_id)
        return {"id": order_id, "status": "shipped"}

    model = AsyncScriptedChatModel(
        [_call("c1", "lookup", '{"order_id": "ORD-1"}'), AiMessage("Shipped.")]
    )
    agent = Agent("support", model, tools=[Tool("lookup", lookup)])

    async def body(store: Any) -> Any:
        return await AsyncAgentRunner(store).run(agent, conversation, "Where is ORD-1?")

    turn = with_store(db_kind, request, body)
    assert turn.status is TurnStatus.COMPLETED and turn.final_message.text == "Shipped."
    assert lookups == ["ORD-1"]
    twin = make_store(db_kind.removeprefix("async-"), request)
    try:
        stored = check_memory(twin.chat_memory(conversation), [turn])
        assert stored[2].text == '{"id": "ORD-1", "status": "shipped"}'
        # the blocking runner continues the conversation the async one wrote
        follow = AgentRunner(twin).run(
            Agent("support", ScriptedChatModel([AiMessage("You're welcome.")])),
            conversation,
            "Thanks",
        )
        assert follow.status is TurnStatus.COMPLETED
        check_memory(twin.chat_memory(conversation), [turn, follow])
    finally:
        twin.close()


def test_stream_yields_events_in_order(store_kind: str, request: pytest.FixtureRequest) -> None:
    conversation = new_conversation_id()
    model = AsyncScriptedChatModel(
        [
            AiMessage("Let me check.", (ToolCall("c1", "lookup", '{"order_id": "A"}'),)),
            AiMessage("It shipped today."),
        ]
    )
    agent = Agent("support", model, tools=[Tool("lookup", lambda order_id: f"{order_id} shipped")])

    async def body(store: Any) -> list[Any]:
        runner = AsyncAgentRunner(store)
        return [event async for event in runner.stream(agent, conversation, "Where is A?")]

    events = with_store(store_kind, request, body)
    kinds = [type(e).__name__ for e in events]
    assert kinds == [
        "TextDelta", "TextDelta", "TextDelta", "ToolCallEvent", "ToolResultEvent",
        "TextDelta", "TextDelta", "TextDelta", "TurnEnded",
    ]  # fmt: skip
    assert "".join(e.text for e in events[:3]) == "Let me check."
    assert events[3].call.id == "c1" and events[4].message.text == "A shipped"
    assert "".join(e.text for e in events[5:8]) == "It shipped today."
    turn = events[-1].turn
    assert turn.status is TurnStatus.COMPLETED and turn.final_message.text == "It shipped today."
    assert events[4].message in turn.messages


def test_approval_suspends_in_async_and_resumes_in_blocking(
    db_kind: str, request: pytest.FixtureRequest
) -> None:
    conversation = new_conversation_id()
    agent = _refund_agent(AsyncScriptedChatModel([_call("c1", "refund", '{"order_id": "ORD-7"}')]))

    async def body(store: Any) -> list[Any]:
        return [
            e async for e in AsyncAgentRunner(store).stream(agent, conversation, "Refund ORD-7")
        ]

    events = with_store(db_kind, request, body)
    assert [type(e) for e in events] == [ToolCallEvent, ApprovalRequired, TurnEnded]
    suspended = events[-1].turn
    assert suspended.status is TurnStatus.SUSPENDED
    assert events[1].pending_approvals == suspended.pending_approvals
    twin = make_store(db_kind.removeprefix("async-"), request)
    try:
        runner = AgentRunner(twin)
        with pytest.raises(AgentConversationBusyError) as busy:
            runner.run(_refund_agent(ScriptedChatModel([])), conversation, "hello?")
        assert busy.value.turn_id == suspended.turn_id
        done = runner.resume(
            _refund_agent(ScriptedChatModel([AiMessage("Refunded.")])),
            conversation, suspended.turn_id, {"c1": True},
        )  # fmt: skip
        assert done.status is TurnStatus.COMPLETED and done.final_message.text == "Refunded."
        stored = twin.chat_memory(conversation).get_messages()
        assert validate_tool_protocol(stored) == []
        assert [m.text for m in stored if m.message_id.endswith(":tool:1:c1")] == ["refunded ORD-7"]
    finally:
        twin.close()


def test_approval_suspends_in_blocking_and_resumes_in_async(
    db_kind: str, request: pytest.FixtureRequest
) -> None:
    conversation = new_conversation_id()
    twin = make_store(db_kind.removeprefix("async-"), request)
    try:
        suspended = AgentRunner(twin).run(
            _refund_agent(ScriptedChatModel([_call("c1", "refund", '{"order_id": "ORD-8"}')])),
            conversation, "Refund ORD-8",
        )  # fmt: skip
    finally:
        twin.close()
    assert suspended.status is TurnStatus.SUSPENDED

    async def body(store: Any) -> Any:
        runner = AsyncAgentRunner(store)
        with pytest.raises(AgentConversationBusyError):
            await runner.run(_refund_agent(AsyncScriptedChatModel([])), conversation, "hello?")
        agent = _refund_agent(AsyncScriptedChatModel([AiMessage("Refused, as you asked.")]))
        turn = await runner.resume(agent, conversation, suspended.turn_id, {"c1": False})
        return turn, await store.chat_memory(conversation).get_messages()

    turn, stored = with_store(db_kind, request, body)
    assert turn.status is TurnStatus.COMPLETED
    assert validate_tool_protocol(stored) == []
    refused = [m for m in stored if getattr(m, "tool_call_id", None) == "c1"]
    assert [(m.text, m.is_error) for m in refused] == [("refused by the user", True)]


def test_plain_tools_run_in_a_worker_thread_async_ones_on_the_loop(
    store_kind: str, request: pytest.FixtureRequest
) -> None:
    threads: dict[str, int] = {}

    def plain() -> str:
        threads["plain"] = threading.get_ident()
        return "plain"

    async def awaited() -> str:
        threads["awaited"] = threading.get_ident()
        return "awaited"

    model = AsyncScriptedChatModel(
        [
            AiMessage(tool_calls=(ToolCall("c1", "plain", "{}"), ToolCall("c2", "awaited", "{}"))),
            AiMessage("ok"),
        ]
    )
    agent = Agent("a", model, tools=[Tool("plain", plain), Tool("awaited", awaited)])

    async def body(store: Any) -> Any:
        threads["loop"] = threading.get_ident()
        return await AsyncAgentRunner(store).run(agent, new_conversation_id(), "go")

    turn = with_store(store_kind, request, body)
    assert turn.status is TurnStatus.COMPLETED
    assert threads["awaited"] == threads["loop"] != threads["plain"]
    assert [m.text for m in turn.messages if m.message_id.count(":tool:")] == ["plain", "awaited"]


def test_cancelling_the_consumer_cancels_the_turn(
    store_kind: str, request: pytest.FixtureRequest
) -> None:
    conversation = new_conversation_id()

    async def body(store: Any) -> Any:
        runner = AsyncAgentRunner(store)
        model = _WaitingModel()
        slow = Agent("a", model, tools=[Tool("lookup", lambda: "found")])

        async def consume() -> None:
            async for _event in runner.stream(slow, conversation, "first"):
                pass

        task = asyncio.ensure_future(consume())
        await model.entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        memory = store.chat_memory(conversation)
        stored = await memory.get_messages()
        turn_id = stored[0].turn_id
        cancelled = await runner.turn(conversation, turn_id)
        # the lease is free: the next turn runs
        model2 = AsyncScriptedChatModel([AiMessage("second answer")])
        nxt = await runner.run(Agent("a", model2), conversation, "second")
        return cancelled, nxt, await memory.get_messages()

    cancelled, nxt, stored = with_store(store_kind, request, body)
    assert cancelled.status is TurnStatus.CANCELLED
    assert nxt.status is TurnStatus.COMPLETED
    assert validate_tool_protocol(stored) == []


def test_cancel_during_a_plain_tool_keeps_its_result(
    store_kind: str, request: pytest.FixtureRequest
) -> None:
    conversation = new_conversation_id()
    tool, entered, release = _blocked_tool("slow_refund", "refund issued")
    model = AsyncScriptedChatModel([_call("c1", "slow_refund"), AiMessage("never used")])
    agent = Agent("a", model, tools=[tool])

    async def body(store: Any) -> Any:
        runner = AsyncAgentRunner(store)
        task = asyncio.ensure_future(runner.run(agent, conversation, "refund please"))
        await asyncio.get_running_loop().run_in_executor(None, entered.wait, 10)
        task.cancel()
        await asyncio.sleep(0.05)
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        stored = await store.chat_memory(conversation).get_messages()
        return await runner.turn(conversation, stored[0].turn_id), stored

    turn, stored = with_store(store_kind, request, body)
    assert turn.status is TurnStatus.CANCELLED
    results = [m for m in stored if getattr(m, "tool_call_id", None) == "c1"]
    assert [(m.text, m.is_error) for m in results] == [("refund issued", False)]
    assert validate_tool_protocol(stored) == []
    assert model.remaining == 1  # the model was not called again after the cancel


def test_blocking_runner_refuses_async_models_and_tools_before_writing() -> None:
    from agentctx_fast import InMemoryAgentStore

    async def async_tool() -> str:
        return "never"

    store = InMemoryAgentStore()
    runner = AgentRunner(store)
    with pytest.raises(InvalidArgumentError, match="chat model is async"):
        runner.run(Agent("a", AsyncScriptedChatModel([AiMessage("x")])), "c1", "hi")
    tool_agent = Agent("a", ScriptedChatModel([AiMessage("x")]), tools=[Tool("t", async_tool)])
    with pytest.raises(InvalidArgumentError, match="tool 't' is async"):
        runner.run(tool_agent, "c1", "hi")
    with pytest.raises(InvalidArgumentError, match="tool 't' is async"):
        runner.run_history(tool_agent, [], "hi")
    assert store.chat_memory("c1").get_messages() == []
    assert store.turn_store().open_turn("c1") is None


def test_runners_refuse_the_other_kind_of_store(request: pytest.FixtureRequest) -> None:
    from agentctx_fast import AsyncInMemoryAgentStore, InMemoryAgentStore

    with pytest.raises(InvalidArgumentError, match="AsyncAgentRunner needs an async store"):
        AsyncAgentRunner(InMemoryAgentStore())
    with pytest.raises(InvalidArgumentError, match="AgentRunner needs a blocking store"):
        AgentRunner(AsyncInMemoryAgentStore())


def test_many_conversations_share_one_loop(request: pytest.FixtureRequest) -> None:
    in_flight = 0
    most = 0

    class WaitingModel:
        async def chat(self, messages: Sequence[Message], tools: Sequence[Any]) -> AiMessage:
            nonlocal in_flight, most
            in_flight += 1
            most = max(most, in_flight)
            await asyncio.sleep(0.05)
            in_flight -= 1
            return AiMessage("done")

    agent = Agent("a", WaitingModel())

    async def body(store: Any) -> list[Any]:
        runner = AsyncAgentRunner(store)
        return await asyncio.gather(
            *(runner.run(agent, f"conv-{i}-{new_conversation_id()}", "hi") for i in range(100))
        )

    turns = with_store("async-memory", request, body)
    assert all(t.status is TurnStatus.COMPLETED for t in turns)
    assert most == 100  # every model call was waiting at once: none blocked the others


def test_busy_across_processes_async_holds_blocking_waits(
    db_kind: str, request: pytest.FixtureRequest
) -> None:
    """An async runner in another process holds a suspended turn; this process's blocking
    runner meets the busy error, then resumes the turn to its end."""
    kind = db_kind.removeprefix("async-")
    if kind == "redis-cluster":
        pytest.skip("a cluster client is made in code, not from a URL the child could take")
    url = store_url(kind, request)
    conversation = new_conversation_id()
    store_class = "AsyncRedisAgentStore" if kind == "redis" else "AsyncSqlAgentStore"
    initialize = "pass" if kind == "redis" else "await store.schema.initialize()"
    script = textwrap.dedent(
        f"""
        import asyncio
        from agentctx_fast import (Agent, AiMessage, AsyncAgentRunner, AsyncScriptedChatModel,
            {store_class}, Tool, ToolCall)
        async def main():
            store = {store_class}({url!r})
            {initialize}
            model = AsyncScriptedChatModel([AiMessage(tool_calls=(ToolCall("c1", "refund",
                '{{"order_id": "X"}}'),))])
            agent = Agent("support", model, tools=[Tool("refund", lambda order_id: "ok",
                requires_approval=True)])
            turn = await AsyncAgentRunner(store).run(agent, {conversation!r}, "refund X")
            print(turn.turn_id, turn.status.value)
            await store.aclose()
        asyncio.run(main())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    turn_id, status = done.stdout.split()
    assert status == "suspended"
    store = make_store(kind, request)
    try:
        runner = AgentRunner(store)
        agent = _refund_agent(ScriptedChatModel([AiMessage("Refunded.")]))
        with pytest.raises(AgentConversationBusyError) as busy:
            runner.run(agent, conversation, "again")
        assert busy.value.turn_id == turn_id
        turn = runner.resume(agent, conversation, turn_id, {"c1": True})
        assert turn.status is TurnStatus.COMPLETED
        assert ids(store.chat_memory(conversation).get_messages())[-1] == f"{turn_id}:ai:2"
    finally:
        store.close()


def test_stream_of_a_non_streaming_plain_model_gives_one_delta(
    request: pytest.FixtureRequest,
) -> None:
    agent = Agent("a", ScriptedChatModel([AiMessage("All done.")]))

    async def body(store: Any) -> list[Any]:
        return [e async for e in AsyncAgentRunner(store).stream(agent, new_conversation_id(), "hi")]

    events = with_store("async-memory", request, body)
    assert [type(e) for e in events] == [TextDelta, TurnEnded]
    assert events[0].text == "All done."


def test_a_blocking_models_own_stream_method_is_not_used(request: pytest.FixtureRequest) -> None:
    """A plain model whose ``stream`` is a blocking generator is called through ``chat`` in a
    worker thread; its generator is never iterated on the loop."""

    class BlockingStreamer(ScriptedChatModel):
        def stream(self, messages: Sequence[Message], tools: Sequence[Any]) -> Any:
            raise AssertionError("the async runner must not call a blocking stream")
            yield "never"

    agent = Agent("a", BlockingStreamer([AiMessage("Plain reply.")]))

    async def body(store: Any) -> list[Any]:
        return [e async for e in AsyncAgentRunner(store).stream(agent, new_conversation_id(), "hi")]

    events = with_store("async-memory", request, body)
    assert [type(e) for e in events] == [TextDelta, TurnEnded]
    assert events[1].turn.status is TurnStatus.COMPLETED
    assert events[0].text == "Plain reply."


def test_one_runner_serves_turns_on_successive_event_loops() -> None:
    """A runner kept across ``asyncio.run`` calls renews leases on each new loop."""
    from agentctx_fast import AsyncInMemoryAgentStore

    store = AsyncInMemoryAgentStore()
    runner = AsyncAgentRunner(store, lease_seconds=0.3)
    renewed: list[float] = []

    class SlowModel:
        async def chat(self, messages: Sequence[Message], tools: Sequence[Any]) -> AiMessage:
            lease = await store.turn_store().open_turn(messages[-1].text or "")
            before = lease.expires_at if lease else None
            await asyncio.sleep(0.35)  # longer than the lease: only a renewal keeps it
            lease = await store.turn_store().open_turn(messages[-1].text or "")
            assert lease is not None and before is not None
            renewed.append(lease.expires_at - before)  # type: ignore[operator]
            return AiMessage("done")

    agent = Agent("a", SlowModel())
    for conversation in ("c1", "c2"):
        turn = asyncio.run(runner.run(agent, conversation, conversation))
        assert turn.status is TurnStatus.COMPLETED
    assert len(renewed) == 2 and all(delta > 0 for delta in renewed)


def test_in_memory_sqlite_serves_concurrent_turns() -> None:
    """One shared connection (``sqlite://``): the async store runs one operation at a time."""
    from agentctx_fast import AsyncSqlAgentStore

    async def main() -> list[Any]:
        store = AsyncSqlAgentStore("sqlite://")
        await store.schema.initialize()
        runner = AsyncAgentRunner(store)
        agent = Agent("a", AsyncScriptedChatModel([AiMessage("ok")], cycle=True))
        try:
            return await asyncio.gather(*(runner.run(agent, f"c{i}", "hi") for i in range(30)))
        finally:
            await runner.aclose()
            await store.aclose()

    turns = asyncio.run(main())
    assert [t.status for t in turns] == [TurnStatus.COMPLETED] * 30


def test_a_second_cancellation_during_cleanup_still_frees_the_conversation(
    db_kind: str, request: pytest.FixtureRequest
) -> None:
    conversation = new_conversation_id()

    async def body(store: Any) -> Any:
        runner = AsyncAgentRunner(store, lease_seconds=30)
        model = _WaitingModel()
        task = asyncio.ensure_future(runner.run(Agent("a", model), conversation, "first"))
        await model.entered.wait()
        task.cancel()
        for _ in range(3):  # the cleanup is under way: cancel again
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.2)
        done = await runner.run(
            Agent("a", AsyncScriptedChatModel([AiMessage("second")])), conversation, "second"
        )
        await runner.aclose()
        return done

    assert with_store(db_kind, request, body).status is TurnStatus.COMPLETED


def test_turn_checks_its_ids() -> None:
    from agentctx_fast import AsyncInMemoryAgentStore, InMemoryAgentStore

    with pytest.raises(InvalidArgumentError):
        AgentRunner(InMemoryAgentStore()).turn(123, "t")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        asyncio.run(AsyncAgentRunner(AsyncInMemoryAgentStore()).turn([], "t"))  # type: ignore[arg-type]


def _gate_after(
    monkeypatch: pytest.MonkeyPatch, owner: type, name: str, when: Callable[..., bool]
) -> tuple[asyncio.Event, asyncio.Event]:
    """``owner.name`` does its work, then (when ``when(*args)``) waits for ``release``: a
    cancellation arriving then finds the store write done but not yet seen by the runner."""
    original = getattr(owner, name)
    entered, release = asyncio.Event(), asyncio.Event()

    async def gated(self: Any, *args: Any) -> Any:
        result = await original(self, *args)
        if when(*args):
            entered.set()
            await release.wait()
        return result

    monkeypatch.setattr(owner, name, gated)
    return entered, release


def test_a_cancellation_during_a_store_write_loses_nothing(
    store_kind: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reply with a tool call is stored when the caller is cancelled: the turn still
    knows it, answers the call as cancelled and frees the conversation."""
    conversation = new_conversation_id()
    calls: list[str] = []
    model = AsyncScriptedChatModel([_call("c1", "lookup"), AiMessage("never used")])
    agent = Agent("a", model, tools=[Tool("lookup", lambda: calls.append("ran") or "found")])

    async def body(store: Any) -> Any:
        memory = store.chat_memory(conversation)
        entered, release = _gate_after(
            monkeypatch, type(memory), "add_message_if_absent",
            lambda message: isinstance(message, AiMessage) and bool(message.tool_calls),
        )  # fmt: skip
        runner = AsyncAgentRunner(store)
        task = asyncio.ensure_future(runner.run(agent, conversation, "look it up"))
        await entered.wait()
        task.cancel()
        await asyncio.sleep(0.05)
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        stored = await memory.get_messages()
        turn = await runner.turn(conversation, stored[0].turn_id)
        nxt = await runner.run(
            Agent("a", AsyncScriptedChatModel([AiMessage("second")])), conversation, "again"
        )
        return turn, stored, nxt

    turn, stored, nxt = with_store(store_kind, request, body)
    assert turn.status is TurnStatus.CANCELLED
    assert calls == []  # the cancelled reply's call never ran
    assert validate_tool_protocol(stored) == []
    answers = [m for m in stored if getattr(m, "tool_call_id", None) == "c1"]
    assert len(answers) == 1 and answers[0].is_error
    assert nxt.status is TurnStatus.COMPLETED


def test_a_cancellation_while_the_lease_is_taken_frees_it(
    store_kind: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancelled while the store grants the lease: the turn holds it, ends cancelled and
    frees it at once (it is not left to expire)."""
    conversation = new_conversation_id()

    async def body(store: Any) -> Any:
        runner = AsyncAgentRunner(store, lease_seconds=600)
        entered, release = _gate_after(
            monkeypatch, type(runner.turn_store), "acquire_conversation", lambda *_: True
        )
        model = AsyncScriptedChatModel([AiMessage("never used")])
        task = asyncio.ensure_future(runner.run(Agent("a", model), conversation, "first"))
        await entered.wait()
        task.cancel()
        await asyncio.sleep(0.05)
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        stored = await store.chat_memory(conversation).get_messages()
        turn = await runner.turn(conversation, stored[0].turn_id)
        monkeypatch.undo()
        nxt = await runner.run(
            Agent("a", AsyncScriptedChatModel([AiMessage("second")])), conversation, "again"
        )
        return turn, model.remaining, nxt

    turn, remaining, nxt = with_store(store_kind, request, body)
    assert turn.status is TurnStatus.CANCELLED
    assert remaining == 1  # the model was never called
    assert nxt.status is TurnStatus.COMPLETED


def test_a_cancelled_cancel_call_still_frees_the_conversation(
    store_kind: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``cancel``'s own caller is cancelled while the store hands it the suspended turn's
    lease: the cancel still closes the turn and frees the conversation."""
    conversation = new_conversation_id()

    async def body(store: Any) -> Any:
        runner = AsyncAgentRunner(store, lease_seconds=600)
        model = AsyncScriptedChatModel([_call("c1", "refund", '{"order_id": "A1"}')])
        suspended = await runner.run(_refund_agent(model), conversation, "refund A1")
        assert suspended.status is TurnStatus.SUSPENDED
        entered, release = _gate_after(
            monkeypatch, type(runner.turn_store), "reacquire_conversation", lambda *_: True
        )
        task = asyncio.ensure_future(runner.cancel(conversation, suspended.turn_id))
        await entered.wait()
        task.cancel()
        await asyncio.sleep(0.05)
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        monkeypatch.undo()
        turn = await runner.turn(conversation, suspended.turn_id)
        nxt = await runner.run(
            Agent("a", AsyncScriptedChatModel([AiMessage("second")])), conversation, "again"
        )
        return turn, nxt, await store.chat_memory(conversation).get_messages()

    turn, nxt, stored = with_store(store_kind, request, body)
    assert turn.status is TurnStatus.CANCELLED
    assert nxt.status is TurnStatus.COMPLETED
    assert validate_tool_protocol(stored) == []


def _reading_through(
    store: Any, hook: Callable[[Callable[[], Awaitable[Any]]], Awaitable[Any]]
) -> Callable[[str], Any]:
    """A chat-memory provider on ``store`` whose memories' `get_messages` go through
    ``hook(read)``, ``read`` being the store's own read."""

    def provider(conversation_id: str) -> Any:
        memory = store.chat_memory(conversation_id)
        base = type(memory)

        class Hooked(base):  # type: ignore[misc, valid-type]
            async def get_messages(self, *args: Any, **kwargs: Any) -> Any:
                return await hook(partial(super().get_messages, *args, **kwargs))

        memory.__class__ = Hooked
        return memory

    return provider


async def _suspended_refund(runner: AsyncAgentRunner, conversation: str, tool: Tool) -> Any:
    """A turn of ``conversation`` suspended on ``tool``'s call ``c1`` (order A1)."""
    model = AsyncScriptedChatModel([_call("c1", "refund", '{"order_id": "A1"}')])
    suspended = await runner.run(Agent("a", model, tools=[tool]), conversation, "refund")
    assert suspended.status is TurnStatus.SUSPENDED
    return suspended


def test_a_cancel_while_resume_reads_the_turns_messages_stops_the_approved_tool(
    request: pytest.FixtureRequest,
) -> None:
    """``cancel`` on the resuming runner lands once resume has taken the conversation back and
    is reading the turn's messages: the runner holds the lease by then, so the cancel reaches
    the turn at once and the approved tool never runs."""
    conversation = new_conversation_id()
    ran: list[str] = []
    refunding = Tool(
        "refund", lambda order_id: ran.append(order_id) or "ok", requires_approval=True
    )

    async def body(store: Any) -> Any:
        entered, release = asyncio.Event(), asyncio.Event()
        armed: list[bool] = []

        async def gate(read: Callable[[], Awaitable[Any]]) -> Any:
            messages = await read()
            if armed and armed.pop():
                entered.set()
                await release.wait()
            return messages

        runner = AsyncAgentRunner(store, _reading_through(store, gate), lease_seconds=600)
        suspended = await _suspended_refund(runner, conversation, refunding)
        answering = Agent("a", AsyncScriptedChatModel([AiMessage("Refunded.")]), tools=[refunding])
        armed.append(True)
        resuming = asyncio.ensure_future(
            runner.resume(answering, conversation, suspended.turn_id, {"c1": True})
        )
        await asyncio.wait_for(entered.wait(), 10)
        cancelled = asyncio.ensure_future(runner.cancel(conversation, suspended.turn_id))
        await asyncio.sleep(0.05)
        release.set()
        done = await asyncio.wait_for(resuming, 10)
        await asyncio.wait_for(cancelled, 10)
        stored = await store.chat_memory(conversation).get_messages()
        await runner.aclose()
        return done, stored

    done, stored = with_store("async-memory", request, body)
    assert done.status is TurnStatus.CANCELLED
    assert ran == []
    assert validate_tool_protocol(stored) == []


def test_a_store_error_while_resume_reads_the_turn_closes_it_whole(
    request: pytest.FixtureRequest,
) -> None:
    """A store error once resume has taken the conversation back, while it reads the turn's
    messages: the turn ends ``FAILED`` as any turn stopped by an error does, its approved call
    answered with an error result and its approval form closed (SPEC §11: the protocol stays
    valid), and the conversation is free for the next turn."""
    conversation = new_conversation_id()
    ran: list[str] = []
    refunding = Tool(
        "refund", lambda order_id: ran.append(order_id) or "ok", requires_approval=True
    )

    async def body(store: Any) -> Any:
        armed: list[bool] = []

        async def fail_once(read: Callable[[], Awaitable[Any]]) -> Any:
            if armed and armed.pop():
                raise StoreUnavailableError("the store went away for one read")
            return await read()

        runner = AsyncAgentRunner(store, _reading_through(store, fail_once), lease_seconds=600)
        suspended = await _suspended_refund(runner, conversation, refunding)
        answering = Agent("a", AsyncScriptedChatModel([AiMessage("Refunded.")]), tools=[refunding])
        armed.append(True)
        with pytest.raises(StoreUnavailableError):
            await runner.resume(answering, conversation, suspended.turn_id, {"c1": True})
        record = await store.turn_store().load_turn(conversation, suspended.turn_id)
        stored = await store.chat_memory(conversation).get_messages()
        after = Agent("a", AsyncScriptedChatModel([AiMessage("Hello.")]))
        nxt = await runner.run(after, conversation, "hello")
        await runner.aclose()
        return record, stored, nxt

    record, stored, nxt = with_store("async-memory", request, body)
    assert ran == []
    assert record.status is TurnStatus.FAILED
    assert validate_tool_protocol(stored) == []
    forms = [m for m in stored if isinstance(m, AgentFormMessage)]
    assert [form.status for form in forms] == ["failed"]
    assert nxt.status is TurnStatus.COMPLETED


def test_a_cancellation_while_a_stream_closes_goes_on(request: pytest.FixtureRequest) -> None:
    """Closing a stream waits for its turn to close; a cancellation of the closing task
    meanwhile is not swallowed: it goes on once the turn has closed."""
    tool, entered, release = _blocked_tool("slow", "slow result")
    model = AsyncScriptedChatModel([_call("c1", "slow"), AiMessage("never used")])
    agent = Agent("a", model, tools=[tool])

    async def body(store: Any) -> Any:
        runner = AsyncAgentRunner(store)
        conversation = new_conversation_id()
        stream = runner.stream(agent, conversation, "go")
        first = await anext(stream)
        await asyncio.get_running_loop().run_in_executor(None, entered.wait, 10)
        closing = asyncio.ensure_future(stream.aclose())  # type: ignore[attr-defined]
        await asyncio.sleep(0.05)
        closing.cancel()
        await asyncio.sleep(0.05)
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await closing
        stored = await store.chat_memory(conversation).get_messages()
        return first, await runner.turn(conversation, stored[0].turn_id), stored

    first, turn, stored = with_store("async-memory", request, body)
    assert isinstance(first, ToolCallEvent)
    assert turn.status is TurnStatus.CANCELLED
    results = [m for m in stored if getattr(m, "tool_call_id", None) == "c1"]
    assert [m.text for m in results] == ["slow result"]


def test_plain_tools_of_concurrent_turns_run_side_by_side() -> None:
    """Two conversations at once, each with a plain tool: one waits until the other's tool has
    run, which it can only do in a thread of its own."""
    from agentctx_fast import AsyncInMemoryAgentStore

    gate = threading.Event()
    tools = [
        Tool("wait", lambda: "released" if gate.wait(10) else "timed out"),
        Tool("release", lambda: gate.set() or "set"),
    ]

    async def main() -> list[Any]:
        store = AsyncInMemoryAgentStore()
        runner = AsyncAgentRunner(store)
        turns = await asyncio.gather(
            *(
                runner.run(
                    Agent(
                        "a",
                        AsyncScriptedChatModel([_call("c1", name), AiMessage("done")]),
                        tools=tools,
                    ),
                    f"conversation-{name}",
                    "go",
                )
                for name in ("wait", "release")
            )
        )
        results = [
            [m.text for m in await store.chat_memory(f"conversation-{name}").get_messages()]
            for name in ("wait", "release")
        ]
        await runner.aclose()
        return [[t.status for t in turns], results]

    statuses, results = asyncio.run(main())
    assert statuses == [TurnStatus.COMPLETED] * 2
    assert "released" in results[0] and "set" in results[1]


def test_a_plain_tool_sees_the_callers_context_variables() -> None:
    """As with `asyncio.to_thread`: a request id set in a context variable by the service
    reaches a plain tool running in a worker thread (and the tool's own changes stay there)."""
    import contextvars

    from agentctx_fast import AsyncInMemoryAgentStore

    request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="none")

    def lookup() -> str:
        seen = request_id.get()
        request_id.set("changed by the tool")
        return f"request {seen}"

    async def main() -> tuple[list[str], str]:
        store = AsyncInMemoryAgentStore()
        runner = AsyncAgentRunner(store)
        agent = Agent(
            "a",
            AsyncScriptedChatModel([_call("c1", "lookup"), AiMessage("done")]),
            tools=[Tool("lookup", lookup)],
        )
        request_id.set("r-42")
        await runner.run(agent, "conversation", "go")
        texts = [m.text for m in await store.chat_memory("conversation").get_messages()]
        await runner.aclose()
        return texts, request_id.get()

    texts, after = asyncio.run(main())
    assert "request r-42" in texts
    assert after == "r-42"


def test_the_runner_imports_and_runs_plain_calls_where_os_has_no_fork() -> None:
    """On a platform without ``os.register_at_fork`` (Windows) the package imports and a
    plain tool runs in a worker thread."""
    script = textwrap.dedent(
        """
        import asyncio, os
        del os.register_at_fork
        from agentctx_fast import Agent, AiMessage, AsyncAgentRunner, AsyncInMemoryAgentStore
        from agentctx_fast import AsyncScriptedChatModel, Tool, ToolCall
        call = AiMessage(tool_calls=(ToolCall("c1", "lookup", "{}"),))
        agent = Agent("a", AsyncScriptedChatModel([call, AiMessage("done")]),
                      tools=[Tool("lookup", lambda: "found")])
        async def main():
            runner = AsyncAgentRunner(AsyncInMemoryAgentStore())
            turn = await runner.run(agent, "c", "look it up")
            await runner.aclose()
            print(turn.status.value)
        asyncio.run(main())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "completed"


@pytest.mark.parametrize("waits", [False, True], ids=["never-waits", "waits"])
def test_a_turn_runs_in_a_copy_of_the_callers_context(waits: bool) -> None:
    """As in a task of its own: an async tool sees the caller's context variables, and what it
    sets stays in the turn (before and after the turn's first wait) and never reaches the
    caller."""
    import contextvars

    from agentctx_fast import AsyncInMemoryAgentStore

    request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="none")

    async def lookup() -> str:
        seen = request_id.get()
        request_id.set("set by the tool")
        if waits:
            await asyncio.sleep(0)
        return f"saw {seen}, then {request_id.get()}"

    agent = Agent(
        "a",
        AsyncScriptedChatModel([_call("c1", "lookup"), _call("c2", "lookup"), AiMessage("ok")]),
        tools=[Tool("lookup", lookup)],
    )

    async def main() -> tuple[list[str], str]:
        runner = AsyncAgentRunner(AsyncInMemoryAgentStore())
        request_id.set("r-42")
        turn = await runner.run(agent, "conversation", "go")
        await runner.aclose()
        return [m.text for m in turn.messages if ":tool:" in m.message_id], request_id.get()

    results, after = asyncio.run(main())
    assert results == [
        "saw r-42, then set by the tool",
        "saw set by the tool, then set by the tool",
    ]
    assert after == "r-42"


def test_a_turn_whose_task_is_cancelled_before_it_first_runs_frees_the_conversation() -> None:
    """The loop stops just after a caller started a turn, before the turn's task first ran;
    shutting the loop down cancels every task, as `asyncio.run` does: the caller is cancelled,
    nothing of the turn is stored and the conversation is free."""
    from agentctx_fast import AsyncInMemoryAgentStore

    store = AsyncInMemoryAgentStore()
    model = _WaitingModel()
    loop = asyncio.new_event_loop()
    try:
        runner = AsyncAgentRunner(store)
        caller = loop.create_task(runner.run(Agent("a", model), "conversation", "first"))
        loop.call_soon(loop.stop)  # after the caller's first step, before the turn's task
        loop.run_forever()
        assert not model.entered.is_set() and not caller.done()
        tasks = asyncio.all_tasks(loop)
        assert len(tasks) >= 2  # the caller and its turn's task
        for task in tasks:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        assert caller.cancelled()

        async def after() -> tuple[list[Message], Any]:
            stored = await store.chat_memory("conversation").get_messages()
            second = Agent("a", AsyncScriptedChatModel([AiMessage("second answer")]))
            return stored, await runner.run(second, "conversation", "second")

        stored, nxt = loop.run_until_complete(after())
        loop.run_until_complete(runner.aclose())
    finally:
        loop.close()
    assert stored == []
    assert nxt.status is TurnStatus.COMPLETED


def _shut_down_while_the_tool_runs(
    loop: asyncio.AbstractEventLoop,
    store: Any,
    runner: AsyncAgentRunner,
    caller: asyncio.Task[Any],
    release: threading.Event,
) -> None:
    """Cancel every task of ``loop`` (as `asyncio.run` does on its way out) while the plain
    tool of turn "c1" runs, let the tool finish 50 ms later, and check what was kept: the tool's
    result, a protocol-valid turn ended cancelled, a free conversation."""
    tasks = asyncio.all_tasks(loop)
    for task in tasks:
        task.cancel()
    loop.call_later(0.05, release.set)
    loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
    assert caller.cancelled()

    async def after() -> tuple[Any, list[Message], Any]:
        stored = await store.chat_memory("conv").get_messages()
        first = await runner.turn("conv", stored[0].turn_id)
        second = Agent("a", AsyncScriptedChatModel([AiMessage("second answer")]))
        return first, stored, await runner.run(second, "conv", "again")

    first, stored, nxt = loop.run_until_complete(after())
    loop.run_until_complete(runner.aclose())
    assert first.status is TurnStatus.CANCELLED
    results = [m for m in stored if getattr(m, "tool_call_id", None) == "c1"]
    assert [(m.text, m.is_error) for m in results] == [("refund issued", False)]
    assert validate_tool_protocol(stored) == []
    assert nxt.status is TurnStatus.COMPLETED


def test_a_turn_runs_as_its_own_task_from_its_first_step() -> None:
    """The turn runs as a task of its own: a tool sees one task before and after it waits,
    never its caller's, and a timeout entered before the wait ends the tool's wait, not the
    caller."""
    from agentctx_fast import AsyncInMemoryAgentStore

    seen: list[asyncio.Task[Any] | None] = []

    async def which() -> str:
        seen.append(asyncio.current_task())
        await asyncio.sleep(0)
        seen.append(asyncio.current_task())
        return "looked"

    async def bounded() -> str:
        async with asyncio.timeout(0.05):
            await asyncio.sleep(10)
        return "never"

    agent = Agent(
        "a",
        AsyncScriptedChatModel([_call("c1", "which"), _call("c2", "bounded"), AiMessage("done")]),
        tools=[Tool("which", which), Tool("bounded", bounded)],
    )

    async def main() -> tuple[Any, asyncio.Task[Any] | None]:
        runner = AsyncAgentRunner(AsyncInMemoryAgentStore())
        turn = await runner.run(agent, "conversation", "go")
        await runner.aclose()
        return turn, asyncio.current_task()

    turn, caller = asyncio.run(main())
    assert turn.status is TurnStatus.COMPLETED
    assert len(seen) == 2 and seen[0] is seen[1] and seen[0] is not caller
    results = {m.tool_call_id: m for m in turn.messages if ":tool:" in m.message_id}
    assert results["c1"].text == "looked"
    assert results["c2"].is_error and "TimeoutError" in results["c2"].text


def test_a_plain_tool_running_when_the_loop_shuts_down_keeps_its_result() -> None:
    """Every task is cancelled (as `asyncio.run` does on its way out) while a plain tool runs
    in its worker thread: the tool finishes, its result is stored, the turn ends cancelled and
    the conversation is free."""
    from agentctx_fast import AsyncInMemoryAgentStore

    store = AsyncInMemoryAgentStore()
    tool, entered, release = _blocked_tool("slow_refund", "refund issued")
    model = AsyncScriptedChatModel([_call("c1", "slow_refund"), AiMessage("never used")])
    loop = asyncio.new_event_loop()
    try:
        runner = AsyncAgentRunner(store)
        caller = loop.create_task(runner.run(Agent("a", model, tools=[tool]), "conv", "go"))
        loop.run_until_complete(loop.run_in_executor(None, entered.wait, 10))
        _shut_down_while_the_tool_runs(loop, store, runner, caller, release)
    finally:
        release.set()
        loop.close()
    assert model.remaining == 1


async def _cancel_a_waiting_turn(runner: Any, conversation: str) -> Any:
    """Start turn "turn-cancel" on ``conversation`` with a model that waits, cancel its caller
    once the model is entered (the caller sees `CancelledError`) and return the stored turn."""
    model = _WaitingModel()
    waiting = asyncio.ensure_future(
        runner.run(Agent("a", model), conversation, "go", turn_id="turn-cancel")
    )
    await model.entered.wait()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    return await runner.turn(conversation, "turn-cancel")


def _two_argument_task_factory(loop: asyncio.AbstractEventLoop, coro: Any) -> asyncio.Task[Any]:
    """A ``(loop, coro)`` factory, as older instrumentation installs (it takes no context)."""
    return asyncio.Task(coro, loop=loop)


@pytest.mark.parametrize(
    "factory",
    [
        "two-argument",
        pytest.param(
            "eager",
            marks=pytest.mark.skipif(sys.version_info < (3, 12), reason="eager tasks: 3.12+"),
        ),
    ],
)
def test_turns_run_whatever_task_factory_the_loop_has(factory: str) -> None:
    """The turn's task is the runner's own: a loop's task factory that takes no context, or
    one that runs a new task's first step itself, changes nothing (turns that never wait,
    that wait on an async model, on a plain tool, and a turn cancelled while it waits)."""
    from agentctx_fast import AsyncInMemoryAgentStore

    class SleepyModel:
        def __init__(self, replies: list[AiMessage]) -> None:
            self.replies = replies

        async def chat(self, messages: Sequence[Message], tools: Sequence[Any]) -> AiMessage:
            await asyncio.sleep(0.001)
            return self.replies.pop(0)

    def lookup() -> str:
        time.sleep(0.001)
        return "looked up"

    async def main() -> tuple[list[Any], Any]:
        loop = asyncio.get_running_loop()
        loop.set_task_factory(
            _two_argument_task_factory if factory == "two-argument" else asyncio.eager_task_factory  # type: ignore[attr-defined,unused-ignore]
        )
        runner = AsyncAgentRunner(AsyncInMemoryAgentStore())
        agents = [
            Agent("a", AsyncScriptedChatModel([AiMessage("at once")])),
            Agent("a", SleepyModel([AiMessage("after a wait")])),
            Agent(
                "a",
                AsyncScriptedChatModel([_call("c1", "lookup"), AiMessage("after a tool")]),
                tools=[Tool("lookup", lookup)],
            ),
        ]
        turns = [await runner.run(agent, f"c{i}", "go") for i, agent in enumerate(agents)]
        stored = await _cancel_a_waiting_turn(runner, "c-cancel")
        await runner.aclose()
        return turns, stored

    turns, cancelled = asyncio.run(main())
    assert [(t.status, t.messages[-1].text) for t in turns] == [
        (TurnStatus.COMPLETED, "at once"),
        (TurnStatus.COMPLETED, "after a wait"),
        (TurnStatus.COMPLETED, "after a tool"),
    ]
    assert cancelled.status is TurnStatus.CANCELLED


@pytest.mark.parametrize("error", [KeyboardInterrupt, SystemExit])
def test_a_keyboard_interrupt_in_a_turn_leaves_no_task_after_a_round(
    error: type[BaseException],
) -> None:
    """A KeyboardInterrupt (or SystemExit) raised in a turn's task goes on out of the loop, as
    from any task's step, and out once more from its caller's task, which awaits the turn (as
    any task awaiting a task does); then no task of the turn is left, no error is reported and
    the conversation is free."""
    from agentctx_fast import AsyncInMemoryAgentStore

    class InterruptedModel:
        async def chat(self, messages: Sequence[Message], tools: Sequence[Any]) -> AiMessage:
            raise error

    loop = asyncio.new_event_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: reported.append(context))
    try:
        runner = AsyncAgentRunner(AsyncInMemoryAgentStore())
        caller = loop.create_task(runner.run(Agent("a", InterruptedModel()), "conv", "go"))
        with pytest.raises(error):
            loop.run_until_complete(caller)  # from the turn's task
        with pytest.raises(error):
            loop.run_until_complete(caller)  # from the caller's
        assert caller.done()

        async def after() -> Any:
            for _ in range(3):
                await asyncio.sleep(0)  # the turn's task takes its step
            agent = Agent("a", AsyncScriptedChatModel([AiMessage("next")]))
            return await runner.run(agent, "conv", "again")

        nxt = loop.run_until_complete(after())
        left = [t for t in asyncio.all_tasks(loop) if "keeper" not in repr(t).lower()]
        loop.run_until_complete(runner.aclose())
    finally:
        loop.close()
    import gc

    gc.collect()
    assert nxt.status is TurnStatus.COMPLETED
    assert left == []
    assert reported == []


@pytest.mark.parametrize("delay", [0.0, 0.05], ids=["at-once", "later"])
def test_a_timeout_entered_before_the_call_fires_in_the_turns_first_wait(delay: float) -> None:
    """The caller enters ``asyncio.timeout`` before calling the runner, and it fires while the
    turn waits for its model in its first step (before its task first ran, for an eager
    start): the turn ends cancelled, the caller gets `TimeoutError`, the conversation is
    free."""
    from agentctx_fast import AsyncInMemoryAgentStore

    async def main() -> tuple[list[Message], Any, Any]:
        store = AsyncInMemoryAgentStore()
        runner = AsyncAgentRunner(store)
        model = _WaitingModel()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(delay):
                await runner.run(Agent("a", model), "conv", "go", turn_id="turn-1")
        stored = await store.chat_memory("conv").get_messages()
        first = await runner.turn("conv", "turn-1") if stored else None
        agent = Agent("a", AsyncScriptedChatModel([AiMessage("next")]))
        nxt = await runner.run(agent, "conv", "again")
        await runner.aclose()
        return stored, first, nxt

    stored, first, nxt = asyncio.run(main())
    if first is not None:  # the turn's task may have been cancelled before it started
        assert first.status is TurnStatus.CANCELLED
        assert [m.text for m in stored] == ["go"]
    assert nxt.status is TurnStatus.COMPLETED and nxt.messages[-1].text == "next"


@pytest.mark.parametrize("delay", [0.0, 0.05], ids=["at-once", "later"])
def test_a_timeout_a_tool_enters_in_the_turns_first_step_is_the_turns(delay: float) -> None:
    """A tool in the turn's first step (nothing waited before it) enters ``asyncio.timeout``
    and waits: the timeout fires in that first wait and ends the tool's wait (an error result
    the turn goes on from), never the caller."""
    from agentctx_fast import AsyncInMemoryAgentStore

    async def bounded() -> str:
        async with asyncio.timeout(delay):
            await asyncio.sleep(10)
        return "never"

    agent = Agent(
        "a",
        AsyncScriptedChatModel([_call("c1", "bounded"), AiMessage("done")]),
        tools=[Tool("bounded", bounded)],
    )

    async def main() -> Any:
        runner = AsyncAgentRunner(AsyncInMemoryAgentStore())
        turn = await runner.run(agent, "conversation", "go")
        await asyncio.sleep(0.01)  # a cancellation leaking to the caller would land here
        await runner.aclose()
        return turn

    turn = asyncio.run(main())
    assert turn.status is TurnStatus.COMPLETED
    results = [m for m in turn.messages if ":tool:" in m.message_id]
    assert len(results) == 1 and results[0].is_error and "TimeoutError" in results[0].text
    assert turn.messages[-1].text == "done"


class _NamedAsyncModel(AsyncScriptedChatModel):
    """An async scripted model that names its model, as the client adapters do."""

    model_name = "gpt-4o"


def test_a_named_model_gets_exact_window_counts(request: pytest.FixtureRequest) -> None:
    """SPEC §20: without a token_estimator, the windows of a model that names itself are
    counted exactly in its encoding (gpt-4o: o200k_base)."""
    import json

    from agentctx_fast import (
        BackendUnavailableError,
        BpeTokenEstimator,
        HeuristicTokenEstimator,
        InMemoryMetrics,
    )

    try:
        exact = BpeTokenEstimator("o200k_base")
    except BackendUnavailableError as error:
        pytest.skip(str(error))

    def lookup(order_id: str) -> str:
        events = [
            {"time": f"2024-03-0{d} 08:23:41", "context": "快件已到达转运中心"} for d in range(9)
        ]
        return json.dumps({"id": order_id, "amount": 1299.5, "events": events}, ensure_ascii=False)

    model = _NamedAsyncModel(
        [
            AiMessage(tool_calls=(ToolCall("c1", "lookup", '{"order_id": "ORD-7"}'),)),
            AiMessage("ok"),
        ]
    )
    agent = Agent("named", model, tools=[Tool("lookup", lookup)])
    metrics = InMemoryMetrics()

    async def body(store: Any) -> Any:
        return await AsyncAgentRunner(store, metrics=metrics).run(agent, "c-named", "订单状态?")

    turn = with_store("async-memory", request, body)
    assert turn.status is TurnStatus.COMPLETED
    windows = [list(c.messages) for c in model.calls]
    tokens = metrics.get("agentctx_window_tokens", agent="named")
    assert tokens.count == 2
    assert tokens.total == sum(exact.estimate(w) for w in windows)
    assert tokens.total != sum(HeuristicTokenEstimator().estimate(w) for w in windows)
