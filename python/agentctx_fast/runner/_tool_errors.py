"""A tool that raised, as the runner reports it (SPEC §22): logged once with its context, and
told to the model in the agent's ``tool_error_formatter``'s words."""

from __future__ import annotations

from dataclasses import replace

from agentctx_fast.runner._state import TurnRun, log, log_context
from agentctx_fast.runner.tools import ToolOutcome


def reported(run: TurnRun, tool_name: str, call_id: str, outcome: ToolOutcome) -> ToolOutcome:
    """``outcome`` of the call ``call_id``; if the tool raised, the exception is logged (with
    its traceback: a service's own logs) and the text the model sees is the formatter's. A
    formatter that fails is logged too, and the model is told the exception's class only."""
    error = outcome.error
    if error is None:
        return outcome
    log.warning(
        "tool %r raised %s", tool_name, type(error).__name__,
        exc_info=error, extra=log_context(run, call_id),
    )  # fmt: skip
    formatter = run.agent.tool_error_formatter
    if formatter is None:
        return outcome
    try:
        text = formatter(error)
        if not isinstance(text, str):
            raise TypeError(f"it returned {type(text).__name__}, not a str")
    except Exception as failure:
        log.warning(
            "tool_error_formatter failed (%s: %s); the model is told the class only",
            type(failure).__name__, failure, extra=log_context(run, call_id),
        )  # fmt: skip
        text = f"tool {tool_name} failed: {type(error).__name__}"
    return replace(outcome, text=text)
