"""Starting a turn: its conversation taken (a dead turn holding it closed first), its record
and user message stored, and the loop driven; or a retried request's turn found."""

from __future__ import annotations

import uuid
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from agentctx_fast._ids import check_conversation_id
from agentctx_fast.core.messages import Message, UserMessage
from agentctx_fast.core.turns import TurnStatus
from agentctx_fast.errors import (
    AgentConversationBusyError,
    DuplicateMessageError,
    StoreBusyError,
    StoreUnavailableError,
    TurnStateError,
)
from agentctx_fast.runner._history import history, memory_of
from agentctx_fast.runner._leases import HeldLease
from agentctx_fast.runner._loop import drive
from agentctx_fast.runner._observed import observed
from agentctx_fast.runner._persist import abandon, recover, release
from agentctx_fast.runner._state import (
    Engine,
    TurnIO,
    TurnRun,
    check_turn_id,
    current_time,
    fence,
    timed,
    together,
    user_message,
    view,
)
from agentctx_fast.runner.agent import Agent, AgentTurn
from agentctx_fast.stores.turn_store import AgentTurnSnapshot, dump_snapshot


@dataclass(frozen=True, slots=True)
class _NewTurn:
    """What a new turn starts from: its first record, its user message, whether that message
    is the caller's own `UserMessage` (its id is checked then; a str's is made from the turn
    id) and whether the caller gave the turn id (a retried request finds its turn)."""

    snapshot: AgentTurnSnapshot
    user: UserMessage
    own_message: bool
    given: bool


class _TurnExists(TurnStateError):
    """A new turn's id is taken by a stored turn of the conversation (``found``, when it was
    read)."""

    def __init__(self, message: str, found: AgentTurnSnapshot | None = None) -> None:
        super().__init__(message)
        self.found = found


async def run(
    eng: Engine,
    io: TurnIO,
    agent: Agent,
    conversation_id: str,
    message: UserMessage | str,
    turn_id: str | None,
    metadata: Mapping[str, Any] | None,
) -> AgentTurn:
    check_conversation_id(conversation_id)
    given = turn_id is not None
    turn_id = uuid.uuid4().hex if turn_id is None else check_turn_id(turn_id)
    work = _run_new(eng, io, agent, conversation_id, message, turn_id, given, metadata)
    return await observed(eng, io, agent, conversation_id, turn_id, "run", work)


async def _run_new(
    eng: Engine,
    io: TurnIO,
    agent: Agent,
    conversation_id: str,
    message: UserMessage | str,
    turn_id: str,
    given: bool,
    metadata: Mapping[str, Any] | None,
) -> AgentTurn:
    """A new turn; with a ``given`` turn id that the conversation already has, that
    turn's current state instead (a retried request, SPEC §22): never a second turn."""
    memory = memory_of(eng, conversation_id)
    user = user_message(message, turn_id)
    now = eng.clock()
    snapshot = AgentTurnSnapshot(
        conversation_id,
        turn_id,
        agent.name,
        TurnStatus.RUNNING,
        message_ids=(user.message_id,),
        metadata=dict(metadata or {}),
        created_at=now,
        updated_at=now,
    )
    dump_snapshot(snapshot)  # refuse unserialisable metadata before taking the conversation
    run = TurnRun(io, agent, conversation_id, turn_id, memory, [], [user])
    try:
        return await _opened(
            eng, run, _NewTurn(snapshot, user, not isinstance(message, str), given)
        )
    except AgentConversationBusyError as error:
        if not given or error.turn_id != turn_id:
            raise  # another turn holds the conversation
        # the same request, sent twice at once: the first holds it
        existing = await eng.turn_store.load_turn(conversation_id, turn_id)
        if existing is None:
            raise  # not recorded yet: the conversation is busy with it
        return view(existing)
    except _TurnExists as exists:
        if not given:
            raise
        found = exists.found or await eng.turn_store.load_turn(conversation_id, turn_id)
        if found is None:
            raise
        return view(found)


