"""`CalibratedTokenEstimator` (SPEC §7): a bounded running average of reported ÷ estimated."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from agentctx_fast import (
    AiMessage,
    CalibratedTokenEstimator,
    HeuristicTokenEstimator,
    InvalidArgumentError,
    UserMessage,
)


def test_scales_the_base_by_the_mean_observed_ratio() -> None:
    base = HeuristicTokenEstimator()
    estimator = CalibratedTokenEstimator(base)
    messages = [UserMessage("Where is ORD-2024-001?", message_id="u1"), AiMessage("Shipped.")]
    assert estimator.estimate(messages) == base.estimate(messages)  # ratio 1 at first
    estimator.observe(100, 150)
    estimator.observe(100, 130)
    assert estimator.ratio == pytest.approx(1.4)
    assert estimator.estimate(messages) == round(base.estimate(messages) * 1.4)
    assert estimator.count_text("订单已发货") == round(base.count_text("订单已发货") * 1.4)


def test_ratio_is_clamped_and_the_average_bounded() -> None:
    estimator = CalibratedTokenEstimator(HeuristicTokenEstimator(), window=4)
    estimator.observe(100, 10_000)
    assert estimator.ratio == 2.0
    estimator.observe(100, 1)
    assert estimator.ratio == pytest.approx((2.0 + 0.5) / 2)
    for _ in range(4):  # the window forgets the two extremes
        estimator.observe(1000, 900)
    assert estimator.ratio == pytest.approx(0.9)
    estimator.observe(0, 500)  # nothing to learn from
    estimator.observe(500, 0)
    assert estimator.ratio == pytest.approx(0.9)


def test_bad_arguments_are_typed_errors() -> None:
    with pytest.raises(InvalidArgumentError):
        CalibratedTokenEstimator(object())  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        CalibratedTokenEstimator(HeuristicTokenEstimator(), window=0)
    estimator = CalibratedTokenEstimator(HeuristicTokenEstimator())
    for bad in ((1.5, 10), (10, "12"), (True, 10)):
        with pytest.raises(InvalidArgumentError):
            estimator.observe(*bad)  # type: ignore[arg-type]
    assert estimator.ratio == 1.0


def test_concurrent_observations_keep_a_consistent_ratio() -> None:
    estimator = CalibratedTokenEstimator(HeuristicTokenEstimator(), window=1000)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: estimator.observe(100, 120 if i % 2 else 140), range(1000)))
    assert estimator.ratio == pytest.approx(1.3)
