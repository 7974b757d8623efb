"""OpenTelemetry for the runners, with the ``otel`` extra (opentelemetry-api only).

`OtelTracing` makes the spans of the OpenTelemetry GenAI semantic conventions: one
``invoke_agent {agent}`` span per ``run``/``resume`` call, a ``chat {model}`` span per model call
(with the reported token usage and the window's size) and an ``execute_tool {tool}`` span per tool
call, nested in that order. Message text, tool arguments and results are recorded only with
``capture_content=True``: they may hold personal data. A runner is traced only when given one::

    runner = AsyncAgentRunner(store, tracing=OtelTracing(), metrics=OtelMetrics())

`OtelMetrics` records the runner's metrics (`agentctx_fast.observability.metrics`) as histograms on
an OpenTelemetry ``Meter``. Both use the global providers unless given their own; without the extra,
nothing here is imported by the library, so an untraced runner costs nothing.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from agentctx_fast._tasks import Cancelled
from agentctx_fast.errors import MissingDependencyError

if TYPE_CHECKING:
    from opentelemetry.metrics import Histogram, MeterProvider
    from opentelemetry.trace import Span, TracerProvider

    from agentctx_fast.core.window import ContextWindow
    from agentctx_fast.runner.agent import Agent, AgentTurn
    from agentctx_fast.runner.tools import ToolOutcome

_SCOPE = "agentctx_fast"
_STOPS = (Cancelled, asyncio.CancelledError, GeneratorExit)
"""Ways a span's work stops that are not errors (a cancelled turn is not a failed one)."""


def _require_otel() -> Any:
    try:
        import opentelemetry.trace as trace
    except ImportError as error:
        raise MissingDependencyError(
            "OpenTelemetry support needs opentelemetry-api: pip install 'agentctx-fast[otel]'"
        ) from error
    return trace


