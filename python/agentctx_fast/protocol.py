"""Tool-call protocol validation."""

from __future__ import annotations

from collections.abc import Sequence

from agentctx_fast._backend import core
from agentctx_fast._core_types import ProtocolViolation, ViolationKind
from agentctx_fast.errors import ToolProtocolError
from agentctx_fast.messages import Message

__all__ = ["ProtocolViolation", "ViolationKind", "check_tool_protocol", "validate_tool_protocol"]


def validate_tool_protocol(messages: Sequence[Message]) -> list[ProtocolViolation]:
    """Every protocol violation of ``messages``, in message order; pairing is checked per turn.

    >>> from agentctx_fast import UserMessage, ToolMessage
    >>> validate_tool_protocol([UserMessage("hi", message_id="u"), ToolMessage("c1", "x",
    ...     message_id="t")])
    [ProtocolViolation(kind='orphan_result', message_id='t', tool_call_id='c1')]
    """
    return [ProtocolViolation(*v) for v in core.validate(messages)]


def check_tool_protocol(messages: Sequence[Message]) -> None:
    """Raise `ToolProtocolError` carrying every violation when ``messages`` has any."""
    violations = validate_tool_protocol(messages)
    if violations:
        raise ToolProtocolError(violations)
