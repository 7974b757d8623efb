"""OpenTelemetry spans and metrics of the runners (SPEC §22), with the SDK's in-memory exporter
and reader: the GenAI semantic conventions' span names and attributes, content only when asked,
errors as span status; the same spans from the blocking and the async runner."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import StatusCode

from agentctx_fast import (
    Agent,
    AgentRunner,
    AiMessage,
    AsyncAgentRunner,
    AsyncInMemoryAgentStore,
    AsyncScriptedChatModel,
    InMemoryAgentStore,
    Message,
    ModelCallError,
    ScriptedChatModel,
    Tool,
    ToolCall,
    TurnStatus,
    Usage,
)
from agentctx_fast.observability import metrics as m
from agentctx_fast.observability.otel import OtelMetrics, OtelTracing

SECRET = "card 4111-1111"


def _exporter() -> tuple[InMemorySpanExporter, TracerProvider]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter, provider


def _lookup(order_id: str) -> str:
    if order_id == "bad":
        raise LookupError(f"no order {order_id}")
    return f"{order_id} shipped"


def _replies(order_id: str = "o1") -> list[AiMessage]:
    call = ToolCall("call-1", "lookup", f'{{"order_id": "{order_id}"}}')
    return [
        AiMessage(tool_calls=(call,), usage=Usage(120, 7, 127)),
        AiMessage("It shipped.", usage=Usage(150, 4, 154)),
    ]


class _Model(ScriptedChatModel):
    model_name = "gpt-4o-mini"


class _AsyncModel(AsyncScriptedChatModel):
    model_name = "gpt-4o-mini"


def _run(kind: str, tracing: OtelTracing, replies: list[AiMessage], **options: Any) -> Any:
    """One turn on the blocking or the async runner, traced."""
    if kind == "blocking":
        agent = Agent("support", _Model(replies), tools=[Tool("lookup", _lookup)])
        return AgentRunner(InMemoryAgentStore(), tracing=tracing, **options).run(
            agent, "c1", f"where is my order? {SECRET}", turn_id="t1"
        )

    async def main() -> Any:
        agent = Agent("support", _AsyncModel(replies), tools=[Tool("lookup", _lookup)])
        runner = AsyncAgentRunner(AsyncInMemoryAgentStore(), tracing=tracing, **options)
        try:
            return await runner.run(agent, "c1", f"where is my order? {SECRET}", turn_id="t1")
        finally:
            await runner.aclose()

    return asyncio.run(main())


def _by_name(spans: Sequence[ReadableSpan]) -> dict[str, list[ReadableSpan]]:
    named: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        named.setdefault(span.name, []).append(span)
    return named


def _text(spans: Sequence[ReadableSpan]) -> str:
    return repr([(dict(s.attributes or {}), s.status.description, s.events) for s in spans])


@pytest.mark.parametrize("kind", ["blocking", "async"])
def test_a_tool_turn_makes_agent_chat_and_tool_spans(kind: str) -> None:
    exporter, provider = _exporter()
    turn = _run(kind, OtelTracing(provider), _replies())
    assert turn.status is TurnStatus.COMPLETED
    spans = exporter.get_finished_spans()
    named = _by_name(spans)
    assert sorted(named) == ["chat gpt-4o-mini", "execute_tool lookup", "invoke_agent support"]
    [agent] = named["invoke_agent support"]
    chats = named["chat gpt-4o-mini"]
    [tool] = named["execute_tool lookup"]
    assert len(chats) == 2 and len(spans) == 4
    # nested: the turn, its model calls and its tool call
    assert agent.parent is None
    assert all(s.parent is not None and s.parent.span_id == agent.context.span_id for s in chats)
    assert tool.parent is not None and tool.parent.span_id == agent.context.span_id
    assert {s.context.trace_id for s in spans} == {agent.context.trace_id}
    assert dict(agent.attributes or {}) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "support",
        "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.conversation.id": "c1",
        "agentctx.turn.id": "t1",
        "agentctx.operation": "run",
        "agentctx.history.messages": 0,
        "agentctx.turn.status": "completed",
        "agentctx.turn.steps": 2,
        "agentctx.turn.messages": 4,
    }
    first = dict(chats[0].attributes or {})
    assert first["gen_ai.operation.name"] == "chat"
    assert first["gen_ai.request.model"] == "gpt-4o-mini"
    assert (first["gen_ai.usage.input_tokens"], first["gen_ai.usage.output_tokens"]) == (120, 7)
    assert first["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert first["agentctx.window.messages"] == 1 and first["agentctx.window.tokens"] > 0
    assert dict(chats[1].attributes or {})["agentctx.window.messages"] == 3
    assert dict(tool.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "lookup",
        "gen_ai.tool.call.id": "call-1",
        "gen_ai.tool.type": "function",
    }
    assert all(s.status.status_code is StatusCode.UNSET for s in spans)
    # no message text unless asked
    assert SECRET not in _text(spans) and "shipped" not in _text(spans)


@pytest.mark.parametrize("kind", ["blocking", "async"])
def test_content_is_recorded_only_when_asked(kind: str) -> None:
    exporter, provider = _exporter()
    _run(kind, OtelTracing(provider, capture_content=True), _replies())
    named = _by_name(exporter.get_finished_spans())
    first = dict(named["chat gpt-4o-mini"][0].attributes or {})
    assert SECRET in str(first["gen_ai.input.messages"])
    assert "lookup" in str(first["gen_ai.output.messages"])
    [tool] = named["execute_tool lookup"]
    assert dict(tool.attributes or {})["gen_ai.tool.call.arguments"] == '{"order_id": "o1"}'
    assert dict(tool.attributes or {})["gen_ai.tool.call.result"] == "o1 shipped"


@pytest.mark.parametrize("kind", ["blocking", "async"])
def test_a_raising_tool_sets_its_span_status(kind: str) -> None:
    exporter, provider = _exporter()
    turn = _run(kind, OtelTracing(provider), _replies("bad"))
    assert turn.status is TurnStatus.COMPLETED  # the model saw the error and answered
    named = _by_name(exporter.get_finished_spans())
    [tool] = named["execute_tool lookup"]
    assert tool.status.status_code is StatusCode.ERROR
    assert tool.status.description == "LookupError"  # not its message: content is off
    assert dict(tool.attributes or {})["error.type"] == "LookupError"
    assert named["invoke_agent support"][0].status.status_code is StatusCode.UNSET


@pytest.mark.parametrize("kind", ["blocking", "async"])
def test_a_model_error_fails_the_chat_and_agent_spans(kind: str) -> None:
    exporter, provider = _exporter()
    error = ModelCallError("model API error 429: slow down", 429)
    turn = _run(kind, OtelTracing(provider), [error])  # type: ignore[list-item]
    assert turn.status is TurnStatus.FAILED and turn.exception is error
    named = _by_name(exporter.get_finished_spans())
    [chat] = named["chat gpt-4o-mini"]
    [agent] = named["invoke_agent support"]
    for span in (chat, agent):
        assert span.status.status_code is StatusCode.ERROR
        assert dict(span.attributes or {})["error.type"] == "ModelCallError"
    assert dict(agent.attributes or {})["agentctx.turn.status"] == "failed"


def test_a_busy_conversation_fails_its_agent_span() -> None:
    from agentctx_fast import AgentConversationBusyError

    exporter, provider = _exporter()
    store = InMemoryAgentStore()
    runner = AgentRunner(store, tracing=OtelTracing(provider))
    agent = Agent(
        "support",
        _Model([AiMessage(tool_calls=(ToolCall("call-1", "refund", "{}"),))]),
        tools=[Tool("refund", lambda: "ok", requires_approval=True)],
    )
    assert runner.run(agent, "c1", "refund me").status is TurnStatus.SUSPENDED
    with pytest.raises(AgentConversationBusyError):
        runner.run(agent, "c1", "hello?")
    spans = exporter.get_finished_spans()
    assert [s.name for s in spans] == [
        "chat gpt-4o-mini", "invoke_agent support", "invoke_agent support",
    ]  # fmt: skip
    assert spans[-1].status.status_code is StatusCode.ERROR
    assert dict(spans[-1].attributes or {})["error.type"] == "AgentConversationBusyError"


def test_untraced_runners_make_no_spans() -> None:
    exporter, provider = _exporter()

    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("request"):
        _run("blocking", None, _replies())  # type: ignore[arg-type]
    assert [s.name for s in exporter.get_finished_spans()] == ["request"]


@pytest.mark.parametrize("kind", ["blocking", "async"])
def test_the_turn_span_nests_in_the_callers_span(kind: str) -> None:
    exporter, provider = _exporter()
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("POST /chat") as request:
        _run(kind, OtelTracing(provider), _replies())
    [agent] = _by_name(exporter.get_finished_spans())["invoke_agent support"]
    assert agent.parent is not None and agent.parent.span_id == request.get_span_context().span_id


@pytest.mark.parametrize("kind", ["blocking", "async"])
def test_the_otel_metrics_adapter(kind: str) -> None:
    reader = InMemoryMetricReader()
    metrics = OtelMetrics(MeterProvider(metric_readers=[reader]))
    _, provider = _exporter()
    _run(kind, OtelTracing(provider), _replies(), metrics=metrics)
    data = reader.get_metrics_data()
    assert data is not None
    points: dict[str, list[Any]] = {}
    units: dict[str, str] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            assert scope.scope.name == "agentctx_fast"
            for metric in scope.metrics:
                points[metric.name] = list(metric.data.data_points)
                units[metric.name] = metric.unit
    [turn] = points[m.TURN_DURATION_SECONDS]
    assert dict(turn.attributes) == {"agent": "support", "status": "completed"}
    assert turn.count == 1 and units[m.TURN_DURATION_SECONDS] == "s"
    [calls] = points[m.TOOL_CALLS]
    assert dict(calls.attributes) == {"tool": "lookup"} and calls.count == 1
    [prompt] = points[m.MODEL_PROMPT_TOKENS]
    assert prompt.sum == 270
    store = "InMemoryAgentStore" if kind == "blocking" else "AsyncInMemoryAgentStore"
    operations = {dict(p.attributes)["operation"] for p in points[m.STORE_OPERATION_SECONDS]}
    # load_turn: the turn id given is looked up first (an idempotent retry)
    assert operations == {"load_turn", "acquire", "save_turn", "append", "read_history", "release"}
    assert {dict(p.attributes)["store"] for p in points[m.STORE_OPERATION_SECONDS]} == {store}


def test_a_model_without_a_name_or_usage() -> None:
    """The chat span is named by the model's class, and has no token attributes."""
    exporter, provider = _exporter()

    def reply(messages: Sequence[Message], tools: Sequence[Any]) -> AiMessage:
        return AiMessage("hi")

    agent = Agent("support", ScriptedChatModel([reply]))
    AgentRunner(InMemoryAgentStore(), tracing=OtelTracing(provider)).run(agent, "c1", "x")
    [chat] = [s for s in exporter.get_finished_spans() if s.name.startswith("chat")]
    assert chat.name == "chat ScriptedChatModel"  # no model name: the model's class
    assert "gen_ai.usage.input_tokens" not in dict(chat.attributes or {})


_WITHOUT_OTEL = """
import sys
sys.modules["opentelemetry"] = None  # the extra is not installed
from agentctx_fast import AgentRunner, Agent, AiMessage, InMemoryAgentStore, ScriptedChatModel
from agentctx_fast import MissingDependencyError
from agentctx_fast.observability.otel import OtelMetrics, OtelTracing
agent = Agent("a", ScriptedChatModel([AiMessage("hi")]))
assert AgentRunner(InMemoryAgentStore()).run(agent, "c1", "x").status.value == "completed"
assert [name for name in sys.modules if name.startswith("opentelemetry")] == ["opentelemetry"]
for make in (OtelTracing, OtelMetrics):
    try:
        make()
    except MissingDependencyError as error:
        print(error)
"""


def test_without_the_extra() -> None:
    """Runners run and import nothing of OpenTelemetry; asking for it names the extra."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_OTEL], capture_output=True, text=True, check=True
    )
    assert done.stdout.count("pip install 'agentctx-fast[otel]'") == 2, done.stdout
