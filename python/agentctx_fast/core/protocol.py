"""Tool-call protocol validation."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from agentctx_fast.core._backend import core
from agentctx_fast.core.messages import AiMessage, Message, ToolMessage
from agentctx_fast.core.types import ProtocolViolation, ViolationKind
from agentctx_fast.errors import ToolProtocolError

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


def unanswered_calls(turn: Sequence[Message]) -> list[tuple[str, str]]:
    """``(tool_call_id, tool_name)`` of the calls in ``turn``, the messages of one turn, that
    have no result, in order. Scanned in order, as `validate_tool_protocol` pairs them: a
    result answers the open call with its id, so an id a later step reuses (models number
    calls per step) is not answered by the earlier step's result."""
    open_calls: dict[str, str] = {}
    for m in turn:
        if isinstance(m, AiMessage):
            for call in m.tool_calls:
                open_calls.setdefault(call.id, call.name)
        elif isinstance(m, ToolMessage):
            open_calls.pop(m.tool_call_id, None)
    return list(open_calls.items())


def close_unanswered_calls(
    turn: Sequence[Message],
    text: Callable[[str], str],
    *,
    id_prefix: str,
    turn_id: str | None = None,
) -> list[ToolMessage]:
    """An error result for each call of ``turn`` (the messages of one turn) left without one
    (``text(tool_call_id)``, ids ``{id_prefix}:closed:{index}``): a model API refuses a
    request whose calls have no results, so a turn the runner ends with calls it did not run,
    and the current turn of a window ``agentctx window --close-pending`` prints, get these.

    >>> from agentctx_fast import AiMessage, ToolCall
    >>> [closed] = close_unanswered_calls(
    ...     [AiMessage(tool_calls=(ToolCall("c1", "f", "{}"),))], lambda _: "not run", id_prefix="t"
    ... )
    >>> closed.tool_call_id, closed.text, closed.is_error, closed.message_id
    ('c1', 'not run', True, 't:closed:0')
    """
    return [
        ToolMessage(
            call_id,
            text(call_id),
            tool_name=tool_name,
            is_error=True,
            message_id=f"{id_prefix}:closed:{index}",
            turn_id=turn_id,
        )
        for index, (call_id, tool_name) in enumerate(unanswered_calls(turn))
    ]
