"""The runners with real model clients: the async OpenAI model streaming through
`AsyncAgentRunner.stream`, usage recorded as metrics and fed to a calibrated estimator, and
`agentctx schema`."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from agentctx_fast import (
    Agent,
    AgentRunner,
    AiMessage,
    AsyncAgentRunner,
    AsyncInMemoryAgentStore,
    CalibratedTokenEstimator,
    HeuristicTokenEstimator,
    InMemoryAgentStore,
    InMemoryMetrics,
    ScriptedChatModel,
    TextDelta,
    Tool,
    ToolCallEvent,
    ToolResultEvent,
    TurnEnded,
    TurnStatus,
    Usage,
)
from agentctx_fast.cli.main import main
from agentctx_fast.observability import metrics as m
from openai_server import ChatServer, Stream, serve, usage

openai = pytest.importorskip("openai")


@pytest.fixture
def server() -> Iterator[ChatServer]:
    yield from serve()


def test_the_async_openai_model_streams_through_the_runner(server: ChatServer) -> None:
    from agentctx_fast import AsyncOpenAIChatModel

    server.script += [
        Stream(
            [{"role": "assistant", "content": "Let me "}, {"content": "check."},
             {"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                              "function": {"name": "track", "arguments": ""}}]},
             {"tool_calls": [{"index": 0, "function": {"arguments": '{"order_id": "A"}'}}]}],
            usage(50, 9), finish_reason="tool_calls",
        ),
        Stream([{"role": "assistant", "content": "It "}, {"content": "shipped."}], usage(80, 3)),
    ]  # fmt: skip

    async def track(order_id: str) -> str:
        return f"{order_id} shipped"

    metrics = InMemoryMetrics()

    async def body() -> list[Any]:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="k", max_retries=0)
        model = AsyncOpenAIChatModel(client, "gpt-4o-mini")
        agent = Agent("support", model, tools=[Tool("track", track)])
        runner = AsyncAgentRunner(AsyncInMemoryAgentStore(), metrics=metrics)
        try:
            return [event async for event in runner.stream(agent, "c1", "Where is A?")]
        finally:
            await runner.aclose()
            await client.close()

    events = asyncio.run(body())
    assert server.rejected == []
    kinds = [type(event) for event in events]
    assert kinds == [
        TextDelta, TextDelta, ToolCallEvent, ToolResultEvent, TextDelta, TextDelta, TurnEnded,
    ]  # fmt: skip
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Let me check.It shipped."
    assert events[3].message.text == "A shipped"
    turn = events[-1].turn
    assert turn.status is TurnStatus.COMPLETED and turn.final_message.usage == Usage(80, 3, 83)
    # the second request carried the tool result, in the API's exact form
    assert server.requests[1]["messages"][-1] == {
        "role": "tool", "tool_call_id": "call_1", "content": "A shipped",
    }  # fmt: skip
    assert metrics.get(m.MODEL_PROMPT_TOKENS, agent="support").total == 130
    assert metrics.get(m.MODEL_COMPLETION_TOKENS, agent="support").total == 12
    assert metrics.get(m.WINDOW_ESTIMATE_RATIO, agent="support").count == 2


def test_the_openai_models_name_their_model_for_exact_counts() -> None:
    """SPEC §20: an agent of an OpenAI model counts its windows in the model's encoding."""
    from agentctx_fast import AsyncOpenAIChatModel, OpenAIChatModel

    sync = OpenAIChatModel(openai.OpenAI(base_url="http://127.0.0.1:9", api_key="k"), "gpt-4o")
    client = openai.AsyncOpenAI(base_url="http://127.0.0.1:9", api_key="k")
    both = [sync, AsyncOpenAIChatModel(client, "gpt-4-0613")]
    assert [model.model_name for model in both] == ["gpt-4o", "gpt-4-0613"]
    encodings = [
        getattr(Agent("a", m).window_options.token_estimator, "encoding", None) for m in both
    ]
    assert encodings == ["o200k_base", "cl100k_base"]


def test_reported_usage_calibrates_the_estimator() -> None:
    estimator = CalibratedTokenEstimator(HeuristicTokenEstimator())
    metrics = InMemoryMetrics()

    def reply(messages: Any, tools: Any) -> AiMessage:
        estimated = HeuristicTokenEstimator().estimate(messages)
        return AiMessage("ok", usage=Usage(estimated * 3 // 2, 1, estimated * 3 // 2 + 1))

    agent = Agent("a", ScriptedChatModel([reply], cycle=True), token_estimator=estimator)
    runner = AgentRunner(InMemoryAgentStore(), metrics=metrics)
    for question in ("first question", "second question about ORD-1"):
        assert runner.run(agent, "c1", question).status is TurnStatus.COMPLETED
    assert estimator.ratio == pytest.approx(1.5, rel=0.02)
    ratios = metrics.get(m.WINDOW_ESTIMATE_RATIO, agent="a")
    # the first window was estimated a third short; once calibrated, the second one is right
    assert ratios.count == 2 and ratios.maximum == pytest.approx(1.0, rel=0.02)
    assert ratios.total == pytest.approx(1 / 1.5 + 1.0, rel=0.02)


def test_schema_command_prints_ddl(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "--url", "postgresql://app@db/shop", "--table-prefix", "shop_"]) == 0
    out = capsys.readouterr().out
    assert out.count("CREATE TABLE shop_") == 4 and "BYTEA" in out
    assert main(["schema", "--url", "sqlite:///x.db"]) == 0
    assert "CREATE TABLE agent_messages" in capsys.readouterr().out
    assert main(["schema", "--url", "mysql://x/y"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "SQLite and PostgreSQL" in error
    assert "Traceback" not in error
