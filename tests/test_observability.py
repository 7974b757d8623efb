"""Operability of the runners (SPEC §22): failures logged once with their context, a failed
turn's exception, the tool error formatter, idempotent turn ids and the metric names."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest

from agentctx_fast import (
    Agent,
    AgentRunner,
    AiMessage,
    AsyncAgentRunner,
    AsyncInMemoryAgentStore,
    AsyncScriptedChatModel,
    InMemoryAgentStore,
    InMemoryChatMemory,
    InMemoryMetrics,
    LeaseLostError,
    Message,
    ModelCallError,
    ScriptedChatModel,
    StoreUnavailableError,
    Tool,
    ToolCall,
    ToolMessage,
    TurnStatus,
)
from agentctx_fast.observability import metrics as m
from runner_helpers import check_memory
from store_fixtures import ASYNC_STORE_KINDS, make_async_store, new_conversation_id, store_url

LOGGER = "agentctx_fast"


def _lookup_call(call_id: str = "call-1") -> AiMessage:
    return AiMessage(tool_calls=(ToolCall(call_id, "lookup", '{"order_id": "o1"}'),))


def _leaky(order_id: str) -> str:
    raise PermissionError(f"db password=hunter2 refused for {order_id}")


def _records(caplog: pytest.LogCaptureFixture, level: int = logging.DEBUG) -> list[Any]:
    return [r for r in caplog.records if r.name.startswith(LOGGER) and r.levelno >= level]


class FailingModel:
    """A model whose every call fails as an API would (HTTP ``status``)."""

    def __init__(self, status: int) -> None:
        self.status = status

    def chat(self, messages: Sequence[Message], tools: Sequence[Any]) -> AiMessage:
        raise ModelCallError(f"model API error {self.status}: slow down", self.status)


class AsyncFailingModel(FailingModel):
    async def chat(  # type: ignore[override]
        self, messages: Sequence[Message], tools: Sequence[Any]
    ) -> AiMessage:
        return super().chat(messages, tools)


def _async(body: Callable[[AsyncAgentRunner], Awaitable[Any]], **options: Any) -> Any:
    async def main() -> Any:
        runner = AsyncAgentRunner(AsyncInMemoryAgentStore(), **options)
        try:
            return await body(runner)
        finally:
            await runner.aclose()

    return asyncio.run(main())


# -- a failed turn keeps its exception ---------------------------------------------------------


@pytest.mark.parametrize("status", [429, 404])
def test_a_model_error_reaches_the_caller_with_its_status(
    status: int, caplog: pytest.LogCaptureFixture
) -> None:
    runner = AgentRunner(InMemoryAgentStore())
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        turn = runner.run(Agent("a", FailingModel(status)), "c1", "hi", turn_id="t1")
    assert turn.status is TurnStatus.FAILED
    assert isinstance(turn.exception, ModelCallError)
    assert turn.exception.status_code == status
    assert turn.error == f"model failed: ModelCallError: model API error {status}: slow down"
    assert runner.turn("c1", "t1").exception is None  # not stored: the text is
    [record] = _records(caplog)
    assert record.levelno == logging.WARNING and record.name == "agentctx_fast.runner"
    assert (record.conversation_id, record.turn_id) == ("c1", "t1")
    assert not hasattr(record, "tool_call_id")
    assert record.exc_info is not None and record.exc_info[1] is turn.exception

    async def body(runner: AsyncAgentRunner) -> Any:
        return await runner.run(Agent("a", AsyncFailingModel(status)), "c1", "hi")

    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        turn = _async(body)
    assert isinstance(turn.exception, ModelCallError) and turn.exception.status_code == status
    [record] = _records(caplog)
    assert (record.conversation_id, record.turn_id) == ("c1", turn.turn_id)


@pytest.mark.parametrize("status", [429, 404])
def test_the_openai_client_keeps_the_status_through_the_runner(status: int) -> None:
    import openai

    from agentctx_fast import OpenAIChatModel
    from openai_server import Failure, serve

    for server in serve():
        server.script.append(Failure(status, "slow down or no such model"))
        client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
        agent = Agent("a", OpenAIChatModel(client, "gpt-4o-mini"))
        turn = AgentRunner(InMemoryAgentStore()).run(agent, "c1", "hi")
        assert isinstance(turn.exception, ModelCallError)
        assert turn.exception.status_code == status


# -- tool errors --------------------------------------------------------------------------------


def _tool_agent(model: Any, **options: Any) -> Agent:
    return Agent("a", model, tools=[Tool("lookup", _leaky)], **options)


def _tool_result(turn: Any) -> ToolMessage:
    [result] = [msg for msg in turn.messages if isinstance(msg, ToolMessage)]
    return result


@pytest.mark.parametrize(
    ("formatter", "expected"),
    [
        (None, "tool lookup failed: PermissionError: db password=hunter2 refused for o1"),
        (lambda error: f"lookup is unavailable ({type(error).__name__})", None),
        (lambda error: 1 / 0, "tool lookup failed: PermissionError"),  # a failing formatter
    ],
)
def test_what_the_model_sees_of_a_raising_tool(
    formatter: Any, expected: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    expected = expected or "lookup is unavailable (PermissionError)"
    replies = [_lookup_call(), AiMessage("Sorry.")]
    runner = AgentRunner(InMemoryAgentStore())
    agent = _tool_agent(ScriptedChatModel(replies), tool_error_formatter=formatter)
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        turn = runner.run(agent, "c1", "where is o1?", turn_id="t1")
    assert turn.status is TurnStatus.COMPLETED
    result = _tool_result(turn)
    assert result.is_error and result.text == expected
    records = _records(caplog)
    tool_records = [r for r in records if "raised" in r.getMessage()]
    assert len(tool_records) == 1
    [record] = tool_records
    assert (record.conversation_id, record.turn_id, record.tool_call_id) == ("c1", "t1", "call-1")
    assert isinstance(record.exc_info[1], PermissionError)
    assert len(records) == (2 if formatter is not None and expected.endswith("Error") else 1)

    async def body(runner: AsyncAgentRunner) -> Any:
        model = AsyncScriptedChatModel([_lookup_call(), AiMessage("Sorry.")])
        return await runner.run(_tool_agent(model, tool_error_formatter=formatter), "c1", "x")

    assert _tool_result(_async(body)).text == expected


def test_the_formatter_must_be_callable() -> None:
    from agentctx_fast import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="tool_error_formatter"):
        Agent("a", ScriptedChatModel([]), tool_error_formatter="redact")  # type: ignore[arg-type]


# -- logged once ---------------------------------------------------------------------------------


def test_a_cancelled_turn_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    """Once, at INFO; a completed tool turn before it logs nothing at INFO (nothing per
    message on the hot path)."""
    runner = AgentRunner(InMemoryAgentStore())
    agent = Agent(
        "a",
        ScriptedChatModel([_lookup_call(), AiMessage("Shipped.")]),
        tools=[
            Tool("lookup", lambda order_id: "shipped"),
            Tool("refund", lambda order_id: "ok", requires_approval=True),
        ],
    )
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        assert runner.run(agent, "c1", "hi").status is TurnStatus.COMPLETED
        assert _records(caplog, logging.INFO) == []
        refund = Agent("a", ScriptedChatModel([_refund_call()]), tools=agent.tools)
        assert runner.run(refund, "c1", "refund", turn_id="t1").status is TurnStatus.SUSPENDED
        assert runner.cancel("c1", "t1").status is TurnStatus.CANCELLED
    [record] = _records(caplog)
    assert record.levelno == logging.INFO and "cancelled" in record.getMessage()
    assert (record.conversation_id, record.turn_id) == ("c1", "t1")


def _refund_call() -> AiMessage:
    return AiMessage(tool_calls=(ToolCall("call-r", "refund", '{"order_id": "o1"}'),))


def test_a_lost_lease_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    store = InMemoryAgentStore()
    turns = store.turn_store()
    runner = AgentRunner(store, lease_seconds=30.0, clock=lambda: 1000.0)

    def taken_over(messages: Sequence[Message], tools: Sequence[Any]) -> AiMessage:
        # another process takes the conversation once this turn's lease has expired
        assert turns.acquire_conversation("c1", "t2", "other", 30.0, now=2000.0) == "t1"
        return AiMessage("late")

    with caplog.at_level(logging.DEBUG, logger=LOGGER), pytest.raises(LeaseLostError):
        runner.run(Agent("a", ScriptedChatModel([taken_over])), "c1", "hi", turn_id="t1")
    [record] = _records(caplog)
    assert record.levelno == logging.WARNING and "lease lost" in record.getMessage()
    assert (record.conversation_id, record.turn_id) == ("c1", "t1")


class _DownOnReplies(InMemoryChatMemory):
    """A memory whose store goes down when the model's reply is written."""

    def add_message_if_absent(self, message: Message) -> bool:
        if isinstance(message, AiMessage):
            raise StoreUnavailableError("connection refused")
        return super().add_message_if_absent(message)


