"""Metrics the runner feeds: one small interface, one in-process collector.

The interface is a single method, ``record(metric, value, labels)``; counters are observations
of 1. Names are stable and use underscores, so they are valid Prometheus and OpenTelemetry
instrument names as they are. `agentctx_fast.observability.otel.OtelMetrics` (the ``otel``
extra) records them on an OpenTelemetry ``Meter``.

Metric names (labels in brackets): ``agentctx_window_messages``, ``agentctx_window_tokens``,
``agentctx_window_dropped_turns``, ``agentctx_window_compacted_turns`` [agent];
``agentctx_compressor_calls``, ``agentctx_compressor_failures`` [agent];
``agentctx_tool_calls``, ``agentctx_tool_result_chars``, ``agentctx_tool_errors``,
``agentctx_tool_truncations``, ``agentctx_tool_page_requests`` [tool];
``agentctx_snapshot_bytes`` [agent]; ``agentctx_turn_steps`` [agent, status];
``agentctx_turn_duration_seconds`` [agent, status] (a turn's ``run`` or ``resume`` call, from
its start to its return; status ``error`` when it raised); ``agentctx_store_operation_seconds``
[operation, store] (each store call the runner makes: ``acquire``, ``save_turn``, ``append``,
``release``, ``suspend``, ``load_turn``, ``read_history``; store is the class of the runner's
store); ``agentctx_model_latency_seconds`` [agent], and when the model reports usage
``agentctx_model_prompt_tokens``, ``agentctx_model_completion_tokens`` and
``agentctx_window_estimate_ratio`` (the window's estimated tokens ÷ the reported prompt tokens)
[agent].

>>> metrics = InMemoryMetrics()
>>> metrics.record(TOOL_RESULT_CHARS, 120, {"tool": "get_order"})
>>> metrics.record(TOOL_RESULT_CHARS, 80, {"tool": "get_order"})
>>> metrics.get("agentctx_tool_result_chars", tool="get_order")
MetricSummary(count=2, total=200.0, maximum=120.0)
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

WINDOW_MESSAGES = "agentctx_window_messages"
WINDOW_TOKENS = "agentctx_window_tokens"
WINDOW_DROPPED_TURNS = "agentctx_window_dropped_turns"
WINDOW_COMPACTED_TURNS = "agentctx_window_compacted_turns"
COMPRESSOR_CALLS = "agentctx_compressor_calls"
COMPRESSOR_FAILURES = "agentctx_compressor_failures"
TOOL_CALLS = "agentctx_tool_calls"
TOOL_RESULT_CHARS = "agentctx_tool_result_chars"
TOOL_ERRORS = "agentctx_tool_errors"
TOOL_TRUNCATIONS = "agentctx_tool_truncations"
TOOL_PAGE_REQUESTS = "agentctx_tool_page_requests"
SNAPSHOT_BYTES = "agentctx_snapshot_bytes"
TURN_STEPS = "agentctx_turn_steps"
MODEL_LATENCY_SECONDS = "agentctx_model_latency_seconds"
MODEL_PROMPT_TOKENS = "agentctx_model_prompt_tokens"
MODEL_COMPLETION_TOKENS = "agentctx_model_completion_tokens"
WINDOW_ESTIMATE_RATIO = "agentctx_window_estimate_ratio"
TURN_DURATION_SECONDS = "agentctx_turn_duration_seconds"
STORE_OPERATION_SECONDS = "agentctx_store_operation_seconds"


@runtime_checkable
class AgentMetrics(Protocol):
    """Receives one observation; counters are observations of 1."""

    def record(self, metric: str, value: float, labels: Mapping[str, str]) -> None: ...


@dataclass(frozen=True, slots=True)
class MetricSummary:
    """Count, sum and maximum of the observations of one metric and label set."""

    count: int
    total: float
    maximum: float


class InMemoryMetrics:
    """Keeps count, sum and maximum per metric and label set; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._series: dict[tuple[str, tuple[tuple[str, str], ...]], list[float]] = {}

    def record(self, metric: str, value: float, labels: Mapping[str, str]) -> None:
        key = (metric, tuple(sorted(labels.items())))
        with self._lock:
            series = self._series.get(key)
            if series is None:
                self._series[key] = [1, float(value), float(value)]
            else:
                series[0] += 1
                series[1] += value
                series[2] = max(series[2], value)

    def get(self, metric: str, **labels: str) -> MetricSummary:
        """The summary of ``metric`` over every label set that includes ``labels``."""
        count, total, maximum = 0, 0.0, 0.0
        wanted = set(labels.items())
        with self._lock:
            for (name, label_items), (n, s, m) in self._series.items():
                if name == metric and wanted <= set(label_items):
                    count, total = count + int(n), total + s
                    maximum = m if count == n else max(maximum, m)
        return MetricSummary(count, total, maximum)

    def snapshot(self) -> dict[str, MetricSummary]:
        """Every series as ``"metric{label=value,…}"`` → summary, for printing."""
        with self._lock:
            return {
                metric + ("{" + ",".join(f"{k}={v}" for k, v in labels) + "}" if labels else ""): (
                    MetricSummary(int(n), s, m)
                )
                for (metric, labels), (n, s, m) in sorted(self._series.items())
            }
