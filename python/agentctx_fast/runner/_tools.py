"""A step's tool calls: which run, which wait for approval, and running them (SPEC §20)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from agentctx_fast.core.messages import AgentFormMessage, AiMessage, Message, ToolCall, ToolMessage
from agentctx_fast.runner._persist import record_started
from agentctx_fast.runner._state import (
    MAY_HAVE_RUN_TEXT,
    NOT_STARTED_TEXT,
    REFUSED_TEXT,
    Engine,
    TurnRun,
    check_lease,
    checkpoint,
    may_have_run,
)
from agentctx_fast.runner._tool_errors import reported
from agentctx_fast.runner._writes import HeldResult, append, result_message, store_result
from agentctx_fast.runner.events import ToolCallEvent
from agentctx_fast.runner.tools import Tool, ToolOutcome
from agentctx_fast.stores.turn_store import PendingApproval


async def call_tools(
    eng: Engine, run: TurnRun, ai: AiMessage, *, interrupted: bool = False, hold_last: bool = False
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
    stored, for the caller to store with what follows it (`store_result`).
    """
    step = current_step(run.messages)  # ``ai`` is the turn's last reply
    answered = {m.tool_call_id for m in step if isinstance(m, ToolMessage)}
    forms = _forms(step) if interrupted else {}
    planned: list[tuple[int, ToolCall, Tool | None, _Action]] = []
    seen: set[str] = set()
    for index, call in enumerate(ai.tool_calls):
        if call.id in seen:
            # A reply that repeats a call id (SPEC §6: "duplicate_call_id") has room for one
            # result and one approval form per id: only the first call with it is run or
            # asked about, so an approval never runs arguments its form did not show.
            continue
        seen.add(call.id)
        if interrupted and call.id in answered:
            continue
        tool = run.agent.tool(call.name)
        planned.append((index, call, tool, _plan(run, call, tool, forms, interrupted)))
    await record_started(
        eng,
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
            waiting.append(await _ask_approval(eng, run, call.id, call.name, call.arguments))
            continue
        if isinstance(action, AgentFormMessage):
            waiting.append(PendingApproval(call.id, call.name, call.arguments, action.message_id))
            continue
        if action == "invoke":
            assert tool is not None
            outcome = await invoke(eng, run, tool, call.id, call.arguments)
        else:
            outcome = action
        result = (result_message(run, call.id, call.name, outcome), outcome)
        if hold_last and index == last:
            held = result
        else:
            await store_result(eng, run, result)
    return waiting, held


async def _ask_approval(
    eng: Engine, run: TurnRun, call_id: str, tool_name: str, arguments: str
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
    await append(eng, run, form)
    return PendingApproval(call_id, tool_name, arguments, form.message_id)


async def invoke(
    eng: Engine, run: TurnRun, tool: Tool, call_id: str, arguments: str
) -> ToolOutcome:
    """Run a tool unless the turn was cancelled or taken over. A tool that ran has its
    result written even when a cancel came meanwhile (the side effect happened); the
    cancel stops the turn at the next check."""
    await checkpoint(eng, run)
    run.not_started.discard(call_id)  # from here on it may have run
    tracing = eng.tracing
    if tracing is None:
        outcome = await _called(run, tool, call_id, arguments)
    else:
        with tracing.tool(tool.name, call_id, arguments) as span:
            outcome = await _called(run, tool, call_id, arguments)
            tracing.tool_done(span, outcome)
    await check_lease(eng, run)
    return outcome


async def _called(run: TurnRun, tool: Tool, call_id: str, arguments: str) -> ToolOutcome:
    return reported(run, tool.name, call_id, await run.io.invoke(tool, arguments))


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
    decision = _decision(form)  # only this step's form decides: a later step may reuse an id
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


def current_step(messages: Sequence[Message]) -> Sequence[Message]:
    """The messages after the turn's last reply: its step's forms and results. A call id is
    the call of its step (models number calls per step, SPEC §6), so a form or result of an
    earlier step with the same id says nothing about it."""
    last = next(
        (i for i in range(len(messages) - 1, -1, -1) if isinstance(messages[i], AiMessage)), -1
    )
    return messages[last + 1 :]


def step_of(messages: Sequence[Message], message_id: str) -> Sequence[Message]:
    """The messages between the replies around ``message_id`` (an approval form): the step
    it belongs to, even when later steps were stored after it (a resume that stopped after
    the model's next reply, its record still the suspended one); the last step when the
    message is not there."""
    at = next((i for i, m in enumerate(messages) if m.message_id == message_id), None)
    if at is None:
        return current_step(messages)
    start = next((i for i in range(at, -1, -1) if isinstance(messages[i], AiMessage)), -1)
    end = next(
        (i for i in range(at, len(messages)) if isinstance(messages[i], AiMessage)), len(messages)
    )
    return messages[start + 1 : end]


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