@pytest.mark.parametrize("kind", ["blocking", "async"])
def test_a_store_error_is_logged_once(kind: str, caplog: pytest.LogCaptureFixture) -> None:
    from agentctx_fast.memory import awaitable_memory

    memory = _DownOnReplies()
    with caplog.at_level(logging.DEBUG, logger=LOGGER), pytest.raises(StoreUnavailableError):
        if kind == "blocking":
            runner = AgentRunner(chat_memory_provider=lambda _: memory)
            runner.run(
                Agent("a", ScriptedChatModel([AiMessage("hello")])), "c1", "hi", turn_id="t1"
            )
        else:

            async def main() -> None:
                runner = AsyncAgentRunner(chat_memory_provider=lambda _: awaitable_memory(memory))
                agent = Agent("a", AsyncScriptedChatModel([AiMessage("hello")]))
                try:
                    await runner.run(agent, "c1", "hi", turn_id="t1")
                finally:
                    await runner.aclose()

            asyncio.run(main())
    [record] = _records(caplog)
    assert record.levelno == logging.ERROR
    assert "StoreUnavailableError" in record.getMessage()
    assert isinstance(record.exc_info[1], StoreUnavailableError)
    assert (record.conversation_id, record.turn_id) == ("c1", "t1")


# -- idempotent turn ids ------------------------------------------------------------------------


