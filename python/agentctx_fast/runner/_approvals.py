"""A suspended turn's approvals: the user's decisions recorded and the decided calls answered."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from agentctx_fast.core.messages import ToolMessage
from agentctx_fast.errors import InvalidArgumentError, TurnStateError
from agentctx_fast.runner._persist import record_started
from agentctx_fast.runner._state import REFUSED_TEXT, Engine, TurnRun
from agentctx_fast.runner._tools import invoke, step_of
from agentctx_fast.runner._writes import result_message, store_result, update_form
from agentctx_fast.runner.tools import Tool, ToolOutcome
from agentctx_fast.stores.turn_store import AgentTurnSnapshot, PendingApproval


async def decide(
    eng: Engine, run: TurnRun, pending: Sequence[PendingApproval], decisions: Mapping[str, bool]
) -> list[PendingApproval]:
    """Record each decision on its form (compare-and-set) and answer the decided calls."""
    waiting: list[PendingApproval] = []
    decided: list[tuple[PendingApproval, bool, Tool | None]] = []
    # the suspended step's results (ids may repeat across steps), wherever later steps are
    step = step_of(run.messages, pending[0].form_message_id) if pending else ()
    answered = {msg.tool_call_id for msg in step if isinstance(msg, ToolMessage)}
    for approval in pending:
        if approval.tool_call_id not in decisions:
            waiting.append(approval)
            continue
        if approval.tool_call_id in answered:
            continue  # a resume that stopped before saving the record answered it
        approved = decisions[approval.tool_call_id]
        await update_form(run, approval.form_message_id, "approved" if approved else "refused")
        run.decisions[approval.tool_call_id] = approved
        decided.append((approval, approved, run.agent.tool(approval.tool_name)))
    await record_started(
        eng,
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
            outcome = await invoke(eng, run, tool, approval.tool_call_id, approval.arguments)
        result = result_message(run, approval.tool_call_id, approval.tool_name, outcome)
        await store_result(eng, run, (result, outcome))
    return waiting


def check_approvals(approvals: object, snapshot: AgentTurnSnapshot) -> dict[str, bool]:
    if not isinstance(approvals, Mapping):
        raise InvalidArgumentError("approvals must map tool_call_id to True or False")
    pending = {p.tool_call_id for p in snapshot.pending_approvals}
    decisions: dict[str, bool] = {}
    for call_id, approved in approvals.items():
        if call_id not in pending and call_id in snapshot.decisions:
            raise TurnStateError(
                f"turn {snapshot.turn_id!r}: tool call {call_id!r} was already decided "
                "(the turn was resumed elsewhere)"
            )
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
