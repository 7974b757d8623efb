"""`CalibratedTokenEstimator`: estimates scaled by what the provider reports.

An estimator that is off by a steady factor for one model (a vocabulary the heuristic does
not know, the provider's own framing of messages and tools) learns that factor from the
``usage`` the model reports with each reply: the runner passes the base estimator's count of
the window it sent and the prompt tokens the provider billed.

>>> from agentctx_fast import HeuristicTokenEstimator
>>> estimator = CalibratedTokenEstimator(HeuristicTokenEstimator())
>>> estimator.ratio
1.0
>>> estimator.observe(1000, 1200)
>>> estimator.observe(1000, 1300)
>>> estimator.ratio
1.25
>>> estimator.count_text("hello world") == round(
...     HeuristicTokenEstimator().count_text("hello world") * 1.25)
True
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence

from agentctx_fast.core.messages import Message
from agentctx_fast.core.tokens import TokenEstimator
from agentctx_fast.errors import InvalidArgumentError

MIN_RATIO = 0.5
MAX_RATIO = 2.0


class CalibratedTokenEstimator:
    """``base``'s estimates times a ratio learnt from provider-reported prompt tokens: the mean
    of the last ``window`` observed ratios, clamped to [0.5, 2] (1 before any observation)."""

    def __init__(self, base: TokenEstimator, *, window: int = 64) -> None:
        if not callable(getattr(base, "estimate", None)) or not callable(
            getattr(base, "count_text", None)
        ):
            raise InvalidArgumentError("base must be a TokenEstimator (count_text and estimate)")
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise InvalidArgumentError(f"window must be an int >= 1, got {window!r}")
        self.base = base
        self._lock = threading.Lock()
        self._ratios: deque[float] = deque(maxlen=window)
        self._ratio = 1.0

    @property
    def ratio(self) -> float:
        """The factor applied to ``base``'s estimates now."""
        return self._ratio

    def observe(self, estimated_tokens: int, reported_prompt_tokens: int) -> None:
        """Learn from one model call: ``base``'s estimate of the prompt it was sent and the
        prompt tokens the provider reported. Zero or negative counts are ignored."""
        for name, value in (
            ("estimated_tokens", estimated_tokens),
            ("reported_prompt_tokens", reported_prompt_tokens),
        ):
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidArgumentError(f"{name} must be an int, got {value!r}")
        if estimated_tokens <= 0 or reported_prompt_tokens <= 0:
            return
        sample = min(max(reported_prompt_tokens / estimated_tokens, MIN_RATIO), MAX_RATIO)
        with self._lock:
            self._ratios.append(sample)
            mean = sum(self._ratios) / len(self._ratios)
            self._ratio = min(max(mean, MIN_RATIO), MAX_RATIO)

    def count_text(self, text: str) -> int:
        """``base``'s count of ``text``, scaled."""
        return round(self.base.count_text(text) * self._ratio)

    def estimate(self, messages: Sequence[Message]) -> int:
        """``base``'s estimate of ``messages``, scaled."""
        return round(self.base.estimate(messages) * self._ratio)
