"""Whole-history work over 100,000 messages: Rust vs the reference; heuristic token throughput."""

from __future__ import annotations

from typing import Any

import pytest

from agentctx_fast._backend import native
from agentctx_fast.core._reference import api as reference
from workload import conversation

ENGINES = {"rust": native, "python": reference}


@pytest.mark.parametrize("work", ["segment", "validate", "message_tokens"])
@pytest.mark.parametrize("engine", list(ENGINES))
def test_whole_history(benchmark: Any, engine: str, work: str) -> None:
    core = ENGINES[engine]
    if core is None:
        pytest.skip("extension not built")
    history = list(conversation(100_000))
    fn = getattr(core, work)
    fn(history)  # warm the per-message caches a long-running service has
    benchmark.pedantic(lambda: fn(history), rounds=3 if engine == "python" else 10, iterations=1)


def _corpus_texts() -> list[str]:
    texts = []
    for message in conversation(10_000):
        text = getattr(message, "text", None)
        if isinstance(text, str) and text:
            texts.append(text)
    return texts


@pytest.mark.parametrize("engine", list(ENGINES))
def test_count_text_throughput(benchmark: Any, engine: str) -> None:
    core = ENGINES[engine]
    if core is None:
        pytest.skip("extension not built")
    corpus = "\n".join(_corpus_texts())
    size = len(corpus.encode("utf-8"))
    benchmark.extra_info["megabytes"] = size / 1e6
    result = benchmark(lambda: core.count_text(corpus))
    assert result > 0
