"""Taking a stored turn back: resuming it (after approvals, or after its process died),
cancelling it, or reading it."""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from agentctx_fast._ids import check_conversation_id
from agentctx_fast.core.messages import AiMessage
from agentctx_fast.core.turns import TurnStatus
from agentctx_fast.errors import AgentConversationBusyError, InvalidArgumentError, TurnStateError
from agentctx_fast.memory import AsyncChatMemory
from agentctx_fast.runner._approvals import check_approvals
from agentctx_fast.runner._history import load, memory_of, split_turn
from agentctx_fast.runner._loop import drive
from agentctx_fast.runner._observed import observed
from agentctx_fast.runner._persist import abandon, finish, recover
from agentctx_fast.runner._state import Engine, TurnIO, TurnRun, agent_stub, fence, timed, view
from agentctx_fast.runner.agent import Agent, AgentTurn
from agentctx_fast.stores.turn_store import OPEN_STATUSES, AgentTurnSnapshot


async def resume(
    eng: Engine,
    io: TurnIO,
    agent: Agent,
    conversation_id: str,
    turn_id: str,
    approvals: Mapping[str, bool] | None,
) -> AgentTurn:
    check_conversation_id(conversation_id)

    async def work() -> AgentTurn:
        snapshot = await load(eng, conversation_id, turn_id)
        return await _resume_stored(eng, io, agent, snapshot, approvals)

    return await observed(eng, io, agent, conversation_id, turn_id, "resume", work())


async def _resume_stored(
    eng: Engine,
    io: TurnIO,
    agent: Agent,
    snapshot: AgentTurnSnapshot,
    approvals: Mapping[str, bool] | None,
) -> AgentTurn:
    """Resume the stored turn ``snapshot`` (see `AgentRunner.resume`)."""
    conversation_id, turn_id = snapshot.conversation_id, snapshot.turn_id
    if snapshot.status is TurnStatus.RUNNING:
        # The same approvals again (a retry after a resume whose reply was lost) find them
        # recorded: the turn goes on as an interrupted one.
        if approvals and any(
            snapshot.decisions.get(call_id) != decision
            for call_id, decision in dict(approvals).items()
        ):
            raise InvalidArgumentError(f"turn {turn_id!r} is running, not waiting for approvals")
        try:
            return await _resume_interrupted(eng, io, agent, conversation_id, snapshot)
        except AgentConversationBusyError as error:
            if not approvals:
                raise
            raise TurnStateError(  # the other of two resumes (SPEC §20)
                f"turn {turn_id!r} is no longer suspended: resumed elsewhere, still running"
            ) from error
    if snapshot.status is not TurnStatus.SUSPENDED:
        raise TurnStateError(f"turn {turn_id!r} is {snapshot.status.value}, not suspended")
    if approvals is None:
        raise InvalidArgumentError(
            f"turn {turn_id!r} is suspended: resume it with approvals "
            "({tool_call_id: True | False})"
        )
    decisions = check_approvals(approvals, snapshot)
    memory = memory_of(eng, conversation_id)
    owner = uuid.uuid4().hex
    # A compare-and-set on the record's version read above: of two resumes of one
    # suspension, one takes it; the other changes nothing (SPEC §20).
    if not await eng.turn_store.reacquire_conversation(
        conversation_id, turn_id, owner, eng.lease_seconds, eng.clock(), snapshot.version
    ) and not await _take_stranded(eng, snapshot, owner):
        raise TurnStateError(
            f"turn {turn_id!r} is no longer suspended: resumed or cancelled elsewhere"
        )
    run = await _reopened(eng, io, agent, memory, snapshot, owner)
    # A reply stored past the record's steps: a resume of this suspension stopped after the
    # model's next reply (its record still the suspended one). Its later steps continue as
    # an interrupted turn's, once the decisions are recorded.
    later = _count_stored_steps(run)
    return await drive(eng, run, snapshot.pending_approvals, decisions, interrupted=later)


async def _take_stranded(eng: Engine, snapshot: AgentTurnSnapshot, owner: str) -> bool:
    """Take a suspended turn whose last resume took it back and stopped (a lost reply, a
    dead process) before its record changed: once that lease expires, as an interrupted
    turn is. True when taken; the record is still the one read (else it is let go)."""
    conversation_id, turn_id = snapshot.conversation_id, snapshot.turn_id
    now = eng.clock()
    lease = await eng.turn_store.open_turn(conversation_id)
    if (
        lease is None
        or lease.turn_id != turn_id
        or lease.status is not TurnStatus.RUNNING
        or not lease.expired(now)
    ):
        return False
    try:
        if await _retake(eng, snapshot, owner, now) == turn_id:
            return True
    except TurnStateError:
        return False
    await eng.turn_store.release_conversation(conversation_id, turn_id, owner, now)
    return False


async def _retake(eng: Engine, snapshot: AgentTurnSnapshot, owner: str, now: float) -> str | None:
    """The conversation taken for the stored turn ``snapshot`` once the lease on it has
    expired (`AgentConversationBusyError` while it lives); the id of the expired turn
    taken over. If the record changed since it was read (another process closed or
    continued the turn), the lease is let go and `TurnStateError` raised."""
    conversation_id, turn_id = snapshot.conversation_id, snapshot.turn_id
    stale = await eng.turn_store.acquire_conversation(
        conversation_id, turn_id, owner, eng.lease_seconds, now
    )
    current = await eng.turn_store.load_turn(conversation_id, turn_id)
    if current is None or current.version != snapshot.version:
        await eng.turn_store.release_conversation(conversation_id, turn_id, owner, now)
        raise TurnStateError(f"turn {turn_id!r} changed while it was being resumed")
    return stale


