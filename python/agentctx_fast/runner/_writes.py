"""What a turn writes to its chat memory: its messages (each stored once, then kept in the
turn's state), its tool results with their events, and the updates of its approval forms."""

from __future__ import annotations

from dataclasses import replace

from agentctx_fast.core.messages import AgentFormMessage, Message, ToolMessage
from agentctx_fast.core.protocol import close_unanswered_calls
from agentctx_fast.observability import metrics as m
from agentctx_fast.runner._state import MAY_HAVE_RUN_TEXT, Engine, TurnRun, may_have_run, timed
from agentctx_fast.runner.events import ToolResultEvent
from agentctx_fast.runner.tools import ToolOutcome

HeldResult = tuple[ToolMessage, ToolOutcome]
"""A tool call's result message and the outcome it was made from."""


async def _keep(eng: Engine, run: TurnRun, messages: list[Message]) -> None:
    """Store ``messages`` (one atomic write when there are several) and keep them, with no
    event (store calls only)."""
    if run.memory is not None:
        if len(messages) == 1:
            await timed(eng, run, "append", run.memory.add_message_if_absent(messages[0]))
        elif messages:
            await timed(eng, run, "append", run.memory.add_messages_if_absent(messages))
    run.messages.extend(messages)


async def append(eng: Engine, run: TurnRun, message: Message) -> None:
    await _append_all(eng, run, [message])


async def _append_all(eng: Engine, run: TurnRun, messages: list[Message]) -> None:
    """Store ``messages`` (one atomic write when there are several) and keep them."""
    await _keep(eng, run, messages)
    for message in messages:
        if isinstance(message, ToolMessage):
            await run.io.emit(ToolResultEvent(message))


def result_message(run: TurnRun, call_id: str, tool_name: str, outcome: ToolOutcome) -> ToolMessage:
    return ToolMessage(
        call_id,
        outcome.text,
        tool_name=tool_name,
        is_error=outcome.is_error,
        message_id=f"{run.turn_id}:tool:{run.steps}:{call_id}",
        turn_id=run.turn_id,
    )


async def store_result(eng: Engine, run: TurnRun, result: HeldResult, *, emit: bool = True) -> None:
    """Store a tool result; then its `ToolResultEvent` goes out and it is counted, unless
    not ``emit`` (store calls only: the caller then calls `emit_result`)."""
    await _keep(eng, run, [result[0]])
    if emit:
        await emit_result(eng, run, result)


async def emit_result(eng: Engine, run: TurnRun, result: HeldResult) -> None:
    message, outcome = result
    await run.io.emit(ToolResultEvent(message))
    if eng.metrics is not None:
        labels = {"tool": message.tool_name or ""}
        record = eng.metrics.record
        record(m.TOOL_CALLS, 1, labels)
        record(m.TOOL_RESULT_CHARS, len(outcome.text), labels)
        if outcome.is_error:
            record(m.TOOL_ERRORS, 1, labels)
        if outcome.truncated:
            record(m.TOOL_TRUNCATIONS, 1, labels)
        if outcome.page_request:
            record(m.TOOL_PAGE_REQUESTS, 1, labels)


async def update_form(run: TurnRun, form_id: str, status: str) -> None:
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


async def close_forms(run: TurnRun, status: str) -> None:
    """The turn ended unfinished: every approval form of it still pending (those of a
    suspension, and those written in the step that was stopped) gets ``status``."""
    for message in list(run.messages):
        if isinstance(message, AgentFormMessage) and message.status == "pending":
            await update_form(run, message.message_id, status)


async def answer_calls(eng: Engine, run: TurnRun, text: str) -> None:
    """Answer every call left without a result: ``text`` ("not run: …") for a call known
    not to have started, "may have run" for one that may have (SPEC §20)."""
    closing: list[Message] = list(
        close_unanswered_calls(
            run.messages,
            lambda call_id: MAY_HAVE_RUN_TEXT if may_have_run(run, call_id) else text,
            id_prefix=run.turn_id,
            turn_id=run.turn_id,
        )
    )
    await _append_all(eng, run, closing)  # one write: the protocol is whole or unchanged
