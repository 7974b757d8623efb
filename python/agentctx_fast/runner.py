"""The agent runner (SPEC §11): turns, tools, approvals, resume, busy protection, snapshots.

Each model call gets a freshly built window over the conversation. The runner reads the
history page by page only as far back as a window can reach, keeps this turn's messages as it
writes them (``add_message_if_absent``, with ids derived from the turn id, so a retried write is
harmless), and never calls ``clear()``. A turn holds its conversation through a lease in the
store: a second ``run`` meets `AgentConversationBusyError`, and a crashed process's lease
expires, after which the next ``run`` closes the crashed turn as `FAILED`.

>>> from agentctx_fast import AiMessage, InMemoryAgentStore, ScriptedChatModel
>>> agent = Agent("support", ScriptedChatModel([AiMessage("Hello!")]), instructions="Be kind.")
>>> turn = AgentRunner(InMemoryAgentStore()).run(agent, "conversation-1", "hi")
>>> turn.status, turn.final_message.text
(<TurnStatus.COMPLETED: 'completed'>, 'Hello!')
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from agentctx_fast import metrics as m
from agentctx_fast._history import read_history, unanswered_calls
from agentctx_fast._ids import check_identifier
from agentctx_fast._lease import HeldLease, LeaseKeeper
from agentctx_fast.agent import Agent, AgentTurn
from agentctx_fast.errors import (
    AgentCtxError,
    DuplicateMessageError,
    InvalidArgumentError,
    InvalidMessageTypeError,
    TurnNotFoundError,
    TurnStateError,
)
from agentctx_fast.memory import ChatMemory, ChatMemoryProvider
from agentctx_fast.messages import AgentFormMessage, AiMessage, Message, ToolMessage, UserMessage
from agentctx_fast.metrics import AgentMetrics
from agentctx_fast.stores._common import check_conversation_id
from agentctx_fast.stores.turns import (
    OPEN_STATUSES,
    AgentTurnSnapshot,
    AgentTurnStore,
    InMemoryAgentTurnStore,
    PendingApproval,
    dump_snapshot,
)
from agentctx_fast.tools import Tool, ToolOutcome
from agentctx_fast.turns import TurnStatus
from agentctx_fast.window import AgentContextCompressor, ContextWindow, build_window

__all__ = ["REFUSED_TEXT", "Agent", "AgentRunner", "AgentTurn"]

REFUSED_TEXT = "refused by the user"


@dataclass(slots=True)
class _TurnRun:
    """The mutable state of a turn while this process drives it."""

    agent: Agent
    conversation_id: str | None
    turn_id: str
    memory: ChatMemory | None
    history: list[Message]
    messages: list[Message]
    snapshot: AgentTurnSnapshot | None = None
    lease: HeldLease | None = None
    steps: int = 0
    decisions: dict[str, bool] = field(default_factory=dict)


class AgentRunner:
    """Runs turns of agents over the conversations of a store (or of a memory provider).

    ``store`` supplies chat memory and the turn store (snapshots and leases); a separate
    ``chat_memory_provider`` replaces its memories. Without a store, snapshots and leases live
    in this process only. ``metrics`` receives the observations listed in
    `agentctx_fast.metrics`; ``lease_seconds`` is how long a crashed process can block a
    conversation.
    """

    def __init__(
        self,
        store: Any = None,
        chat_memory_provider: ChatMemoryProvider | None = None,
        *,
        metrics: AgentMetrics | None = None,
        lease_seconds: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if chat_memory_provider is not None and not callable(chat_memory_provider):
            raise InvalidArgumentError("chat_memory_provider must be callable")
        if store is not None and not callable(getattr(store, "chat_memory_provider", None)):
            raise InvalidArgumentError(f"store must be an agent store, got {type(store).__name__}")
        self._provider = chat_memory_provider or (
            store.chat_memory_provider() if store is not None else None
        )
        turn_store = getattr(store, "turn_store", None)
        self.turn_store: AgentTurnStore = (
            turn_store() if callable(turn_store) else InMemoryAgentTurnStore()
        )
        if (
            isinstance(lease_seconds, bool)
            or not isinstance(lease_seconds, (int, float))
            or not lease_seconds > 0
        ):
            raise InvalidArgumentError(f"lease_seconds must be > 0, got {lease_seconds!r}")
        self._lease_seconds = float(lease_seconds)
        self._clock = clock
        self._metrics = metrics
        self._keeper = LeaseKeeper(self.turn_store, self._lease_seconds, clock)

    def close(self) -> None:
        """Stop the lease-renewing thread (turns still running stop renewing)."""
        self._keeper.close()

    # -- public operations ------------------------------------------------------------------

    def run(
        self,
        agent: Agent,
        conversation_id: str,
        message: UserMessage | str,
        *,
        turn_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> AgentTurn:
        """Run one turn on ``conversation_id``'s memory until a final answer, a suspension for
        approval, or a failure; raises `AgentConversationBusyError` while another is open."""
        agent = _check_agent(agent)
        check_conversation_id(conversation_id)
        memory = self._memory(conversation_id)
        turn_id = uuid.uuid4().hex if turn_id is None else _check_turn_id(turn_id)
        user = _user_message(message, turn_id)
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
        owner = uuid.uuid4().hex
        stale = self.turn_store.acquire_conversation(
            conversation_id, turn_id, owner, self._lease_seconds, now
        )
        lease = self._keeper.hold(conversation_id, turn_id, owner)
        run = _TurnRun(agent, conversation_id, turn_id, memory, [], [user], None, lease)
        try:
            if stale is not None:
                self._recover(memory, conversation_id, stale, agent)
            # Under the lease only a caller error stores a turn's user message id before the
            # turn: a caller's own UserMessage is checked here, before anything is written; a
            # str gets an id made from the turn id, and a reused turn id is refused by
            # save_turn (or, with an in-process turn store, by add_message_if_absent below).
            if not isinstance(message, str) and memory.get_message(user.message_id) is not None:
                raise DuplicateMessageError(
                    f"message {user.message_id!r} is already stored in conversation "
                    f"{conversation_id!r}: a new turn needs a new user message"
                )
            if not self.turn_store.save_turn(snapshot, 0):
                raise TurnStateError(f"turn {turn_id!r} already exists")
            run.snapshot = replace(snapshot, version=1)
            run.history = self._history(agent, memory, current_stored=False)
            if not memory.add_message_if_absent(user):
                raise DuplicateMessageError(
                    f"message {user.message_id!r} is already stored in conversation "
                    f"{conversation_id!r}: the turn id was used before, or another writer "
                    "stored it"
                )
        except BaseException:
            self._abandon(run)
            raise
        return self._drive(run)

    def run_history(
        self, agent: Agent, history: Sequence[Message], message: UserMessage | str
    ) -> AgentTurn:
        """Run one turn over an explicit ``history``; it is copied and nothing is written back
        (append ``turn.messages`` yourself). A suspended turn here cannot be resumed."""
        agent = _check_agent(agent)
        copied = list(history)
        for index, item in enumerate(copied):
            if not isinstance(item, Message):
                raise InvalidMessageTypeError(
                    f"history[{index}] is not a Message: {type(item).__name__}"
                )
        turn_id = uuid.uuid4().hex
        user = _user_message(message, turn_id)
        return self._drive(_TurnRun(agent, None, turn_id, None, copied, [user]))

    def resume(
        self,
        agent: Agent,
        conversation_id: str,
        turn_id: str,
        approvals: Mapping[str, bool],
    ) -> AgentTurn:
        """Record the user's decisions on a suspended turn (``{tool_call_id: True | False}``)
        and continue it. Raises `TurnNotFoundError` for an unknown turn and `TurnStateError`
        for one that is not suspended."""
        agent = _check_agent(agent)
        check_conversation_id(conversation_id)
        snapshot = self._suspended(conversation_id, turn_id)
        decisions = _check_approvals(approvals, snapshot)
        memory = self._memory(conversation_id)
        owner = uuid.uuid4().hex
        if not self.turn_store.reacquire_conversation(
            conversation_id, turn_id, owner, self._lease_seconds, self._clock()
        ):
            raise TurnStateError(
                f"turn {turn_id!r} is no longer suspended: resumed or cancelled elsewhere"
            )
        lease = self._keeper.hold(conversation_id, turn_id, owner)
        run = _TurnRun(
            agent, conversation_id, turn_id, memory, [], [], snapshot, lease,
            snapshot.step_count, dict(snapshot.decisions),
        )  # fmt: skip
        try:
            run.history, run.messages = self._split_turn(agent, memory, snapshot)
        except BaseException:
            self._abandon(run)
            raise
        return self._drive(run, snapshot.pending_approvals, decisions)

    def cancel(self, conversation_id: str, turn_id: str) -> AgentTurn:
        """Cancel an open turn. A suspended turn (or one whose process died) is closed now,
        its dangling tool calls answered with error results; a turn running elsewhere is
        flagged and ends as `CANCELLED` at its next step (the returned turn says RUNNING)."""
        check_conversation_id(conversation_id)
        snapshot = self._load(conversation_id, turn_id)
        if snapshot.status not in OPEN_STATUSES:
            raise TurnStateError(f"turn {turn_id!r} is {snapshot.status.value}, not open")
        now = self._clock()
        held = self._keeper.find(conversation_id, turn_id)
        if held is not None:
            held.cancel.set()
            return _view(snapshot)
        lease = self.turn_store.open_turn(conversation_id)
        owner = uuid.uuid4().hex
        if lease is not None and lease.turn_id == turn_id:
            if lease.status == TurnStatus.RUNNING and not lease.expired(now):
                self.turn_store.request_cancel(conversation_id, turn_id, now)
                return _view(snapshot)
            taken = (
                self.turn_store.reacquire_conversation(
                    conversation_id, turn_id, owner, self._lease_seconds, now
                )
                if lease.status == TurnStatus.SUSPENDED
                else self.turn_store.acquire_conversation(
                    conversation_id, turn_id, owner, self._lease_seconds, now
                )
                == turn_id
            )
            if not taken:
                raise TurnStateError(f"turn {turn_id!r} changed while it was being cancelled")
        else:
            owner = ""  # the lease is gone (or another turn took it over): close the record only
        memory = self._memory(conversation_id)
        run = _TurnRun(_agent_stub(snapshot), conversation_id, turn_id, memory, [], [], snapshot)
        run.steps = snapshot.step_count
        try:
            if owner:
                run.history, run.messages = self._split_turn(None, memory, snapshot)
            turn = self._finish(
                run, TurnStatus.CANCELLED, error="cancelled", close_calls=bool(owner)
            )
        finally:
            if owner:
                self.turn_store.release_conversation(conversation_id, turn_id, owner, now)
        return turn

    def turn(self, conversation_id: str, turn_id: str) -> AgentTurn:
        """The stored state of a turn (its messages are in chat memory)."""
        return _view(self._load(conversation_id, turn_id))

    # -- the loop ---------------------------------------------------------------------------

    def _drive(
        self,
        run: _TurnRun,
        pending: Sequence[PendingApproval] = (),
        decisions: Mapping[str, bool] | None = None,
    ) -> AgentTurn:
        try:
            try:
                if decisions is not None:
                    waiting = self._decide(run, pending, decisions)
                    self._check_cancel(run)
                    if waiting:
                        return self._suspend(run, waiting)
                return self._loop(run)
            except _LeaseLost:
                return self._lost(run)
            except _Cancelled:
                return self._finish(run, TurnStatus.CANCELLED, error="cancelled")
        except BaseException:
            self._abandon(run)
            raise

    def _check_lease(self, run: _TurnRun, *, ask: bool = False) -> None:
        """`_LeaseLost` if another process took this turn's lease over: this runner then
        writes nothing more. The server is asked (a renewal, which also brings a cancel
        requested from another process) when ``ask``, or once a tenth of the lease has gone
        by since the last renewal, so a slow model, tool or compressor is always followed by
        a check."""
        lease = run.lease
        if lease is None:
            return
        if ask or self._clock() - lease.renewed_at >= self._lease_seconds / 10:
            self._keeper.renew(lease)
        if lease.lost.is_set():
            raise _LeaseLost

    def _checkpoint(self, run: _TurnRun) -> None:
        """The lease is still this runner's and the turn was not cancelled (before a model or
        tool call, and before a failure is recorded)."""
        self._check_lease(run)
        self._check_cancel(run)

    def _check_cancel(self, run: _TurnRun) -> None:
        """`_Cancelled` once the turn was cancelled (here, or through the store by another
        process as of the last renewal)."""
        if run.lease is not None and run.lease.cancel.is_set():
            raise _Cancelled

    def _loop(self, run: _TurnRun) -> AgentTurn:
        agent = run.agent
        while True:
            self._checkpoint(run)
            if run.steps >= agent.max_steps:
                return self._finish(
                    run,
                    TurnStatus.FAILED,
                    error=f"max_steps reached: {agent.max_steps} model calls without a final "
                    f"answer",
                )
            try:
                window = self._window(run)
            except AgentCtxError as error:  # a compressor failure, typed
                self._checkpoint(run)  # a slow compressor may have outlived the lease
                return self._finish(run, TurnStatus.FAILED, error=f"window failed: {error}")
            try:
                reply = agent.chat_model.chat(window.messages, agent.tools)
            except Exception as error:  # any model failure ends the turn, typed in `error`
                self._checkpoint(run)
                return self._finish(
                    run, TurnStatus.FAILED, error=f"model failed: {type(error).__name__}: {error}"
                )
            # Ask the server after every model call: a takeover drops the reply, and a cancel
            # from another process is seen before any tool runs or the turn completes.
            self._check_lease(run, ask=True)
            if not isinstance(reply, AiMessage):
                self._check_cancel(run)
                return self._finish(
                    run,
                    TurnStatus.FAILED,
                    error=f"model returned {type(reply).__name__}, not an AiMessage",
                )
            run.steps += 1
            ai = replace(reply, message_id=f"{run.turn_id}:ai:{run.steps}", turn_id=run.turn_id)
            self._append(run, ai)
            self._check_cancel(run)  # a cancelled reply stays on record; its calls never run
            if not ai.tool_calls:
                return self._finish(run, TurnStatus.COMPLETED, final=ai)
            waiting = self._call_tools(run, ai)
            self._check_cancel(run)  # a cancel during the step's last tool
            if waiting:
                return self._suspend(run, waiting)
            self._save(run, TurnStatus.RUNNING)

    def _window(self, run: _TurnRun) -> ContextWindow:
        agent = run.agent
        compressor = agent.context_compressor
        labels = {"agent": agent.name}
        if compressor is not None and self._metrics is not None:
            compressor = _counted(compressor, self._metrics, labels)
        window = build_window(
            [*run.history, *run.messages],
            system=agent.instructions,
            max_attached_turns=agent.max_attached_turns,
            max_attached_messages=agent.max_attached_messages,
            compact_completed_tool_turns=agent.compact_completed_tool_turns,
            compression_keep_recent_turns=agent.compression_keep_recent_turns,
            context_compressor=compressor,
            max_attached_tokens=agent.max_attached_tokens,
            token_estimator=agent.token_estimator,
        )
        if self._metrics is not None:
            record = self._metrics.record
            record(m.WINDOW_MESSAGES, len(window.messages), labels)
            record(m.WINDOW_TOKENS, window.estimated_tokens, labels)
            record(m.WINDOW_DROPPED_TURNS, window.dropped_turns, labels)
            record(m.WINDOW_COMPACTED_TURNS, window.compacted_turns, labels)
        return window

    def _call_tools(self, run: _TurnRun, ai: AiMessage) -> list[PendingApproval]:
        """Run the calls that need no approval; return those waiting for the user."""
        waiting: list[PendingApproval] = []
        for call in ai.tool_calls:
            tool = run.agent.tool(call.name)
            if tool is not None and tool.requires_approval and call.id not in run.decisions:
                form = AgentFormMessage(
                    payload={
                        "kind": "tool_approval",
                        "tool_call_id": call.id,
                        "tool_name": call.name,
                        "arguments": call.arguments,
                    },
                    status="pending",
                    message_id=f"{run.turn_id}:approval:{run.steps}:{call.id}",
                    turn_id=run.turn_id,
                )
                self._append(run, form)
                waiting.append(PendingApproval(call.id, call.name, call.arguments, form.message_id))
                continue
            if tool is None:
                outcome = ToolOutcome(f"unknown tool {call.name!r}", is_error=True)
            elif run.decisions.get(call.id) is False:
                outcome = ToolOutcome(REFUSED_TEXT, is_error=True)
            else:
                outcome = self._invoke(run, tool, call.arguments)
            self._append_result(run, call.id, call.name, outcome)
        return waiting

    def _invoke(self, run: _TurnRun, tool: Tool, arguments: str) -> ToolOutcome:
        """Run a tool unless the turn was cancelled or taken over. A tool that ran has its
        result written even when a cancel came meanwhile (the side effect happened); the
        cancel stops the turn at the next check."""
        self._checkpoint(run)
        outcome = tool.invoke(arguments)
        self._check_lease(run)
        return outcome

    def _append_result(
        self, run: _TurnRun, call_id: str, tool_name: str, outcome: ToolOutcome
    ) -> None:
        self._append(
            run,
            ToolMessage(
                call_id,
                outcome.text,
                tool_name=tool_name,
                is_error=outcome.is_error,
                message_id=f"{run.turn_id}:tool:{run.steps}:{call_id}",
                turn_id=run.turn_id,
            ),
        )
        if self._metrics is not None:
            labels = {"tool": tool_name}
            record = self._metrics.record
            record(m.TOOL_CALLS, 1, labels)
            record(m.TOOL_RESULT_CHARS, len(outcome.text), labels)
            if outcome.is_error:
                record(m.TOOL_ERRORS, 1, labels)
            if outcome.truncated:
                record(m.TOOL_TRUNCATIONS, 1, labels)
            if outcome.page_request:
                record(m.TOOL_PAGE_REQUESTS, 1, labels)

    def _decide(
        self, run: _TurnRun, pending: Sequence[PendingApproval], decisions: Mapping[str, bool]
    ) -> list[PendingApproval]:
        """Record each decision on its form (compare-and-set) and answer the decided calls."""
        waiting: list[PendingApproval] = []
        for approval in pending:
            if approval.tool_call_id not in decisions:
                waiting.append(approval)
                continue
            approved = decisions[approval.tool_call_id]
            self._update_form(run, approval.form_message_id, "approved" if approved else "refused")
            run.decisions[approval.tool_call_id] = approved
            tool = run.agent.tool(approval.tool_name)
            if not approved:
                outcome = ToolOutcome(REFUSED_TEXT, is_error=True)
            elif tool is None:
                outcome = ToolOutcome(f"unknown tool {approval.tool_name!r}", is_error=True)
            else:
                outcome = self._invoke(run, tool, approval.arguments)
            self._append_result(run, approval.tool_call_id, approval.tool_name, outcome)
        return waiting

    def _update_form(self, run: _TurnRun, form_id: str, status: str) -> None:
        index = next((i for i, msg in enumerate(run.messages) if msg.message_id == form_id), None)
        form = run.messages[index] if index is not None else None
        if not isinstance(form, AgentFormMessage) or run.memory is None:
            return
        payload = dict(form.payload or {})
        payload["decision"] = status
        stored = run.memory.update_message(
            replace(form, status=status, payload=payload), form.version
        )
        assert index is not None
        run.messages[index] = stored

    def _close_forms(self, run: _TurnRun, status: str) -> None:
        """The turn ended unfinished: every approval form of it still pending (those of a
        suspension, and those written in the step that was stopped) gets ``status``."""
        for message in list(run.messages):
            if isinstance(message, AgentFormMessage) and message.status == "pending":
                self._update_form(run, message.message_id, status)

    # -- persistence ------------------------------------------------------------------------

    def _append(self, run: _TurnRun, message: Message) -> None:
        if run.memory is not None:
            run.memory.add_message_if_absent(message)
        run.messages.append(message)

    def _save(
        self,
        run: _TurnRun,
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
            updated_at=self._clock(),
        )
        if not self.turn_store.save_turn(snapshot, run.snapshot.version):
            raise TurnStateError(f"turn {run.turn_id!r} was changed by another process")
        run.snapshot = replace(snapshot, version=run.snapshot.version + 1)
        if self._metrics is not None:
            self._metrics.record(
                m.SNAPSHOT_BYTES, len(dump_snapshot(snapshot)), {"agent": run.agent.name}
            )

    def _suspend(self, run: _TurnRun, waiting: list[PendingApproval]) -> AgentTurn:
        self._save(run, TurnStatus.SUSPENDED, pending=waiting)
        if run.lease is not None:
            self._keeper.drop(run.lease)
            self.turn_store.suspend_conversation(
                run.lease.conversation_id, run.turn_id, run.lease.owner
            )
        return self._result(run, TurnStatus.SUSPENDED, pending=tuple(waiting))

    def _finish(
        self,
        run: _TurnRun,
        status: TurnStatus,
        *,
        final: AiMessage | None = None,
        error: str | None = None,
        close_calls: bool = True,
    ) -> AgentTurn:
        if close_calls and status is not TurnStatus.COMPLETED:
            self._close_forms(run, status.value)
            self._close_calls(run, f"not run: the turn ended {status.value} ({error})")
        self._save(run, status, final=final, error=error)
        if self._metrics is not None:
            self._metrics.record(
                m.TURN_STEPS, run.steps, {"agent": run.agent.name, "status": status.value}
            )
        if run.lease is not None:
            self._keeper.drop(run.lease)
            self.turn_store.release_conversation(
                run.lease.conversation_id, run.turn_id, run.lease.owner, self._clock()
            )
        return self._result(run, status, final=final, error=error)

    def _close_calls(self, run: _TurnRun, text: str) -> None:
        for index, (call_id, tool_name) in enumerate(unanswered_calls(run.messages)):
            self._append(
                run,
                ToolMessage(
                    call_id,
                    text,
                    tool_name=tool_name,
                    is_error=True,
                    message_id=f"{run.turn_id}:closed:{index}",
                    turn_id=run.turn_id,
                ),
            )

    def _lost(self, run: _TurnRun) -> AgentTurn:
        # Another process took the expired lease over and closes this turn: write nothing more.
        if run.lease is not None:
            self._keeper.drop(run.lease)
        return self._result(
            run, TurnStatus.FAILED, error="lease lost: the turn ran longer than its lease"
        )

    def _abandon(self, run: _TurnRun) -> None:
        """An unexpected error (a store failure) left the loop: stop renewing the lease, so it
        expires and the next run closes this turn; try to close it now if the store answers."""
        if run.lease is not None:
            self._keeper.drop(run.lease)
        try:
            if run.snapshot is not None and run.snapshot.status in OPEN_STATUSES:
                self._finish(run, TurnStatus.FAILED, error="the runner stopped on a store error")
            elif run.lease is not None:
                self.turn_store.release_conversation(
                    run.lease.conversation_id, run.turn_id, run.lease.owner, self._clock()
                )
        except Exception:  # the store is still failing; the lease expiry recovers the turn
            pass

    def _recover(
        self, memory: ChatMemory, conversation_id: str, stale_id: str, agent: Agent
    ) -> None:
        """Close a turn whose process died holding the lease: error results for its open
        calls, and its snapshot `FAILED`."""
        snapshot = self.turn_store.load_turn(conversation_id, stale_id)
        if snapshot is not None and snapshot.status not in OPEN_STATUSES:
            return  # it finished; only the release was lost
        if snapshot is None:
            snapshot = AgentTurnSnapshot(
                conversation_id, stale_id, agent.name, TurnStatus.RUNNING,
                created_at=self._clock(),
            )  # fmt: skip
        run = _TurnRun(_agent_stub(snapshot), conversation_id, stale_id, memory, [], [], snapshot)
        run.steps = snapshot.step_count
        tail = read_history(
            memory,
            max_attached_turns=1,
            max_attached_messages=0,
            compact=False,
            keep_recent_turns=0,
            must_include=snapshot.message_ids[0] if snapshot.message_ids else None,
        )
        run.messages = [msg for msg in tail if msg.turn_id == stale_id]
        self._close_forms(run, "expired")
        self._close_calls(run, "not run: the process running the turn stopped (lease expired)")
        if snapshot.version == 0:
            run.snapshot = None
            self.turn_store.save_turn(
                replace(snapshot, status=TurnStatus.FAILED, error="lease expired"), 0
            )
            return
        try:
            self._save(
                run, TurnStatus.FAILED, error="lease expired: the process running it stopped"
            )
        except TurnStateError:
            pass  # another process recorded it first

    # -- reads ------------------------------------------------------------------------------

    def _memory(self, conversation_id: str) -> ChatMemory:
        if self._provider is None:
            raise InvalidArgumentError(
                "this runner has no chat memory: give it a store or a chat_memory_provider, "
                "or use run_history"
            )
        memory = self._provider(conversation_id)
        if not isinstance(memory, ChatMemory):
            raise InvalidArgumentError(
                f"chat_memory_provider returned {type(memory).__name__}, not a ChatMemory"
            )
        return memory

    def _history(
        self,
        agent: Agent,
        memory: ChatMemory,
        must_include: str | None = None,
        *,
        current_stored: bool = True,
    ) -> list[Message]:
        return read_history(
            memory,
            max_attached_turns=agent.max_attached_turns,
            max_attached_messages=agent.max_attached_messages,
            compact=agent.compact_completed_tool_turns,
            keep_recent_turns=agent.compression_keep_recent_turns,
            must_include=must_include,
            current_stored=current_stored,
        )

    def _split_turn(
        self, agent: Agent | None, memory: ChatMemory, snapshot: AgentTurnSnapshot
    ) -> tuple[list[Message], list[Message]]:
        """The history before a stored turn, and the turn's own messages (its tail)."""
        first = snapshot.message_ids[0] if snapshot.message_ids else None
        collected = (
            self._history(agent, memory, first)
            if agent is not None
            else read_history(
                memory, max_attached_turns=1, max_attached_messages=0, compact=False,
                keep_recent_turns=0, must_include=first,
            )
        )  # fmt: skip
        start = next((i for i, msg in enumerate(collected) if msg.message_id == first), None)
        if start is None:
            raise TurnStateError(
                f"turn {snapshot.turn_id!r}: its first message {first!r} is not in chat memory"
            )
        return collected[:start], collected[start:]

    def _load(self, conversation_id: str, turn_id: str) -> AgentTurnSnapshot:
        _check_turn_id(turn_id)
        snapshot = self.turn_store.load_turn(conversation_id, turn_id)
        if snapshot is None:
            raise TurnNotFoundError(f"conversation {conversation_id!r} has no turn {turn_id!r}")
        return snapshot

    def _suspended(self, conversation_id: str, turn_id: str) -> AgentTurnSnapshot:
        snapshot = self._load(conversation_id, turn_id)
        if snapshot.status is not TurnStatus.SUSPENDED:
            raise TurnStateError(f"turn {turn_id!r} is {snapshot.status.value}, not suspended")
        return snapshot

    def _result(
        self,
        run: _TurnRun,
        status: TurnStatus,
        *,
        final: AiMessage | None = None,
        error: str | None = None,
        pending: tuple[PendingApproval, ...] = (),
    ) -> AgentTurn:
        return AgentTurn(
            run.turn_id, run.conversation_id, status, tuple(run.messages), final, error,
            pending, run.steps,
        )  # fmt: skip


