"""SPEC §7, §20: `HeuristicTokenEstimator()` within ±10% of exact cl100k_base and
`HeuristicTokenEstimator(encoding="o200k_base")` within ±10% of o200k_base, overall and on the
Chinese-bearing texts alone, on tool-heavy corpora 0-100% Chinese and on tool-heavy
conversations whose results are JSON with timestamps, ids, numbers and Chinese values (both
backends: the exact counts are tiktoken's)."""

from __future__ import annotations

import json
import random

import pytest

from agentctx_fast import HeuristicTokenEstimator, Message
from agentctx_fast.core._reference.message_tokens import message_tokens_one
from test_tokens_parity import mixed_corpus
from token_corpus import TOOL_RECORDS, corpus, has_chinese, message_texts, tool_conversation
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


def _conversation_error(encoding: str, messages: list[Message]) -> float:
    """Heuristic / exact - 1 over whole messages (overheads, tool calls and arguments too)."""
    estimated = HeuristicTokenEstimator(encoding).estimate(messages)
    counted = sum(message_tokens_one(m, lambda t: exact(encoding, t)) for m in messages)
    return estimated / counted - 1


@pytest.mark.parametrize("encoding", ["cl100k_base", "o200k_base"])
def test_heuristic_close_on_tool_json_conversations(encoding: str) -> None:
    """Tool results of JSON records (ISO 8601 timestamps, uuids, order ids, hex, opaque ids,
    numbers, nested objects, a fifth of the free text Chinese): within ±10%, and not under by
    more than 3% (an under-count is a window the model refuses; the heuristic used to be 4-5%
    under here, the space before every JSON number uncounted)."""
    messages = [m for seed in range(4) for m in tool_conversation(seed, turns=30)]
    chinese = [m for m in messages if any(has_chinese(t) for t in message_texts([m]))]
    for part in (messages, chinese):
        error = _conversation_error(encoding, part)
        assert -0.03 <= error <= 0.10, (encoding, len(part), error)


@pytest.mark.parametrize("encoding", ["cl100k_base", "o200k_base"])
def test_heuristic_close_on_each_kind_of_tool_result(encoding: str) -> None:
    """Each kind of record alone, not only their mix: within ±10% and not under by more than
    6%. The heuristic used to be 7% under on metric points (numbers after ``": ``) and 10-11%
    under on payments (opaque ids such as ``pi_3MtwBwLkdIwHu7ix28a3tqPa``)."""
    for kind, make in sorted(TOOL_RECORDS.items()):
        rng = random.Random(11)
        texts = [
            json.dumps(
                [make(rng) for _ in range(3)], ensure_ascii=False, indent=rng.choice([None, 2])
            )
            for _ in range(60)
        ]
        error = _error(encoding, texts)
        assert -0.06 <= error <= 0.10, (kind, encoding, error)
