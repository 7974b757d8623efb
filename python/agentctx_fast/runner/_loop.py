"""The turn loop (SPEC §11, §17): model call, tool step, record, until the turn ends."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import partial

from agentctx_fast._tasks import Cancelled
from agentctx_fast.core.messages import AiMessage
from agentctx_fast.core.turns import TurnStatus
from agentctx_fast.errors import AgentCtxError, LeaseLostError
from agentctx_fast.runner._approvals import decide
from agentctx_fast.runner._observed import chat
from agentctx_fast.runner._persist import abandon, finish, lost, release, save, suspend
from agentctx_fast.runner._state import (
    Engine,
    LeaseLost,
    TurnRun,
    check_cancel,
    check_lease,
    checkpoint,
    together,
)
from agentctx_fast.runner._tools import call_tools
from agentctx_fast.runner._windows import observe_reply, window_for
from agentctx_fast.runner._writes import HeldResult, append, emit_result, store_result
from agentctx_fast.runner.agent import AgentTurn
from agentctx_fast.stores.turn_store import PendingApproval


async def drive(
    eng: Engine,
    run: TurnRun,
    pending: Sequence[PendingApproval] = (),
    decisions: Mapping[str, bool] | None = None,
    *,
    interrupted: bool = False,
) -> AgentTurn:
    """Drive ``run`` to its end: first a resume's ``decisions`` recorded, then an
    interrupted step finished (the last stored one: a resume that stopped after the
    model's next reply leaves one past the suspended step), then the loop. Whatever stops
    it, the turn is closed (or left to expire, when closing fails) and its lease freed or
    dropped."""
    if run.io.span is not None and eng.tracing is not None:
        eng.tracing.turn_started(run.io.span, len(run.history))
    try:
        try:
            if decisions is not None:
                waiting = await decide(eng, run, pending, decisions)
                check_cancel(run)
                if waiting:
                    return await suspend(eng, run, waiting)
            if interrupted:
                ended = await _continue_interrupted(eng, run)
                if ended is not None:
                    return ended
            return await _loop(eng, run)
        except (LeaseLost, LeaseLostError):
            raise lost(eng, run) from None
        except Cancelled:
            return await finish(eng, run, TurnStatus.CANCELLED, error="cancelled")
    except asyncio.CancelledError:
        # The task driving the turn was cancelled (the loop shutting down; a caller's
        # cancellation arrives as `Cancelled`): end the turn cancelled, its open calls
        # answered, the lease freed, then let the cancellation go on. A second
        # cancellation during that cleanup still frees the lease.
        run.io.cancelled = True
        try:
            await finish(eng, run, TurnStatus.CANCELLED, error="cancelled")
        except BaseException:
            await asyncio.shield(release(eng, run))
        raise
    except BaseException as error:
        await abandon(eng, run, error)
        raise


async def _continue_interrupted(eng: Engine, run: TurnRun) -> AgentTurn | None:
    """Finish the step the dead process was in; the turn's end if that ends it."""
    last = next((m for m in reversed(run.messages) if isinstance(m, AiMessage)), None)
    if last is None:
        return None  # it died before the first reply: the loop asks the model
    if not last.tool_calls:
        if run.messages[-1] is last:  # the final answer was stored, its record was not
            return await finish(eng, run, TurnStatus.COMPLETED, final=last)
        return None
    waiting, _ = await call_tools(eng, run, last, interrupted=True)
    check_cancel(run)
    if waiting:
        return await suspend(eng, run, waiting)
    return None


async def _loop(eng: Engine, run: TurnRun) -> AgentTurn:
    agent = run.agent
    while True:
        await checkpoint(eng, run)
        if run.steps >= agent.max_steps:
            return await finish(
                eng,
                run,
                TurnStatus.FAILED,
                error=f"max_steps reached: {agent.max_steps} model calls without a final answer",
            )
        try:
            window = await window_for(eng, run)
        except AgentCtxError as error:  # a compressor failure, typed
            await checkpoint(eng, run)  # a slow compressor may have outlived the lease
            return await finish(
                eng, run, TurnStatus.FAILED, error=f"window failed: {error}", exception=error
            )
        started = time.perf_counter()
        try:
            reply = await chat(eng, run, window)
        except Cancelled:
            raise
        except Exception as error:  # any model failure ends the turn, typed in `error`
            await checkpoint(eng, run)
            return await finish(
                eng,
                run,
                TurnStatus.FAILED,
                error=f"model failed: {type(error).__name__}: {error}",
                exception=error,
            )
        observe_reply(eng, run, window, reply, started)
        if not isinstance(reply, AiMessage):
            await check_lease(eng, run, ask=True)
            check_cancel(run)
            return await finish(
                eng,
                run,
                TurnStatus.FAILED,
                error=f"model returned {type(reply).__name__}, not an AiMessage",
            )
        ended, ai = await together(
            eng, run, "recording a reply", partial(_record_reply, eng, run, reply)
        )
        if ended is not None:
            return ended
        waiting, held = await call_tools(eng, run, ai, hold_last=True)
        if held is not None and not waiting:
            await _step_done(eng, run, held)
            continue
        # Some calls wait for approval (the reply has calls: `_record_reply` ended the turn
        # otherwise, and its last call either ran, and is held, or waits).
        if held is not None:
            await store_result(eng, run, held)
        check_cancel(run)  # a cancel during the step's last tool
        return await suspend(eng, run, waiting)


async def _record_reply(
    eng: Engine, run: TurnRun, reply: AiMessage
) -> tuple[AgentTurn | None, AiMessage]:
    """The model's reply stored, and the turn completed if it is the final answer (store
    calls only: `together` runs them as one unit)."""
    # Ask the server after every model call: a takeover drops the reply, and a cancel
    # from another process is seen before any tool runs or the turn completes.
    await check_lease(eng, run, ask=True)
    run.steps += 1
    ai = replace(reply, message_id=f"{run.turn_id}:ai:{run.steps}", turn_id=run.turn_id)
    await append(eng, run, ai)
    check_cancel(run)  # a cancelled reply stays on record; its calls never run
    if not ai.tool_calls:
        return await finish(eng, run, TurnStatus.COMPLETED, final=ai), ai
    return None, ai


async def _step_done(eng: Engine, run: TurnRun, held: HeldResult) -> None:
    """A step whose calls all ran: its last result stored and the turn's record saved as
    one unit of store I/O, then the result's event."""
    try:
        await together(eng, run, "recording a step", partial(_record_step, eng, run, held))
    finally:
        if run.messages and run.messages[-1] is held[0]:  # stored
            await emit_result(eng, run, held)


async def _record_step(eng: Engine, run: TurnRun, held: HeldResult) -> None:
    await store_result(eng, run, held, emit=False)
    check_cancel(run)  # a cancel during the step's last tool
    await save(eng, run, TurnStatus.RUNNING)