def _approval_agent(model: Any) -> Agent:
    return Agent("a", model, tools=[Tool("lookup", lambda order_id: "ok", requires_approval=True)])


def test_a_retried_turn_id_returns_that_turn(store: Any) -> None:
    conversation = new_conversation_id()
    runner = AgentRunner(store)
    model = ScriptedChatModel([AiMessage("one"), _lookup_call(), AiMessage("three")])
    agent = _approval_agent(model)
    first = runner.run(agent, conversation, "one", turn_id="t-1")
    again = runner.run(agent, conversation, "one", turn_id="t-1")  # the request, retried
    assert (again.turn_id, again.status, again.step_count) == ("t-1", TurnStatus.COMPLETED, 1)
    assert len(model.calls) == 1  # no second turn
    check_memory(store.chat_memory(conversation), [first])
    # a suspended turn: its pending approval, not a busy conversation
    second = runner.run(agent, conversation, "two", turn_id="t-2")
    assert second.status is TurnStatus.SUSPENDED
    again = runner.run(agent, conversation, "two", turn_id="t-2")
    assert again.status is TurnStatus.SUSPENDED
    assert again.pending_approvals == second.pending_approvals
    # an older turn, while another holds the conversation: still that turn's state
    assert runner.run(agent, conversation, "one", turn_id="t-1").status is TurnStatus.COMPLETED
    assert len(model.calls) == 2


def test_a_turn_id_retried_while_its_turn_runs_returns_it(store: Any) -> None:
    conversation = new_conversation_id()
    runner = AgentRunner(store)
    seen: list[Any] = []

    def reply(messages: Sequence[Message], tools: Sequence[Any]) -> AiMessage:
        if not seen:  # the same request, sent again while the first still runs
            seen.append(runner.run(agent, conversation, "hi", turn_id="t-1"))
        return AiMessage("done")

    agent = Agent("a", ScriptedChatModel([reply]))
    assert runner.run(agent, conversation, "hi", turn_id="t-1").status is TurnStatus.COMPLETED
    [during] = seen
    assert (during.turn_id, during.status) == ("t-1", TurnStatus.RUNNING)


