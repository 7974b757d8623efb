"""The turn loop's observed parts (SPEC §22): a turn's ``invoke_agent`` span and duration, and a
model call's ``chat`` span. With neither tracing nor metrics set they add one await."""

from __future__ import annotations

import time
from collections.abc import Coroutine
from typing import Any

from agentctx_fast.core.window import ContextWindow
from agentctx_fast.errors import AgentConversationBusyError
from agentctx_fast.observability import metrics as m
from agentctx_fast.runner._state import Engine, TurnIO, TurnRun
from agentctx_fast.runner.agent import Agent, AgentTurn


async def observed(
    eng: Engine,
    io: TurnIO,
    agent: Agent,
    conversation_id: str | None,
    turn_id: str,
    operation: str,
    work: Coroutine[Any, Any, AgentTurn],
) -> AgentTurn:
    """``await work``, a turn's operation, in its ``invoke_agent`` span when the runner
    traces, and timed as `m.TURN_DURATION_SECONDS` when it has a metrics hook (status
    ``error`` when it raised; a conversation found busy ran no turn and is not timed)."""
    tracing, metrics = eng.tracing, eng.metrics
    if tracing is None and metrics is None:
        return await work
    started = time.perf_counter()
    status: str | None = "error"
    try:
        if tracing is None:
            turn = await work
        else:
            with tracing.turn(agent, conversation_id, turn_id, operation) as span:
                io.span = span
                turn = await work
                tracing.turn_ended(span, turn)
        status = turn.status.value
        return turn
    except AgentConversationBusyError:
        status = None
        raise
    finally:
        if metrics is not None and status is not None:
            labels = {"agent": agent.name, "status": status}
            elapsed = time.perf_counter() - started
            if status != "error":
                metrics.record(m.TURN_DURATION_SECONDS, elapsed, labels)
            else:
                try:  # the turn's error goes on, whatever the sink does
                    metrics.record(m.TURN_DURATION_SECONDS, elapsed, labels)
                except Exception:
                    pass


async def chat(eng: Engine, run: TurnRun, window: ContextWindow) -> object:
    """The model's reply to ``window``, in a ``chat`` span when the runner traces."""
    agent = run.agent
    tracing = eng.tracing
    if tracing is None:
        return await run.io.chat(agent.chat_model, window.messages, agent.tools)
    with tracing.chat(agent, window) as span:
        reply = await run.io.chat(agent.chat_model, window.messages, agent.tools)
        tracing.replied(span, reply)
        return reply
