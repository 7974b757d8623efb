"""SPEC §7: `HeuristicTokenEstimator()` within ±10% of exact cl100k_base and
`HeuristicTokenEstimator(encoding="o200k_base")` within ±10% of o200k_base, overall and on the
Chinese-bearing texts alone, on tool-heavy corpora 0-100% Chinese (both backends: the exact
counts are tiktoken's)."""

from __future__ import annotations

import pytest

from agentctx_fast import HeuristicTokenEstimator
from test_tokens_parity import mixed_corpus
from token_corpus import corpus, has_chinese
from token_references import exact

SHARES = [0.0, 0.1, 0.2, 0.5, 1.0]


def _error(encoding: str, texts: list[str]) -> float:
    heuristic = HeuristicTokenEstimator(encoding)
    estimated = sum(heuristic.count_text(t) for t in texts)
    counted = sum(exact(encoding, t) for t in texts)
    return estimated / counted - 1


@pytest.mark.parametrize("encoding", ["cl100k_base", "o200k_base"])
@pytest.mark.parametrize("share", SHARES)
def test_heuristic_within_ten_percent(encoding: str, share: float) -> None:
    texts = corpus(seed=int(share * 100) + 7, size=150, chinese_share=share)
    chinese = [t for t in texts if has_chinese(t)]
    assert abs(_error(encoding, texts)) <= 0.10, ("overall", encoding, share)
    if chinese:
        assert abs(_error(encoding, chinese)) <= 0.10, ("chinese-bearing", encoding, share)


@pytest.mark.parametrize("encoding", ["cl100k_base", "o200k_base"])
def test_heuristic_within_ten_percent_on_the_parity_corpus(encoding: str) -> None:
    parts = mixed_corpus()  # a fifth Chinese support dialogue
    assert abs(_error(encoding, [t for texts in parts.values() for t in texts])) <= 0.10
    assert abs(_error(encoding, parts["chinese"])) <= 0.10


@pytest.mark.parametrize("encoding", ["cl100k_base", "o200k_base"])
def test_heuristic_within_ten_percent_on_the_benchmark_conversation(encoding: str) -> None:
    from workload import conversation

    texts = []
    for message in conversation(2000):
        for attr in ("content", "text"):
            value = getattr(message, attr, None)
            if isinstance(value, str):
                texts.append(value)
        texts += [call.arguments for call in getattr(message, "tool_calls", ())]
    assert abs(_error(encoding, texts)) <= 0.10
    assert abs(_error(encoding, [t for t in texts if has_chinese(t)])) <= 0.10