async def _resume_interrupted(
    eng: Engine, io: TurnIO, agent: Agent, conversation_id: str, snapshot: AgentTurnSnapshot
) -> AgentTurn:
    """Continue a `RUNNING` turn whose process died, from its last stored step, once its
    lease has expired (a live lease raises `AgentConversationBusyError`)."""
    memory = memory_of(eng, conversation_id)
    owner = uuid.uuid4().hex
    stale = await _retake(eng, snapshot, owner, eng.clock())
    stale = None if stale == snapshot.turn_id else stale
    run = await _reopened(eng, io, agent, memory, snapshot, owner, stale)
    _count_stored_steps(run)
    return await drive(eng, run, interrupted=True)


def _count_stored_steps(run: TurnRun) -> bool:
    """Count the turn's stored replies in its steps: messages stored after its record
    count too (a reply is one step), so the next reply's id follows them. True when
    there were such replies."""
    replies = sum(isinstance(message, AiMessage) for message in run.messages)
    later = replies > run.steps
    run.steps = max(run.steps, replies)
    return later


async def _reopened(
    eng: Engine,
    io: TurnIO,
    agent: Agent,
    memory: AsyncChatMemory,
    snapshot: AgentTurnSnapshot,
    owner: str,
    stale: str | None = None,
) -> TurnRun:
    """A stored turn taken back by ``owner``: its history and its own messages read (after
    closing ``stale``, another turn whose process died holding the lease)."""
    conversation_id, turn_id = snapshot.conversation_id, snapshot.turn_id
    lease = eng.keeper.hold(conversation_id, turn_id, owner)
    run = TurnRun(
        io, agent, conversation_id, turn_id, memory, [], [], snapshot, lease,
        snapshot.step_count, dict(snapshot.decisions),
    )  # fmt: skip
    fence(run, owner)
    try:
        if stale is not None:
            assert run.memory is not None  # ``memory``, fenced
            await recover(eng, io, run.memory, conversation_id, stale, agent, run.fence, turn_id)
        run.history, run.messages = await timed(
            eng, run, "read_history", split_turn(eng, agent, memory, snapshot)
        )
    except BaseException as error:
        await abandon(eng, run, error, read_turn=True)
        raise
    return run


async def cancel(
    eng: Engine, io: TurnIO, conversation_id: str, turn_id: str, *, again: bool = True
) -> AgentTurn:
    check_conversation_id(conversation_id)
    snapshot = await load(eng, conversation_id, turn_id)
    now = eng.clock()
    if snapshot.status not in OPEN_STATUSES:
        lease = await eng.turn_store.open_turn(conversation_id)
        if lease is not None and lease.turn_id == turn_id and lease.expired(now):
            # the turn ended but its lease was never released (a lost reply): free it
            await eng.turn_store.release_conversation(conversation_id, turn_id, None, now)
            return view(snapshot)
        raise TurnStateError(f"turn {turn_id!r} is {snapshot.status.value}, not open")
    held = eng.keeper.find(conversation_id, turn_id)
    if held is not None:
        held.cancel.set()
        return view(snapshot)
    lease = await eng.turn_store.open_turn(conversation_id)
    owner = uuid.uuid4().hex
    if lease is not None and lease.turn_id == turn_id:
        if lease.status == TurnStatus.RUNNING and not lease.expired(now):
            if await eng.turn_store.request_cancel(conversation_id, turn_id, now) or not again:
                return view(snapshot)
            # not flagged: since it was read, the turn suspended, ended or lost its lease;
            # a RUNNING answer would promise a cancel nobody makes, so look again
            return await cancel(eng, io, conversation_id, turn_id, again=False)
        if lease.status == TurnStatus.SUSPENDED:
            taken = await eng.turn_store.reacquire_conversation(
                conversation_id, turn_id, owner, eng.lease_seconds, now, snapshot.version
            )
        else:
            taken = (
                await eng.turn_store.acquire_conversation(
                    conversation_id, turn_id, owner, eng.lease_seconds, now
                )
                == turn_id
            )
        if not taken:
            raise TurnStateError(f"turn {turn_id!r} changed while it was being cancelled")
    else:
        owner = ""  # the lease is gone (or another turn took it over): close the record only
    memory = memory_of(eng, conversation_id)
    run = TurnRun(io, agent_stub(snapshot), conversation_id, turn_id, memory, [], [], snapshot)
    run.steps = snapshot.step_count
    if owner:
        fence(run, owner)
    # If closing fails, the lease taken here is left to expire: the next run or cancel
    # takes it over and closes the turn (a freed lease would leave it open for good).
    if owner:
        run.history, run.messages = await split_turn(eng, None, memory, snapshot, missing_ok=True)
    turn = await finish(eng, run, TurnStatus.CANCELLED, error="cancelled", close_calls=bool(owner))
    if owner:
        await eng.turn_store.release_conversation(conversation_id, turn_id, owner, now)
    return turn


async def turn(eng: Engine, conversation_id: str, turn_id: str) -> AgentTurn:
    check_conversation_id(conversation_id)
    return view(await load(eng, conversation_id, turn_id))
