"""What `AsyncAgentRunner.stream` yields while a turn runs, in order."""

from __future__ import annotations

from dataclasses import dataclass

from agentctx_fast.core.messages import ToolCall, ToolMessage
from agentctx_fast.runner.agent import AgentTurn
from agentctx_fast.stores.turn_store import PendingApproval


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of the model's reply text, as it streams."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCallEvent:
    """The model asked for this tool call; it runs (or waits for approval) next."""

    call: ToolCall


@dataclass(frozen=True, slots=True)
class ToolResultEvent:
    """A tool call's result, as stored."""

    message: ToolMessage


@dataclass(frozen=True, slots=True)
class ApprovalRequired:
    """The turn is suspended until the user decides on these calls."""

    pending_approvals: tuple[PendingApproval, ...]


@dataclass(frozen=True, slots=True)
class TurnEnded:
    """The last event: the turn as it ended (completed, suspended, failed or cancelled)."""

    turn: AgentTurn


StreamEvent = TextDelta | ToolCallEvent | ToolResultEvent | ApprovalRequired | TurnEnded
"""Any event of `AsyncAgentRunner.stream`."""
