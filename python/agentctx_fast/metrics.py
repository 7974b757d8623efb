"""Metrics the runner feeds: one small interface, one in-process collector.

The interface is a single method, ``record(metric, value, labels)``, so an adapter to
OpenTelemetry or Prometheus is a few lines::

    class OtelMetrics:
        def __init__(self, meter):
            self._histograms = {}
            self._meter = meter

        def record(self, metric, value, labels):
            histogram = self._histograms.get(metric)
            if histogram is None:
                histogram = self._histograms[metric] = self._meter.create_histogram(metric)
            histogram.record(value, attributes=dict(labels))

Metric names (labels in brackets): ``window.messages``, ``window.tokens``,
``window.dropped_turns``, ``window.compacted_turns`` [agent]; ``compressor.calls``,
``compressor.failures`` [agent]; ``tool.calls``, ``tool.result_chars``, ``tool.errors``,
``tool.truncations``, ``tool.page_requests`` [tool]; ``snapshot.bytes`` [agent];
``turn.steps`` [agent, status]; ``model.latency_seconds`` [agent], and when the model reports
usage ``model.prompt_tokens``, ``model.completion_tokens`` and ``window.estimate_ratio``
(the window's estimated tokens ÷ the reported prompt tokens) [agent].

>>> metrics = InMemoryMetrics()
>>> metrics.record("tool.result_chars", 120, {"tool": "get_order"})
>>> metrics.record("tool.result_chars", 80, {"tool": "get_order"})
>>> metrics.get("tool.result_chars", tool="get_order")
MetricSummary(count=2, total=200.0, maximum=120.0)
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

WINDOW_MESSAGES = "window.messages"
WINDOW_TOKENS = "window.tokens"
WINDOW_DROPPED_TURNS = "window.dropped_turns"
WINDOW_COMPACTED_TURNS = "window.compacted_turns"
COMPRESSOR_CALLS = "compressor.calls"
COMPRESSOR_FAILURES = "compressor.failures"
TOOL_CALLS = "tool.calls"
TOOL_RESULT_CHARS = "tool.result_chars"
TOOL_ERRORS = "tool.errors"
TOOL_TRUNCATIONS = "tool.truncations"
TOOL_PAGE_REQUESTS = "tool.page_requests"
SNAPSHOT_BYTES = "snapshot.bytes"
TURN_STEPS = "turn.steps"
MODEL_LATENCY_SECONDS = "model.latency_seconds"
MODEL_PROMPT_TOKENS = "model.prompt_tokens"
MODEL_COMPLETION_TOKENS = "model.completion_tokens"
WINDOW_ESTIMATE_RATIO = "window.estimate_ratio"


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
