"""The agent runners: turns, tools, approvals, resume, busy protection.

One turn loop (`agentctx_fast.runner._engine`) serves both: `AgentRunner` drives it blocking,
`AsyncAgentRunner` on an event loop, with `stream` for events as they happen.
"""

from agentctx_fast.runner._state import REFUSED_TEXT
from agentctx_fast.runner.agent import Agent, AgentTurn
from agentctx_fast.runner.aio import AsyncAgentRunner
from agentctx_fast.runner.events import (
    ApprovalRequired,
    StreamEvent,
    TextDelta,
    ToolCallEvent,
    ToolResultEvent,
    TurnEnded,
)
from agentctx_fast.runner.sync import AgentRunner

__all__ = [
    "REFUSED_TEXT",
    "Agent",
    "AgentRunner",
    "AgentTurn",
    "ApprovalRequired",
    "AsyncAgentRunner",
    "StreamEvent",
    "TextDelta",
    "ToolCallEvent",
    "ToolResultEvent",
    "TurnEnded",
]