async def _opened(eng: Engine, run: TurnRun, new: _NewTurn) -> AgentTurn:
    """The new turn's conversation taken, its record and user message stored, and the
    turn driven to its end."""
    io, agent, conversation_id = run.io, run.agent, new.snapshot.conversation_id
    try:
        stale = await together(eng, run, "opening a turn", partial(_open_turn, eng, run, new))
        if run.lease is not None:
            eng.keeper.keep(run.lease)
        if stale is not None:
            assert run.memory is not None  # ``memory``, fenced
            await recover(
                eng, io, run.memory, conversation_id, stale, agent, run.fence, run.turn_id
            )
            await together(eng, run, "opening a turn", partial(_start_turn, eng, run, new))
    except _TurnExists:
        await release(eng, run)  # its record is another turn's: nothing to close
        raise
    except BaseException as error:
        if run.lease is not None:  # the conversation was taken: close the turn, free it
            await abandon(eng, run, error)
        raise
    return await drive(eng, run)


async def _open_turn(eng: Engine, run: TurnRun, new: _NewTurn) -> str | None:
    """The conversation taken for a new turn (`AgentConversationBusyError` if another turn
    holds it) and, unless a turn whose process died held it (its id is returned, to be
    closed first), the turn started (store calls only: `together` runs them as one unit).
    A given turn id is looked up first: `_TurnExists` if the conversation has it.
    """
    owner = uuid.uuid4().hex
    snapshot = new.snapshot
    conversation_id, turn_id = snapshot.conversation_id, snapshot.turn_id
    if new.given:
        found = await timed(
            eng, run, "load_turn", eng.turn_store.load_turn(conversation_id, turn_id)
        )
        if found is not None:
            raise _TurnExists(f"turn {turn_id!r} already exists", found)

    def acquire() -> Coroutine[Any, Any, str | None]:
        return timed(
            eng,
            run,
            "acquire",
            eng.turn_store.acquire_conversation(
                conversation_id, turn_id, owner, eng.lease_seconds, snapshot.created_at
            ),
        )

    try:
        stale = await acquire()
    except StoreBusyError:
        raise  # it waited its whole bound, and was not applied: the caller retries later
    except StoreUnavailableError:
        # Sent once more: if the first call took the lease (its reply lost), this one
        # finds it taken by this owner and says which expired turn it took over, which
        # must be closed; otherwise that turn would stay open with no lease.
        stale = await acquire()
    run.lease = HeldLease(conversation_id, turn_id, owner, current_time(eng, run))
    fence(run, owner)
    if stale is None:
        await _start_turn(eng, run, new)
    return stale


async def _start_turn(eng: Engine, run: TurnRun, new: _NewTurn) -> None:
    """A new turn's record, its history read and its user message stored, under its lease
    (store calls only)."""
    snapshot, user = new.snapshot, new.user
    conversation_id, turn_id = snapshot.conversation_id, snapshot.turn_id
    memory = run.memory
    assert memory is not None
    # Under the lease only a caller error stores a turn's user message id before the
    # turn: a caller's own UserMessage is checked here, before anything is written; a
    # str gets an id made from the turn id, and a reused turn id is refused by
    # save_turn (or, with an in-process turn store, by add_message_if_absent below).
    if new.own_message and (await memory.get_message(user.message_id)) is not None:
        raise DuplicateMessageError(
            f"message {user.message_id!r} is already stored in conversation "
            f"{conversation_id!r}: a new turn needs a new user message"
        )
    # Known from here on as saved: if the save's reply is lost, closing the turn finds the
    # record (or, if it was never written, the lease is left to expire: `abandon`).
    run.snapshot = replace(snapshot, version=1)
    if not await timed(eng, run, "save_turn", eng.turn_store.save_turn(snapshot, 0, run.fence)):
        run.snapshot = None  # another turn's record
        raise _TurnExists(f"turn {turn_id!r} already exists")
    run.history = await timed(
        eng,
        run,
        "read_history",
        history(eng, run.agent, memory, conversation_id, current_stored=False),
    )
    if not await timed(eng, run, "append", memory.add_message_if_absent(user)):
        raise DuplicateMessageError(
            f"message {user.message_id!r} is already stored in conversation "
            f"{conversation_id!r}: the turn id was used before, or another writer "
            "stored it"
        )


async def run_history(
    eng: Engine, io: TurnIO, agent: Agent, history: list[Message], message: UserMessage | str
) -> AgentTurn:
    turn_id = uuid.uuid4().hex
    user = user_message(message, turn_id)
    work = drive(eng, TurnRun(io, agent, None, turn_id, None, history, [user]))
    return await observed(eng, io, agent, None, turn_id, "run_history", work)
