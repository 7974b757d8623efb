"""Turns: segmentation of a history into user requests and what the agent did."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from agentctx_fast.core._backend import core
from agentctx_fast.core.messages import Message
from agentctx_fast.core.types import TurnStatus

__all__ = ["TurnSegments", "TurnStatus", "segment_turns"]


class TurnSegments:
    """Turn boundaries of a history as NumPy arrays: turn ``k`` is ``messages[starts[k]:ends[k]]``.

    ``completed[k]`` is the inferred status: True when the turn ends with a final answer and
    every tool call has its result. Messages before ``starts[0]`` belong to no turn.
    """

    __slots__ = ("completed", "ends", "starts")

    def __init__(
        self,
        starts: npt.NDArray[np.int64],
        ends: npt.NDArray[np.int64],
        completed: npt.NDArray[np.bool_],
    ) -> None:
        self.starts = starts
        self.ends = ends
        self.completed = completed

    def __len__(self) -> int:
        return len(self.starts)

    def __repr__(self) -> str:
        return f"TurnSegments({len(self)} turns)"


def segment_turns(messages: Sequence[Message]) -> TurnSegments:
    """Segment ``messages`` into turns.

    >>> from agentctx_fast import UserMessage, AiMessage
    >>> seg = segment_turns([UserMessage("a"), AiMessage("b"), UserMessage("c")])
    >>> seg.starts.tolist(), seg.ends.tolist(), seg.completed.tolist()
    ([0, 2], [2, 3], [True, False])
    """
    starts, ends, completed = core.segment(messages)
    return TurnSegments(
        np.array(starts, dtype=np.int64),
        np.array(ends, dtype=np.int64),
        np.array(completed, dtype=np.bool_),
    )
