"""The turn loop's tool steps: running the calls of a model reply, approvals and their forms."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Literal

from agentctx_fast import metrics as m
from agentctx_fast.messages import AgentFormMessage, AiMessage, Message, ToolCall, ToolMessage
from agentctx_fast.runner._state import (
    MAY_HAVE_RUN_TEXT,
    NOT_STARTED_TEXT,
    REFUSED_TEXT,
    EngineState,
    TurnRun,
    may_have_run,
)
from agentctx_fast.runner._tool_errors import reported
from agentctx_fast.runner.events import ToolCallEvent, ToolResultEvent
from agentctx_fast.stores.turns import PendingApproval
from agentctx_fast.tools import Tool, ToolOutcome

HeldResult = tuple[ToolMessage, ToolOutcome]
"""A tool call's result message and the outcome it was made from."""


class ToolSteps(EngineState):
    """Runs tool calls and records approval decisions (a part of `TurnEngine`)."""

    async def _checkpoint(self, run: TurnRun) -> None:
        raise NotImplementedError

    async def _check_lease(self, run: TurnRun, *, ask: bool = False) -> None:
        raise NotImplementedError

    async def _record_started(self, run: TurnRun, call_ids: list[str]) -> None:
        raise NotImplementedError

    async def _call_tools(
        self, run: TurnRun, ai: AiMessage, *, interrupted: bool = False, hold_last: bool = False
    ) -> tuple[list[PendingApproval], HeldResult | None]:
        """Run the calls that need no approval; return those waiting for the user.

        The calls of non-idempotent tools about to run are first recorded as started, in one
        write for the step (SPEC §20).

        ``interrupted``: the process that made these calls died (a resumed `RUNNING` turn).
        A call whose result is stored is never run again; a call without one runs again only
        when its tool is idempotent, otherwise it gets an error result: "may have run" when its
        start was recorded, "not run" when not; a call whose approval form is still pending
        waits for the user again.

        ``hold_last``: the result of the reply's last call, if it ran, is returned instead of
        stored, for the caller to store with what follows it (`_store_result`).
        """
        answered = {m.tool_call_id for m in run.messages if isinstance(m, ToolMessage)}
        forms = _forms(run.messages) if interrupted else {}
        planned: list[tuple[int, ToolCall, Tool | None, _Action]] = []
        for index, call in enumerate(ai.tool_calls):
            if interrupted and call.id in answered:
                continue
            tool = run.agent.tool(call.name)
            planned.append((index, call, tool, _plan(run, call, tool, forms, interrupted)))
        await self._record_started(
            run,
            [
                call.id
                for _, call, tool, action in planned
                if action == "invoke" and tool is not None and not tool.idempotent
            ],
        )
        waiting: list[PendingApproval] = []
        held: HeldResult | None = None
        last = len(ai.tool_calls) - 1
        for index, call, tool, action in planned:
            if not interrupted:
                await run.io.emit(ToolCallEvent(call))
            if action == "ask":
                waiting.append(await self._ask_approval(run, call.id, call.name, call.arguments))
                continue
            if isinstance(action, AgentFormMessage):
                waiting.append(
                    PendingApproval(call.id, call.name, call.arguments, action.message_id)
                )
                continue
            if action == "invoke":
                assert tool is not None
                outcome = await self._invoke(run, tool, call.id, call.arguments)
            else:
                outcome = action
            result = (self._result_message(run, call.id, call.name, outcome), outcome)
            if hold_last and index == last:
                held = result
            else:
                await self._store_result(run, result)
        return waiting, held

    async def _ask_approval(
        self, run: TurnRun, call_id: str, tool_name: str, arguments: str
    ) -> PendingApproval:
        form = AgentFormMessage(
            payload={
                "kind": "tool_approval",
                "tool_call_id": call_id,
                "tool_name": tool_name,
                "arguments": arguments,
            },
            status="pending",
            message_id=f"{run.turn_id}:approval:{run.steps}:{call_id}",
            turn_id=run.turn_id,
        )
        await self._append(run, form)
        return PendingApproval(call_id, tool_name, arguments, form.message_id)

    async def _invoke(self, run: TurnRun, tool: Tool, call_id: str, arguments: str) -> ToolOutcome:
        """Run a tool unless the turn was cancelled or taken over. A tool that ran has its
        result written even when a cancel came meanwhile (the side effect happened); the
        cancel stops the turn at the next check."""
        await self._checkpoint(run)
        run.not_started.discard(call_id)  # from here on it may have run
        tracing = self._tracing
        if tracing is None:
            outcome = await self._called(run, tool, call_id, arguments)
        else:
            with tracing.tool(tool.name, call_id, arguments) as span:
                outcome = await self._called(run, tool, call_id, arguments)
                tracing.tool_done(span, outcome)
        await self._check_lease(run)
        return outcome

    async def _called(self, run: TurnRun, tool: Tool, call_id: str, arguments: str) -> ToolOutcome:
        return reported(run, tool.name, call_id, await run.io.invoke(tool, arguments))

    def _result_message(
        self, run: TurnRun, call_id: str, tool_name: str, outcome: ToolOutcome
    ) -> ToolMessage:
        return ToolMessage(
            call_id,
            outcome.text,
            tool_name=tool_name,
            is_error=outcome.is_error,
            message_id=f"{run.turn_id}:tool:{run.steps}:{call_id}",
            turn_id=run.turn_id,
        )

    async def _store_result(self, run: TurnRun, result: HeldResult, *, emit: bool = True) -> None:
        """Store a tool result; then its `ToolResultEvent` goes out and it is counted, unless
        not ``emit`` (store calls only: the caller then calls `_emit_result`)."""
        await self._keep(run, [result[0]])
        if emit:
            await self._emit_result(run, result)

    async def _emit_result(self, run: TurnRun, result: HeldResult) -> None:
        message, outcome = result
        await run.io.emit(ToolResultEvent(message))
        if self._metrics is not None:
            labels = {"tool": message.tool_name or ""}
            record = self._metrics.record
            record(m.TOOL_CALLS, 1, labels)
            record(m.TOOL_RESULT_CHARS, len(outcome.text), labels)
            if outcome.is_error:
                record(m.TOOL_ERRORS, 1, labels)
            if outcome.truncated:
                record(m.TOOL_TRUNCATIONS, 1, labels)
            if outcome.page_request:
                record(m.TOOL_PAGE_REQUESTS, 1, labels)

    async def _decide(
        self, run: TurnRun, pending: Sequence[PendingApproval], decisions: Mapping[str, bool]
    ) -> list[PendingApproval]:
        """Record each decision on its form (compare-and-set) and answer the decided calls."""
        waiting: list[PendingApproval] = []
        decided: list[tuple[PendingApproval, bool, Tool | None]] = []
        answered = {msg.tool_call_id for msg in run.messages if isinstance(msg, ToolMessage)}
        for approval in pending:
            if approval.tool_call_id not in decisions:
                waiting.append(approval)
                continue
            if approval.tool_call_id in answered:
                continue  # a resume that stopped before saving the record answered it
            approved = decisions[approval.tool_call_id]
            await self._update_form(
                run, approval.form_message_id, "approved" if approved else "refused"
            )
            run.decisions[approval.tool_call_id] = approved
            decided.append((approval, approved, run.agent.tool(approval.tool_name)))
        await self._record_started(
            run,
            [
                approval.tool_call_id
                for approval, approved, tool in decided
                if approved and tool is not None and not tool.idempotent
            ],
        )
        for approval, approved, tool in decided:
            if not approved:
                outcome = ToolOutcome(REFUSED_TEXT, is_error=True)
            elif tool is None:
                outcome = ToolOutcome(f"unknown tool {approval.tool_name!r}", is_error=True)
            else:
                outcome = await self._invoke(run, tool, approval.tool_call_id, approval.arguments)
            result = self._result_message(run, approval.tool_call_id, approval.tool_name, outcome)
            await self._store_result(run, (result, outcome))
        return waiting

    async def _update_form(self, run: TurnRun, form_id: str, status: str) -> None:
        index = next((i for i, msg in enumerate(run.messages) if msg.message_id == form_id), None)
        if index is None or run.memory is None:
            return
        form = run.messages[index]
        if not isinstance(form, AgentFormMessage):
            return
        payload = dict(form.payload or {})
        payload["decision"] = status
        run.messages[index] = await run.memory.update_message(
            replace(form, status=status, payload=payload), form.version
        )

    async def _close_forms(self, run: TurnRun, status: str) -> None:
        """The turn ended unfinished: every approval form of it still pending (those of a
        suspension, and those written in the step that was stopped) gets ``status``."""
        for message in list(run.messages):
            if isinstance(message, AgentFormMessage) and message.status == "pending":
                await self._update_form(run, message.message_id, status)

    async def _append(self, run: TurnRun, message: Message) -> None:
        await self._append_all(run, [message])

    async def _append_all(self, run: TurnRun, messages: list[Message]) -> None:
        """Store ``messages`` (one atomic write when there are several) and keep them."""
        await self._keep(run, messages)
        for message in messages:
            if isinstance(message, ToolMessage):
                await run.io.emit(ToolResultEvent(message))

    async def _keep(self, run: TurnRun, messages: list[Message]) -> None:
        """Store ``messages`` (one atomic write when there are several) and keep them, with no
        event (store calls only)."""
        if run.memory is not None:
            if len(messages) == 1:
                await self._timed(run, "append", run.memory.add_message_if_absent(messages[0]))
            elif messages:
                await self._timed(run, "append", run.memory.add_messages_if_absent(messages))
        run.messages.extend(messages)


