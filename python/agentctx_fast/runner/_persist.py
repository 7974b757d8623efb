"""A turn's record: its snapshots, ending the turn, and closing a turn whose process died."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import partial

from agentctx_fast._reads import NEWEST_TURN, read_history
from agentctx_fast.core.messages import AiMessage, Message
from agentctx_fast.core.turns import TurnStatus
from agentctx_fast.errors import LeaseLostError, StoreBusyError, StoreError, TurnStateError
from agentctx_fast.memory import AsyncChatMemory
from agentctx_fast.observability import metrics as m
from agentctx_fast.runner._io import AsyncTurnIO, BlockingTurnIO
from agentctx_fast.runner._state import (
    Engine,
    TurnIO,
    TurnRun,
    agent_stub,
    check_cancel,
    check_lease,
    current_time,
    is_stub,
    log,
    log_context,
    observe,
    remember_reach,
    remember_status,
    timed,
    together,
)
from agentctx_fast.runner._writes import answer_calls, close_forms
from agentctx_fast.runner.agent import Agent, AgentTurn
from agentctx_fast.runner.events import ApprovalRequired
from agentctx_fast.stores.turn_store import (
    OPEN_STATUSES,
    AgentTurnSnapshot,
    Fence,
    PendingApproval,
    dump_snapshot,
)


async def save(
    eng: Engine,
    run: TurnRun,
    status: TurnStatus,
    *,
    pending: Sequence[PendingApproval] = (),
    final: AiMessage | None = None,
    error: str | None = None,
) -> None:
    if run.snapshot is None:
        return
    snapshot = replace(
        run.snapshot,
        status=status,
        step_count=run.steps,
        message_ids=tuple(msg.message_id for msg in run.messages)
        if run.messages
        else run.snapshot.message_ids,
        pending_tool_calls=tuple(
            call
            for msg in run.messages
            if isinstance(msg, AiMessage)
            for call in msg.tool_calls
            if any(p.tool_call_id == call.id for p in pending)
        ),
        pending_approvals=tuple(pending),
        decisions=dict(run.decisions),
        final_message_id=None if final is None else final.message_id,
        error=error,
        updated_at=current_time(eng, run),
    )
    saving = eng.turn_store.save_turn(snapshot, run.snapshot.version, run.fence)
    if not await timed(eng, run, "save_turn", saving):
        raise TurnStateError(f"turn {run.turn_id!r} was changed by another process")
    run.snapshot = replace(snapshot, version=run.snapshot.version + 1)
    if run.conversation_id is not None:  # the next turn's window need not ask for it
        remember_status(eng, run.conversation_id, run.turn_id, status)
    if eng.metrics is not None:
        observe(eng, run, m.SNAPSHOT_BYTES, len(dump_snapshot(snapshot)), {"agent": run.agent.name})


async def record_started(eng: Engine, run: TurnRun, call_ids: list[str]) -> None:
    """SPEC §20: the calls of non-idempotent tools about to run (one step's, or one
    resume's approved calls) recorded as started in the turn's snapshot, one write before
    the first of them runs. A turn interrupted after that answers them "may have run"; this
    process, which knows which of them it never invoked, answers those "not run"."""
    if not call_ids:
        return
    run.not_started.update(call_ids)
    if run.snapshot is None:
        return
    recorded = run.snapshot.started_tool_calls
    if recorded is not None:  # None (a record older than the field) stays: unknown
        run.snapshot = replace(run.snapshot, started_tool_calls=(*recorded, *call_ids))
    await save(eng, run, TurnStatus.RUNNING)


async def suspend(eng: Engine, run: TurnRun, waiting: list[PendingApproval]) -> AgentTurn:
    """The turn's record saved suspended and its conversation marked so, as one unit of
    store I/O, then the `ApprovalRequired` event."""
    await together(eng, run, "suspending a turn", partial(_record_suspension, eng, run, waiting))
    await run.io.emit(ApprovalRequired(tuple(waiting)))
    return _result(eng, run, TurnStatus.SUSPENDED, pending=tuple(waiting))


async def _record_suspension(eng: Engine, run: TurnRun, waiting: list[PendingApproval]) -> None:
    """The suspended record and the conversation marked suspended, the lease no longer
    renewed (store calls only: `together` runs them as one unit). The server is asked
    first: a cancel another process requested during the step's tools (acknowledged to its
    caller) ends the turn cancelled; marking the conversation suspended would drop it."""
    await check_lease(eng, run, ask=True)
    check_cancel(run)
    await save(eng, run, TurnStatus.SUSPENDED, pending=waiting)
    if run.lease is not None:
        eng.keeper.drop(run.lease)
        await timed(
            eng,
            run,
            "suspend",
            eng.turn_store.suspend_conversation(
                run.lease.conversation_id, run.turn_id, run.lease.owner
            ),
        )


async def finish(
    eng: Engine,
    run: TurnRun,
    status: TurnStatus,
    *,
    final: AiMessage | None = None,
    error: str | None = None,
    close_calls: bool = True,
    exception: BaseException | None = None,
    logged: bool = False,
) -> AgentTurn:
    """End the turn with ``status``. A failed or cancelled turn is logged here, once,
    unless the caller has (``logged``); ``exception`` is the failure's, for the caller
    (`AgentTurn.exception`)."""
    if not logged and status is TurnStatus.FAILED:
        log.warning(
            "turn failed: %s", error, exc_info=exception, extra=log_context(run)
        )  # the exception's traceback, when there is one, is the model's or compressor's
    elif not logged and status is TurnStatus.CANCELLED:
        log.info("turn cancelled", extra=log_context(run))
    if close_calls and status is not TurnStatus.COMPLETED:
        await close_forms(run, status.value)
        await answer_calls(eng, run, f"not run: the turn ended {status.value} ({error})")
    await save(eng, run, status, final=final, error=error)
    observe(eng, run, m.TURN_STEPS, run.steps, {"agent": run.agent.name, "status": status.value})
    if run.lease is not None:
        eng.keeper.drop(run.lease)
        releasing = eng.turn_store.release_conversation(
            run.lease.conversation_id, run.turn_id, run.lease.owner, current_time(eng, run)
        )
        await timed(eng, run, "release", releasing)
    return _result(eng, run, status, final=final, error=error, exception=exception)


def lost(eng: Engine, run: TurnRun) -> LeaseLostError:
    """Another process took the expired lease over: this runner writes nothing more and
    the turn is left to the new holder (or to ``resume``)."""
    if run.lease is not None:
        eng.keeper.drop(run.lease)
    return LeaseLostError(
        f"turn {run.turn_id!r}: lease lost: the turn ran longer than its lease and "
        "another runner took the conversation; nothing more was written"
    )


async def abandon(
    eng: Engine, run: TurnRun, error: BaseException, *, read_turn: bool = False
) -> None:
    """An unexpected ``error`` (a store failure, a metrics sink's) left the loop: stop
    renewing the lease and try to close the turn now if the store answers (which frees
    the conversation). If its record may still be open (closing it failed: a lost reply,
    a store down), the lease is left to expire, so the next run takes it over and closes
    the turn (a freed lease would leave a running record nobody closes).
    ``read_turn``: the error came before the turn's own messages were read (a resume
    taking the turn back), so they are read first (after any store error too): closing it
    answers its open calls and forms, or, if that read fails too, the turn is not closed
    at all."""
    if run.lease is not None:
        eng.keeper.drop(run.lease)
    if isinstance(error, LeaseLostError):  # the turn is left to the new holder
        log.warning(
            "lease lost: another runner took the conversation over; this one writes "
            "nothing more", extra=log_context(run),
        )  # fmt: skip
    else:
        log.error(
            "turn failed: the runner stopped on an error: %s: %s", type(error).__name__,
            error, exc_info=error, extra=log_context(run),
        )  # fmt: skip
    if run.snapshot is None and isinstance(error, StoreError):
        return  # a taken-over turn's closing may be half done: the next run finishes it
    if isinstance(error, StoreBusyError):
        return  # each write would wait as long again: the next run closes the turn
    try:
        if run.snapshot is not None and run.snapshot.status in OPEN_STATUSES:
            # after a store error the store may hold more than this run saw (a write whose
            # reply was lost): the turn is closed as stored
            if (read_turn or isinstance(error, StoreError)) and run.memory is not None:
                tail = await _turn_tail(run.memory, run.snapshot)
                run.messages = [msg for msg in tail if msg.turn_id == run.turn_id]
            stopped = f"the runner stopped on an error: {type(error).__name__}"
            await finish(eng, run, TurnStatus.FAILED, error=stopped, logged=True)
    except Exception:
        if await _may_be_open(eng, run):
            return  # its lease expires and the next run takes it over and closes it
    await release(eng, run)


async def _may_be_open(eng: Engine, run: TurnRun) -> bool:
    """Whether the turn's record may still be open (after closing it failed: it may have
    been closed all the same, its reply lost)."""
    if run.conversation_id is None:
        return False
    try:
        stored = await eng.turn_store.load_turn(run.conversation_id, run.turn_id)
    except Exception:
        return True
    return stored is not None and stored.status in OPEN_STATUSES


async def release(eng: Engine, run: TurnRun) -> None:
    """Stop renewing this runner's lease and free the conversation, if the store answers
    (otherwise the lease expires)."""
    if run.lease is None:
        return
    eng.keeper.drop(run.lease)
    try:
        await eng.turn_store.release_conversation(
            run.lease.conversation_id, run.turn_id, run.lease.owner, eng.clock()
        )
    except Exception:
        pass


async def recover(
    eng: Engine,
    io: TurnIO,
    memory: AsyncChatMemory,
    conversation_id: str,
    stale_id: str,
    agent: Agent,
    fence: Fence | None,
    opening: str | None = None,
) -> None:
    """Close a turn whose process died holding the lease: error results for its open
    calls, and its snapshot `FAILED`; ``memory`` and ``fence`` are those of the runner
    that took the lease over, whose writes these are. ``opening``: the turn the caller
    opens, when it is ``stale`` itself (a retry of a run that never started): it is not
    recorded `FAILED`, only what it left open is closed."""
    snapshot = await eng.turn_store.load_turn(conversation_id, stale_id)
    if snapshot is not None and snapshot.status not in OPEN_STATUSES:
        return  # it finished; only the release was lost
    log.warning(
        "turn failed: the process running it stopped (its lease expired); closing it",
        extra={"conversation_id": conversation_id, "turn_id": stale_id},
    )
    if snapshot is None:
        # It never started: it may have stopped while closing the expired turn it had
        # taken over, which its lease named and this lease no longer does. Every turn is
        # started only once the one before it is closed, so that turn, if any is open, is
        # the newest turn stored.
        await _recover_newest(eng, io, memory, conversation_id, (stale_id, opening), agent, fence)
        if stale_id == opening:
            return
        snapshot = AgentTurnSnapshot(
            conversation_id, stale_id, agent.name, TurnStatus.RUNNING,
            created_at=eng.clock(),
        )  # fmt: skip
    quiet = BlockingTurnIO() if isinstance(io, BlockingTurnIO) else AsyncTurnIO()
    run = TurnRun(
        quiet, agent_stub(snapshot), conversation_id, stale_id, memory, [], [], snapshot
    )  # another turn's closing results are not events of the turn being streamed
    run.fence = fence
    run.steps = snapshot.step_count
    tail = await _turn_tail(memory, snapshot)
    run.messages = [msg for msg in tail if msg.turn_id == stale_id]
    await close_forms(run, "expired")
    await answer_calls(eng, run, "not run: the process running the turn stopped (lease expired)")
    if snapshot.version == 0:
        run.snapshot = None
        await eng.turn_store.save_turn(
            replace(snapshot, status=TurnStatus.FAILED, error="lease expired"), 0, fence
        )
        return
    try:
        await save(
            eng, run, TurnStatus.FAILED, error="lease expired: the process running it stopped"
        )
    except TurnStateError:
        pass  # another process recorded it first


async def _recover_newest(
    eng: Engine,
    io: TurnIO,
    memory: AsyncChatMemory,
    conversation_id: str,
    skipped: tuple[str, str | None],
    agent: Agent,
    fence: Fence | None,
) -> None:
    """Close the newest stored turn if its record is still open (see `recover`), unless
    it is one of ``skipped`` (the turn being closed, the one being opened)."""
    tail, _ = await read_history(memory, NEWEST_TURN)
    newest = next((m.turn_id for m in reversed(tail) if m.turn_id), None)
    if newest is None or newest in skipped:
        return
    earlier = await eng.turn_store.load_turn(conversation_id, newest)
    if earlier is not None and earlier.status in OPEN_STATUSES:
        await recover(eng, io, memory, conversation_id, newest, agent, fence)


def _result(
    eng: Engine,
    run: TurnRun,
    status: TurnStatus,
    *,
    final: AiMessage | None = None,
    error: str | None = None,
    pending: tuple[PendingApproval, ...] = (),
    exception: BaseException | None = None,
) -> AgentTurn:
    if run.memory is not None and run.conversation_id is not None and not is_stub(run.agent):
        # the next turn's first read then asks for this turn as well, not a guess of it
        # (a turn closed by `cancel` or recovery read its own span, not a window's)
        remember_reach(eng, run.conversation_id, len(run.history) + len(run.messages))
    return AgentTurn(
        run.turn_id, run.conversation_id, status, tuple(run.messages), final, error,
        pending, run.steps, exception,
    )  # fmt: skip


async def _turn_tail(memory: AsyncChatMemory, snapshot: AgentTurnSnapshot) -> list[Message]:
    """The newest turn's messages, reaching back to the snapshot's first message."""
    tail, _ = await read_history(
        memory,
        NEWEST_TURN,
        must_include=snapshot.message_ids[0] if snapshot.message_ids else None,
    )
    return tail