class OtelTracing:
    """Spans for a runner (``AgentRunner(..., tracing=OtelTracing())``).

    ``tracer_provider``: where spans go (default: the global one, set by the application).
    ``capture_content``: also record the window's messages, the reply, tool arguments and
    results (``gen_ai.input.messages``, ``gen_ai.output.messages``,
    ``gen_ai.tool.call.arguments``, ``gen_ai.tool.call.result``); off by default.
    """

    def __init__(
        self, tracer_provider: TracerProvider | None = None, *, capture_content: bool = False
    ) -> None:
        trace = _require_otel()
        self._trace = trace
        self._tracer = trace.get_tracer(_SCOPE, tracer_provider=tracer_provider)
        self.capture_content = bool(capture_content)

    @contextmanager
    def _span(self, name: str, kind: Any, attributes: Mapping[str, Any]) -> Iterator[Span]:
        with self._tracer.start_as_current_span(
            name,
            kind=kind,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                yield span
            except _STOPS:
                raise
            except BaseException as error:
                self.failed(span, type(error).__name__, str(error), error)
                raise

    def failed(
        self, span: Span, error_type: str, description: str, error: BaseException | None = None
    ) -> None:
        """Mark ``span`` failed (``error.type``, status ERROR); the exception's message only
        with ``capture_content`` (it may quote what a tool or model was given)."""
        span.set_attribute("error.type", error_type)
        text = description if self.capture_content else error_type
        span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, text))
        if error is not None and self.capture_content:
            span.record_exception(error)

    # -- invoke_agent -----------------------------------------------------------------------

    def turn(self, agent: Agent, conversation_id: str | None, turn_id: str, operation: str) -> Any:
        """The span of one ``run``, ``resume`` or ``run_history`` call."""
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": agent.name,
            "agentctx.turn.id": turn_id,
            "agentctx.operation": operation,
        }
        model = getattr(agent.chat_model, "model_name", None)
        if isinstance(model, str):
            attributes["gen_ai.request.model"] = model
        if conversation_id is not None:
            attributes["gen_ai.conversation.id"] = conversation_id
        return self._span(f"invoke_agent {agent.name}", self._trace.SpanKind.INTERNAL, attributes)

    def turn_started(self, span: Span, history_messages: int) -> None:
        """The turn's history read from the store: how many messages."""
        span.set_attribute("agentctx.history.messages", history_messages)

    def turn_ended(self, span: Span, turn: AgentTurn) -> None:
        span.set_attribute("agentctx.turn.status", turn.status.value)
        span.set_attribute("agentctx.turn.steps", turn.step_count)
        span.set_attribute("agentctx.turn.messages", len(turn.messages))
        if turn.status.value == "failed":
            error = turn.exception
            kind = type(error).__name__ if error is not None else "turn_failed"
            self.failed(span, kind, turn.error or "", error)

    # -- chat -------------------------------------------------------------------------------

    def chat(self, agent: Agent, window: ContextWindow) -> Any:
        """The span of one model call on ``window``."""
        model = getattr(agent.chat_model, "model_name", None)
        model = model if isinstance(model, str) else type(agent.chat_model).__name__
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": model,
            "gen_ai.agent.name": agent.name,
            "agentctx.window.messages": len(window.messages),
            "agentctx.window.tokens": window.estimated_tokens,
            "agentctx.window.dropped_turns": window.dropped_turns,
            "agentctx.window.compacted_turns": window.compacted_turns,
        }
        if self.capture_content:
            attributes["gen_ai.input.messages"] = _messages_json(window.messages)
        return self._span(f"chat {model}", self._trace.SpanKind.CLIENT, attributes)

    def replied(self, span: Span, reply: object) -> None:
        usage = getattr(reply, "usage", None)
        for attribute, field in (
            ("gen_ai.usage.input_tokens", "prompt_tokens"),
            ("gen_ai.usage.output_tokens", "completion_tokens"),
        ):
            value = getattr(usage, field, None)
            if isinstance(value, int) and not isinstance(value, bool):
                span.set_attribute(attribute, value)
        calls = getattr(reply, "tool_calls", None)
        if isinstance(calls, tuple):
            span.set_attribute(
                "gen_ai.response.finish_reasons", ["tool_calls" if calls else "stop"]
            )
        if self.capture_content:
            from agentctx_fast.core.messages import Message

            if isinstance(reply, Message):
                span.set_attribute("gen_ai.output.messages", _messages_json([reply]))

    # -- execute_tool -----------------------------------------------------------------------

    def tool(self, name: str, call_id: str, arguments: str) -> Any:
        """The span of one tool call."""
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.type": "function",
        }
        if self.capture_content:
            attributes["gen_ai.tool.call.arguments"] = arguments
        return self._span(f"execute_tool {name}", self._trace.SpanKind.INTERNAL, attributes)

    def tool_done(self, span: Span, outcome: ToolOutcome) -> None:
        if self.capture_content:
            span.set_attribute("gen_ai.tool.call.result", outcome.text)
        if outcome.is_error:
            error = outcome.error
            kind = type(error).__name__ if error is not None else "tool_error"
            self.failed(span, kind, outcome.text, error)


def _messages_json(messages: Any) -> str:
    """The messages as the OpenAI chat format's JSON (what most GenAI backends display)."""
    from agentctx_fast.formats.openai import to_openai

    entries: list[Any]
    try:
        entries = list(to_openai(list(messages)))
    except Exception:  # a message the format cannot carry: its text, as far as it goes
        entries = [
            {"role": type(m).__name__, "content": getattr(m, "text", None)} for m in messages
        ]
    return json.dumps(entries, ensure_ascii=False, default=str)


class OtelMetrics:
    """The runner's metrics hook on an OpenTelemetry ``Meter``: each metric a histogram of
    its name (``agentctx_…``, unit ``s`` for the ``_seconds`` ones), its labels as attributes.

    ``meter_provider``: default, the global one (set by the application).
    """

    def __init__(self, meter_provider: MeterProvider | None = None) -> None:
        _require_otel()
        import opentelemetry.metrics as metrics

        self._meter = metrics.get_meter(_SCOPE, meter_provider=meter_provider)
        self._histograms: dict[str, Histogram] = {}
        self._lock = threading.Lock()

    def record(self, metric: str, value: float, labels: Mapping[str, str]) -> None:
        histogram = self._histograms.get(metric)
        if histogram is None:
            with self._lock:
                histogram = self._histograms.get(metric)
                if histogram is None:
                    unit = "s" if metric.endswith("_seconds") else "1"
                    histogram = self._meter.create_histogram(metric, unit=unit)
                    self._histograms[metric] = histogram
        histogram.record(value, attributes=dict(labels))


__all__ = ["OtelMetrics", "OtelTracing"]