class _AsyncReplies:
    def __init__(self, reply: Callable[..., Awaitable[AiMessage]]) -> None:
        self.reply = reply

    async def chat(self, messages: Sequence[Message], tools: Sequence[Any]) -> AiMessage:
        return await self.reply(messages, tools)


@pytest.mark.parametrize("kind", ASYNC_STORE_KINDS)
def test_a_retried_turn_id_returns_that_turn_async(
    kind: str, request: pytest.FixtureRequest
) -> None:
    base = kind.removeprefix("async-")
    url = store_url(base, request)
    conversation = new_conversation_id()

    async def main() -> list[Any]:
        store = await make_async_store(base, url)
        runner = AsyncAgentRunner(store)
        seen: list[Any] = []

        async def reply(messages: Sequence[Message], tools: Sequence[Any]) -> AiMessage:
            if not seen:
                seen.append(await runner.run(agent, conversation, "hi", turn_id="t-1"))
            return AiMessage("done")

        agent = Agent("a", _AsyncReplies(reply))
        try:
            first = await runner.run(agent, conversation, "hi", turn_id="t-1")
            again = await runner.run(agent, conversation, "hi", turn_id="t-1")
            stored = await store.chat_memory(conversation).get_messages()
            return [first, again, seen[0], stored]
        finally:
            await runner.aclose()
            await store.aclose()

    first, again, during, stored = asyncio.run(main())
    assert first.status is again.status is TurnStatus.COMPLETED
    assert (again.turn_id, again.step_count) == ("t-1", 1)
    assert (during.turn_id, during.status) == ("t-1", TurnStatus.RUNNING)
    assert [msg.message_id for msg in stored] == ["t-1:user", "t-1:ai:1"]


# -- metric names -------------------------------------------------------------------------------


def test_metric_names_are_stable_with_underscores() -> None:
    names = [value for name, value in vars(m).items() if name.isupper() and isinstance(value, str)]
    assert len(names) == 19
    assert all(re.fullmatch(r"agentctx_[a-z_]+", name) for name in names), names


def test_turn_duration_and_store_latency() -> None:
    metrics = InMemoryMetrics()
    runner = AgentRunner(InMemoryAgentStore(), metrics=metrics)
    agent = Agent(
        "a",
        ScriptedChatModel([_lookup_call(), AiMessage("Shipped.")]),
        tools=[Tool("lookup", lambda order_id: "shipped")],
    )
    runner.run(agent, "c1", "hi")
    runner.run(Agent("b", FailingModel(500)), "c2", "hi")
    assert metrics.get(m.TURN_DURATION_SECONDS, agent="a", status="completed").count == 1
    assert metrics.get(m.TURN_DURATION_SECONDS, agent="b", status="failed").count == 1
    series = {key.split("{")[0]: None for key in metrics.snapshot()}
    assert m.STORE_OPERATION_SECONDS in series
    operations = {
        key for key in metrics.snapshot() if key.startswith(m.STORE_OPERATION_SECONDS + "{")
    }
    assert operations == {
        f"{m.STORE_OPERATION_SECONDS}{{operation={op},store=InMemoryAgentStore}}"
        for op in ("acquire", "save_turn", "append", "read_history", "release")
    }
    # records saved: the tool turn's at its start, before its tool runs (SPEC §20), after its
    # step and at its end; the failed turn's at its start and end
    assert metrics.get(m.STORE_OPERATION_SECONDS, operation="save_turn").count == 4 + 2
    assert metrics.get(m.STORE_OPERATION_SECONDS, operation="acquire").count == 2

    async def body(runner: AsyncAgentRunner) -> Any:
        return await runner.run(Agent("c", AsyncScriptedChatModel([AiMessage("hi")])), "c3", "x")

    _async(body, metrics=metrics)
    assert metrics.get(m.TURN_DURATION_SECONDS, agent="c", status="completed").count == 1
    assert metrics.get(m.STORE_OPERATION_SECONDS, store="AsyncInMemoryAgentStore").count > 0