class _LeaseLost(Exception):
    """Another process took this turn's expired lease over: stop writing."""


class _Cancelled(Exception):
    """The turn was cancelled (here, or elsewhere through the store)."""


def _check_agent(agent: object) -> Agent:
    if not isinstance(agent, Agent):
        raise InvalidArgumentError(f"agent must be an Agent, got {type(agent).__name__}")
    return agent


def _check_turn_id(turn_id: object) -> str:
    if not isinstance(turn_id, str) or not turn_id:
        raise InvalidArgumentError(f"turn_id must be a non-empty str, got {turn_id!r}")
    check_identifier(turn_id, "turn_id")  # a store key: no NUL, no lone surrogate
    return turn_id


def _user_message(message: object, turn_id: str) -> UserMessage:
    if isinstance(message, str):
        return UserMessage(message, message_id=f"{turn_id}:user", turn_id=turn_id)
    if not isinstance(message, UserMessage):
        raise InvalidMessageTypeError(
            f"a turn starts with a UserMessage or a str, got {type(message).__name__}"
        )
    return message if message.turn_id == turn_id else replace(message, turn_id=turn_id)


def _check_approvals(approvals: object, snapshot: AgentTurnSnapshot) -> dict[str, bool]:
    if not isinstance(approvals, Mapping):
        raise InvalidArgumentError("approvals must map tool_call_id to True or False")
    pending = {p.tool_call_id for p in snapshot.pending_approvals}
    decisions: dict[str, bool] = {}
    for call_id, approved in approvals.items():
        if call_id not in pending:
            raise InvalidArgumentError(
                f"turn {snapshot.turn_id!r} has no pending approval for tool call {call_id!r}"
            )
        if not isinstance(approved, bool):
            raise InvalidArgumentError(
                f"approval of tool call {call_id!r} must be True or False, got {approved!r}"
            )
        decisions[call_id] = approved
    return decisions


def _counted(
    compressor: AgentContextCompressor, metrics: AgentMetrics, labels: Mapping[str, str]
) -> AgentContextCompressor:
    def counted(messages: list[Message]) -> list[Message]:
        metrics.record(m.COMPRESSOR_CALLS, 1, labels)
        try:
            return compressor(messages)
        except Exception:
            metrics.record(m.COMPRESSOR_FAILURES, 1, labels)
            raise

    return counted


class _NoModel:
    def chat(self, messages: Sequence[Message], tools: Sequence[Any]) -> AiMessage:
        raise TurnStateError("a closed turn makes no model calls")


def _agent_stub(snapshot: AgentTurnSnapshot) -> Agent:
    """The agent of a turn closed without its definition (cancel, recovery)."""
    return Agent(snapshot.agent_name or "agent", _NoModel())


def _view(snapshot: AgentTurnSnapshot) -> AgentTurn:
    return AgentTurn(
        snapshot.turn_id,
        snapshot.conversation_id,
        snapshot.status,
        error=snapshot.error,
        pending_approvals=snapshot.pending_approvals,
        step_count=snapshot.step_count,
    )
