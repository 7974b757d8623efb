"""The turn loop, written once (SPEC §11, §17): both runners drive it through an I/O port.

Each model call gets a freshly built window over the conversation. The loop reads the history
page by page only as far back as a window can reach, keeps this turn's messages as it writes
them (``add_message_if_absent``, with ids derived from the turn id, so a retried write is
harmless), and never calls ``clear()``. A turn holds its conversation through a lease in the
store: a second ``run`` meets `AgentConversationBusyError`, and a crashed process's lease
expires, after which the next ``run`` closes the crashed turn as `FAILED`.

`AgentRunner` drives it with blocking stores and a blocking port (every await completes at
once, see `agentctx_fast._sync`); `AsyncAgentRunner` with async stores and a port that awaits.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any

from agentctx_fast.agent import Agent, AgentTurn
from agentctx_fast.coordinator import AsyncAgentContextCompressionStateStore
from agentctx_fast.errors import (
    AgentConversationBusyError,
    AgentCtxError,
    DuplicateMessageError,
    InvalidArgumentError,
    LeaseLostError,
    StoreBusyError,
    StoreUnavailableError,
    TurnStateError,
)
from agentctx_fast.memory import AsyncChatMemory
from agentctx_fast.messages import AiMessage, Message, UserMessage
from agentctx_fast.metrics import AgentMetrics
from agentctx_fast.runner._io import Cancelled
from agentctx_fast.runner._leases import HeldLease, LeaseKeeper
from agentctx_fast.runner._observed import Observed
from agentctx_fast.runner._persist import Persistence
from agentctx_fast.runner._reads import HistoryReads
from agentctx_fast.runner._state import (
    LeaseLost,
    TurnIO,
    TurnRun,
    agent_stub,
    check_approvals,
    check_turn_id,
    fence,
    user_message,
    view,
)
from agentctx_fast.runner._tools import HeldResult
from agentctx_fast.runner._windows import WindowBuilding
from agentctx_fast.stores._common import check_conversation_id
from agentctx_fast.stores.turns import (
    OPEN_STATUSES,
    AgentTurnSnapshot,
    AsyncAgentTurnStore,
    PendingApproval,
    dump_snapshot,
)
from agentctx_fast.turns import TurnStatus

if TYPE_CHECKING:
    from agentctx_fast.otel import OtelTracing


class _TurnExists(TurnStateError):
    """A new turn's id is taken by a stored turn of the conversation (``found``, when it was
    read)."""

    def __init__(self, message: str, found: AgentTurnSnapshot | None = None) -> None:
        super().__init__(message)
        self.found = found


class TurnEngine(Persistence, HistoryReads, WindowBuilding, Observed):
    """The one implementation of a runner's operations, over async views of its stores."""

    def __init__(
        self,
        provider: Callable[[str], AsyncChatMemory] | None,
        turn_store: AsyncAgentTurnStore,
        states: AsyncAgentContextCompressionStateStore,
        keeper: LeaseKeeper,
        lease_seconds: float,
        clock: Callable[[], float],
        metrics: AgentMetrics | None,
        tracing: OtelTracing | None = None,
        store_name: str = "none",
    ) -> None:
        self._provider = provider
        self.turn_store = turn_store
        self._states = states
        self._status_cache = OrderedDict()
        self._summaries = OrderedDict()
        self._reach = OrderedDict()
        self._caches_lock = threading.Lock()
        self._keeper = keeper
        self._lease_seconds = lease_seconds
        self._clock = clock
        self._metrics = metrics
        self._tracing = tracing
        self._store_name = store_name

    # -- operations -------------------------------------------------------------------------

    async def run(
        self,
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
        work = self._run(io, agent, conversation_id, message, turn_id, given, metadata)
        return await self._observed(io, agent, conversation_id, turn_id, "run", work)

    async def _run(
        self,
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
        memory = self._memory(conversation_id)
        user = user_message(message, turn_id)
        now = self._clock()
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
            return await self._opened(run, snapshot, user, message, given)
        except AgentConversationBusyError as error:
            if not given or error.turn_id != turn_id:
                raise  # another turn holds the conversation
            # the same request, sent twice at once: the first holds it
            existing = await self.turn_store.load_turn(conversation_id, turn_id)
            if existing is None:
                raise  # not recorded yet: the conversation is busy with it
            return view(existing)
        except _TurnExists as exists:
            if not given:
                raise
            found = exists.found or await self.turn_store.load_turn(conversation_id, turn_id)
            if found is None:
                raise
            return view(found)

    async def _opened(
        self,
        run: TurnRun,
        snapshot: AgentTurnSnapshot,
        user: UserMessage,
        message: UserMessage | str,
        given: bool,
    ) -> AgentTurn:
        """The new turn's conversation taken, its record and user message stored, and the
        turn driven to its end."""
        io, agent, conversation_id = run.io, run.agent, snapshot.conversation_id
        try:
            stale = await self._together(
                run, "opening a turn", partial(self._open, run, snapshot, user, message, given)
            )
            if run.lease is not None:
                self._keeper.keep(run.lease)
            if stale is not None:
                assert run.memory is not None  # ``memory``, fenced
                await self._recover(
                    io, run.memory, conversation_id, stale, agent, run.fence, run.turn_id
                )
                await self._together(
                    run, "opening a turn", partial(self._start, run, snapshot, user, message)
                )
        except _TurnExists:
            await self._release(run)  # its record is another turn's: nothing to close
            raise
        except BaseException as error:
            if run.lease is not None:  # the conversation was taken: close the turn, free it
                await self._abandon(run, error)
            raise
        return await self._drive(run)

    async def _open(
        self,
        run: TurnRun,
        snapshot: AgentTurnSnapshot,
        user: UserMessage,
        message: UserMessage | str,
        given: bool,
    ) -> str | None:
        """The conversation taken for a new turn (`AgentConversationBusyError` if another turn
        holds it) and, unless a turn whose process died held it (its id is returned, to be
        closed first), the turn started (store calls only: `_together` runs them as one unit).
        A ``given`` turn id is looked up first: `_TurnExists` if the conversation has it.
        """
        owner = uuid.uuid4().hex
        conversation_id, turn_id = snapshot.conversation_id, snapshot.turn_id
        if given:
            found = await self._timed(
                run, "load_turn", self.turn_store.load_turn(conversation_id, turn_id)
            )
            if found is not None:
                raise _TurnExists(f"turn {turn_id!r} already exists", found)

        def acquire() -> Coroutine[Any, Any, str | None]:
            return self._timed(
                run,
                "acquire",
                self.turn_store.acquire_conversation(
                    conversation_id, turn_id, owner, self._lease_seconds, snapshot.created_at
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
        run.lease = HeldLease(conversation_id, turn_id, owner, self._now(run))
        fence(run, owner)
        if stale is None:
            await self._start(run, snapshot, user, message)
        return stale

    async def _start(
        self,
        run: TurnRun,
        snapshot: AgentTurnSnapshot,
        user: UserMessage,
        message: UserMessage | str,
    ) -> None:
        """A new turn's record, its history read and its user message stored, under its lease
        (store calls only)."""
        conversation_id, turn_id = snapshot.conversation_id, snapshot.turn_id
        memory = run.memory
        assert memory is not None
        # Under the lease only a caller error stores a turn's user message id before the
        # turn: a caller's own UserMessage is checked here, before anything is written; a
        # str gets an id made from the turn id, and a reused turn id is refused by
        # save_turn (or, with an in-process turn store, by add_message_if_absent below).
        if not isinstance(message, str) and (await memory.get_message(user.message_id)) is not None:
            raise DuplicateMessageError(
                f"message {user.message_id!r} is already stored in conversation "
                f"{conversation_id!r}: a new turn needs a new user message"
            )
        # Known from here on as saved: if the save's reply is lost, closing the turn finds the
        # record (or, if it was never written, the lease is left to expire: `_abandon`).
        run.snapshot = replace(snapshot, version=1)
        if not await self._timed(
            run, "save_turn", self.turn_store.save_turn(snapshot, 0, run.fence)
        ):
            run.snapshot = None  # another turn's record
            raise _TurnExists(f"turn {turn_id!r} already exists")
        run.history = await self._timed(
            run,
            "read_history",
            self._history(run.agent, memory, conversation_id, current_stored=False),
        )
        if not await self._timed(run, "append", memory.add_message_if_absent(user)):
            raise DuplicateMessageError(
                f"message {user.message_id!r} is already stored in conversation "
                f"{conversation_id!r}: the turn id was used before, or another writer "
                "stored it"
            )

    async def run_history(
        self, io: TurnIO, agent: Agent, history: list[Message], message: UserMessage | str
    ) -> AgentTurn:
        turn_id = uuid.uuid4().hex
        user = user_message(message, turn_id)
        work = self._drive(TurnRun(io, agent, None, turn_id, None, history, [user]))
        return await self._observed(io, agent, None, turn_id, "run_history", work)

    async def resume(
        self,
        io: TurnIO,
        agent: Agent,
        conversation_id: str,
        turn_id: str,
        approvals: Mapping[str, bool] | None,
    ) -> AgentTurn:
        check_conversation_id(conversation_id)
        work = self._resume(io, agent, conversation_id, turn_id, approvals)
        return await self._observed(io, agent, conversation_id, turn_id, "resume", work)

    async def _resume(
        self,
        io: TurnIO,
        agent: Agent,
        conversation_id: str,
        turn_id: str,
        approvals: Mapping[str, bool] | None,
    ) -> AgentTurn:
        snapshot = await self._load(conversation_id, turn_id)
        if snapshot.status is TurnStatus.RUNNING:
            # The same approvals again (a retry after a resume whose reply was lost) find them
            # recorded: the turn goes on as an interrupted one.
            if approvals and any(
                snapshot.decisions.get(call_id) != decision
                for call_id, decision in dict(approvals).items()
            ):
                raise InvalidArgumentError(
                    f"turn {turn_id!r} is running, not waiting for approvals"
                )
            try:
                return await self._resume_interrupted(io, agent, conversation_id, snapshot)
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
        memory = self._memory(conversation_id)
        owner = uuid.uuid4().hex
        # A compare-and-set on the record's version read above: of two resumes of one
        # suspension, one takes it; the other changes nothing (SPEC §20).
        if not await self.turn_store.reacquire_conversation(
            conversation_id, turn_id, owner, self._lease_seconds, self._clock(), snapshot.version
        ) and not await self._take_stranded(snapshot, owner):
            raise TurnStateError(
                f"turn {turn_id!r} is no longer suspended: resumed or cancelled elsewhere"
            )
        run = await self._reopened(io, agent, memory, snapshot, owner)
        return await self._drive(run, snapshot.pending_approvals, decisions)

    async def _take_stranded(self, snapshot: AgentTurnSnapshot, owner: str) -> bool:
        """Take a suspended turn whose last resume took it back and stopped (a lost reply, a
        dead process) before its record changed: once that lease expires, as an interrupted
        turn is. True when taken; the record is still the one read (else it is let go)."""
        conversation_id, turn_id = snapshot.conversation_id, snapshot.turn_id
        now = self._clock()
        lease = await self.turn_store.open_turn(conversation_id)
        if (
            lease is None
            or lease.turn_id != turn_id
            or lease.status is not TurnStatus.RUNNING
            or not lease.expired(now)
        ):
            return False
        try:
            if await self._retake(snapshot, owner, now) == turn_id:
                return True
        except TurnStateError:
            return False
        await self.turn_store.release_conversation(conversation_id, turn_id, owner, now)
        return False

    async def _retake(self, snapshot: AgentTurnSnapshot, owner: str, now: float) -> str | None:
        """The conversation taken for the stored turn ``snapshot`` once the lease on it has
        expired (`AgentConversationBusyError` while it lives); the id of the expired turn
        taken over. If the record changed since it was read (another process closed or
        continued the turn), the lease is let go and `TurnStateError` raised."""
        conversation_id, turn_id = snapshot.conversation_id, snapshot.turn_id
        stale = await self.turn_store.acquire_conversation(
            conversation_id, turn_id, owner, self._lease_seconds, now
        )
        current = await self.turn_store.load_turn(conversation_id, turn_id)
        if current is None or current.version != snapshot.version:
            await self.turn_store.release_conversation(conversation_id, turn_id, owner, now)
            raise TurnStateError(f"turn {turn_id!r} changed while it was being resumed")
        return stale

    async def _resume_interrupted(
        self, io: TurnIO, agent: Agent, conversation_id: str, snapshot: AgentTurnSnapshot
    ) -> AgentTurn:
        """Continue a `RUNNING` turn whose process died, from its last stored step, once its
        lease has expired (a live lease raises `AgentConversationBusyError`)."""
        memory = self._memory(conversation_id)
        owner = uuid.uuid4().hex
        stale = await self._retake(snapshot, owner, self._clock())
        stale = None if stale == snapshot.turn_id else stale
        run = await self._reopened(io, agent, memory, snapshot, owner, stale)
        # Messages stored after the last snapshot count: a reply is one step.
        replies = sum(isinstance(message, AiMessage) for message in run.messages)
        run.steps = max(run.steps, replies)
        return await self._drive(run, interrupted=True)

    async def _reopened(
        self,
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
        lease = self._keeper.hold(conversation_id, turn_id, owner)
        run = TurnRun(
            io, agent, conversation_id, turn_id, memory, [], [], snapshot, lease,
            snapshot.step_count, dict(snapshot.decisions),
        )  # fmt: skip
        fence(run, owner)
        try:
            if stale is not None:
                assert run.memory is not None  # ``memory``, fenced
                await self._recover(
                    io, run.memory, conversation_id, stale, agent, run.fence, turn_id
                )
            run.history, run.messages = await self._timed(
                run, "read_history", self._split_turn(agent, memory, snapshot)
            )
        except BaseException as error:
            await self._abandon(run, error, read_turn=True)
            raise
        return run

    async def cancel(self, io: TurnIO, conversation_id: str, turn_id: str) -> AgentTurn:
        check_conversation_id(conversation_id)
        snapshot = await self._load(conversation_id, turn_id)
        now = self._clock()
        if snapshot.status not in OPEN_STATUSES:
            lease = await self.turn_store.open_turn(conversation_id)
            if lease is not None and lease.turn_id == turn_id and lease.expired(now):
                # the turn ended but its lease was never released (a lost reply): free it
                await self.turn_store.release_conversation(conversation_id, turn_id, None, now)
                return view(snapshot)
            raise TurnStateError(f"turn {turn_id!r} is {snapshot.status.value}, not open")
        held = self._keeper.find(conversation_id, turn_id)
        if held is not None:
            held.cancel.set()
            return view(snapshot)
        lease = await self.turn_store.open_turn(conversation_id)
        owner = uuid.uuid4().hex
        if lease is not None and lease.turn_id == turn_id:
            if lease.status == TurnStatus.RUNNING and not lease.expired(now):
                await self.turn_store.request_cancel(conversation_id, turn_id, now)
                return view(snapshot)
            if lease.status == TurnStatus.SUSPENDED:
                taken = await self.turn_store.reacquire_conversation(
                    conversation_id, turn_id, owner, self._lease_seconds, now, snapshot.version
                )
            else:
                taken = (
                    await self.turn_store.acquire_conversation(
                        conversation_id, turn_id, owner, self._lease_seconds, now
                    )
                    == turn_id
                )
            if not taken:
                raise TurnStateError(f"turn {turn_id!r} changed while it was being cancelled")
        else:
            owner = ""  # the lease is gone (or another turn took it over): close the record only
        memory = self._memory(conversation_id)
        run = TurnRun(io, agent_stub(snapshot), conversation_id, turn_id, memory, [], [], snapshot)
        run.steps = snapshot.step_count
        if owner:
            fence(run, owner)
        # If closing fails, the lease taken here is left to expire: the next run or cancel
        # takes it over and closes the turn (a freed lease would leave it open for good).
        if owner:
            run.history, run.messages = await self._split_turn(
                None, memory, snapshot, missing_ok=True
            )
        turn = await self._finish(
            run, TurnStatus.CANCELLED, error="cancelled", close_calls=bool(owner)
        )
        if owner:
            await self.turn_store.release_conversation(conversation_id, turn_id, owner, now)
        return turn

    async def turn(self, conversation_id: str, turn_id: str) -> AgentTurn:
        check_conversation_id(conversation_id)
        return view(await self._load(conversation_id, turn_id))

    # -- the loop ---------------------------------------------------------------------------

    async def _drive(
        self,
        run: TurnRun,
        pending: Sequence[PendingApproval] = (),
        decisions: Mapping[str, bool] | None = None,
        *,
        interrupted: bool = False,
    ) -> AgentTurn:
        if run.io.span is not None and self._tracing is not None:
            self._tracing.turn_started(run.io.span, len(run.history))
        try:
            try:
                if interrupted:
                    ended = await self._continue_interrupted(run)
                    if ended is not None:
                        return ended
                if decisions is not None:
                    waiting = await self._decide(run, pending, decisions)
                    self._check_cancel(run)
                    if waiting:
                        return await self._suspend(run, waiting)
                return await self._loop(run)
            except (LeaseLost, LeaseLostError):
                raise self._lost(run) from None
            except Cancelled:
                return await self._finish(run, TurnStatus.CANCELLED, error="cancelled")
        except asyncio.CancelledError:
            # The task driving the turn was cancelled (the loop shutting down; a caller's
            # cancellation arrives as `Cancelled`): end the turn cancelled, its open calls
            # answered, the lease freed, then let the cancellation go on. A second
            # cancellation during that cleanup still frees the lease.
            run.io.cancelled = True
            try:
                await self._finish(run, TurnStatus.CANCELLED, error="cancelled")
            except BaseException:
                await asyncio.shield(self._release(run))
            raise
        except BaseException as error:
            await self._abandon(run, error)
            raise

    async def _continue_interrupted(self, run: TurnRun) -> AgentTurn | None:
        """Finish the step the dead process was in; the turn's end if that ends it."""
        last = next((m for m in reversed(run.messages) if isinstance(m, AiMessage)), None)
        if last is None:
            return None  # it died before the first reply: the loop asks the model
        if not last.tool_calls:
            if run.messages[-1] is last:  # the final answer was stored, its record was not
                return await self._finish(run, TurnStatus.COMPLETED, final=last)
            return None
        waiting, _ = await self._call_tools(run, last, interrupted=True)
        self._check_cancel(run)
        if waiting:
            return await self._suspend(run, waiting)
        return None

    async def _check_lease(self, run: TurnRun, *, ask: bool = False) -> None:
        """`LeaseLost` if another process took this turn's lease over: this runner then
        writes nothing more. The server is asked (a renewal, which also brings a cancel
        requested from another process) when ``ask``, or once a tenth of the lease has gone
        by since the last renewal, so a slow model, tool or compressor is always followed by
        a check."""
        lease = run.lease
        if lease is None:
            return
        if ask or self._now(run) - lease.renewed_at >= self._lease_seconds / 10:
            await self._keeper.renew(lease, run.now)  # in a unit: the reading taken before it
        if lease.lost.is_set():
            raise LeaseLost

    async def _checkpoint(self, run: TurnRun) -> None:
        """The lease is still this runner's and the turn was not cancelled (before a model or
        tool call, and before a failure is recorded)."""
        await self._check_lease(run)
        self._check_cancel(run)

    def _check_cancel(self, run: TurnRun) -> None:
        """`Cancelled` once the turn was cancelled (here, through the store by another
        process as of the last renewal, or by cancelling the task that awaits it)."""
        if run.io.cancelled or (run.lease is not None and run.lease.cancel.is_set()):
            raise Cancelled

    async def _loop(self, run: TurnRun) -> AgentTurn:
        agent = run.agent
        while True:
            await self._checkpoint(run)
            if run.steps >= agent.max_steps:
                return await self._finish(
                    run,
                    TurnStatus.FAILED,
                    error=f"max_steps reached: {agent.max_steps} model calls without a final "
                    f"answer",
                )
            try:
                window = await self._window(run)
            except AgentCtxError as error:  # a compressor failure, typed
                await self._checkpoint(run)  # a slow compressor may have outlived the lease
                return await self._finish(
                    run, TurnStatus.FAILED, error=f"window failed: {error}", exception=error
                )
            started = time.perf_counter()
            try:
                reply = await self._chat(run, window)
            except Cancelled:
                raise
            except Exception as error:  # any model failure ends the turn, typed in `error`
                await self._checkpoint(run)
                return await self._finish(
                    run,
                    TurnStatus.FAILED,
                    error=f"model failed: {type(error).__name__}: {error}",
                    exception=error,
                )
            self._observe_reply(run, window, reply, started)
            if not isinstance(reply, AiMessage):
                await self._check_lease(run, ask=True)
                self._check_cancel(run)
                return await self._finish(
                    run,
                    TurnStatus.FAILED,
                    error=f"model returned {type(reply).__name__}, not an AiMessage",
                )
            ended, ai = await self._together(
                run, "recording a reply", partial(self._record, run, reply)
            )
            if ended is not None:
                return ended
            waiting, held = await self._call_tools(run, ai, hold_last=True)
            if held is not None and not waiting:
                await self._step_done(run, held)
                continue
            # Some calls wait for approval (the reply has calls: `_record` ended the turn
            # otherwise, and its last call either ran, and is held, or waits).
            if held is not None:
                await self._store_result(run, held)
            self._check_cancel(run)  # a cancel during the step's last tool
            return await self._suspend(run, waiting)

    async def _record(self, run: TurnRun, reply: AiMessage) -> tuple[AgentTurn | None, AiMessage]:
        """The model's reply stored, and the turn completed if it is the final answer (store
        calls only: `_together` runs them as one unit)."""
        # Ask the server after every model call: a takeover drops the reply, and a cancel
        # from another process is seen before any tool runs or the turn completes.
        await self._check_lease(run, ask=True)
        run.steps += 1
        ai = replace(reply, message_id=f"{run.turn_id}:ai:{run.steps}", turn_id=run.turn_id)
        await self._append(run, ai)
        self._check_cancel(run)  # a cancelled reply stays on record; its calls never run
        if not ai.tool_calls:
            return await self._finish(run, TurnStatus.COMPLETED, final=ai), ai
        return None, ai

    async def _step_done(self, run: TurnRun, held: HeldResult) -> None:
        """A step whose calls all ran: its last result stored and the turn's record saved as
        one unit of store I/O, then the result's event."""
        try:
            await self._together(run, "recording a step", partial(self._record_step, run, held))
        finally:
            if run.messages and run.messages[-1] is held[0]:  # stored
                await self._emit_result(run, held)

    async def _record_step(self, run: TurnRun, held: HeldResult) -> None:
        await self._store_result(run, held, emit=False)
        self._check_cancel(run)  # a cancel during the step's last tool
        await self._save(run, TurnStatus.RUNNING)