_Action = Literal["ask", "invoke"] | AgentFormMessage | ToolOutcome
"""What a step does with a call: ask for approval, run the tool, wait for the user on a form
still pending, or store an outcome known without running anything."""


def _plan(
    run: TurnRun,
    call: ToolCall,
    tool: Tool | None,
    forms: Mapping[str, AgentFormMessage],
    interrupted: bool,
) -> _Action:
    form = forms.get(call.id)
    decision = run.decisions.get(call.id, _decision(form))
    if form is not None and form.status == "pending":
        return form
    if tool is not None and tool.requires_approval and decision is None:
        invalid = tool.invalid_arguments(call.arguments)  # nobody approves a call that cannot run
        return "ask" if invalid is None else invalid
    if tool is None:
        return ToolOutcome(f"unknown tool {call.name!r}", is_error=True)
    if decision is False:
        return ToolOutcome(REFUSED_TEXT, is_error=True)
    if interrupted and not tool.idempotent:
        text = MAY_HAVE_RUN_TEXT if may_have_run(run, call.id) else NOT_STARTED_TEXT
        return ToolOutcome(text, is_error=True)
    return "invoke"


def _forms(messages: Sequence[Message]) -> dict[str, AgentFormMessage]:
    """The approval forms of a turn by the tool call they ask about."""
    forms: dict[str, AgentFormMessage] = {}
    for message in messages:
        if isinstance(message, AgentFormMessage) and isinstance(message.payload, Mapping):
            call_id = message.payload.get("tool_call_id")
            if message.payload.get("kind") == "tool_approval" and isinstance(call_id, str):
                forms[call_id] = message
    return forms


def _decision(form: AgentFormMessage | None) -> bool | None:
    """The decision recorded on an approval form, if any."""
    if form is None or form.status not in ("approved", "refused"):
        return None
    return form.status == "approved"
