"""Runner work done in child processes by tests/test_runner_reliability.py.

Every function builds its own store from a URL and its own runner and scripted model, and
returns plain data (ids, texts, status values), never library objects.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentctx_fast import (
    Agent,
    AgentConversationBusyError,
    AgentCtxError,
    AgentRunner,
    AiMessage,
    Message,
    ScriptedChatModel,
    Tool,
    ToolCall,
    ToolMessage,
)
from store_workers import open_store

REFUND_ARGUMENTS = json.dumps({"order_id": "ORD-2024-001"})


def race_turns(
    kind: str,
    url: str,
    conversation_id: str,
    worker: int,
    attempts: int,
    model_seconds: float,
    start_at: float,
) -> list[tuple[str, str, Any, list[str], tuple[float, float] | None]]:
    """``attempts`` runs on one conversation, starting at ``start_at`` (wall clock).

    Each outcome is ``("ok", turn_id, status, message_ids, (model_start, model_end))`` or
    ``("busy", turn_id, open_turn_id, [], None)``.
    """
    store = open_store(kind, url)
    runner = AgentRunner(store)
    outcomes: list[tuple[str, str, Any, list[str], tuple[float, float] | None]] = []
    try:
        time.sleep(max(0.0, start_at - time.time()))
        for attempt in range(attempts):
            turn_id = f"p{worker}-{attempt}"
            spans: list[tuple[float, float]] = []

            def reply(
                messages: Sequence[Message],
                tools: Sequence[Any],
                spans: list[tuple[float, float]] = spans,
                turn_id: str = turn_id,
            ) -> AiMessage:
                start = time.time()
                time.sleep(model_seconds)
                spans.append((start, time.time()))
                return AiMessage(f"answer of {turn_id}")

            agent = Agent("racer", ScriptedChatModel([reply]))
            try:
                turn = runner.run(agent, conversation_id, f"question of {turn_id}", turn_id=turn_id)
            except AgentConversationBusyError as error:
                outcomes.append(("busy", turn_id, error.turn_id, [], None))
                time.sleep(model_seconds * (0.5 + 0.25 * worker))  # spread the retries
                continue
            outcomes.append(
                ("ok", turn_id, turn.status.value, [m.message_id for m in turn.messages], spans[0])
            )
    finally:
        runner.close()
        store.close()
    return outcomes


def crash_in_turn(
    kind: str,
    url: str,
    conversation_id: str,
    turn_id: str,
    marker: str,
    where: str,
    lease_seconds: float,
) -> None:
    """Run a turn that blocks for ever (the parent SIGKILLs this process) after writing
    ``marker``: in its tool (``where="tool"``, so the AI message's call has no result) or in
    the model call after the tool result (``where="model"``)."""
    store = open_store(kind, url)
    runner = AgentRunner(store, lease_seconds=lease_seconds)

    def block() -> None:
        Path(marker).write_text(str(os.getpid()))
        time.sleep(600)

    def slow_tool() -> str:
        if where == "tool":
            block()
        return "tool result"

    def second_reply(messages: Sequence[Message], tools: Sequence[Any]) -> AiMessage:
        block()
        return AiMessage("never")

    model = ScriptedChatModel([AiMessage(None, (ToolCall("c1", "slow_tool", "{}"),)), second_reply])
    agent = Agent("crasher", model, tools=[Tool("slow_tool", slow_tool)])
    runner.run(agent, conversation_id, "do the long thing", turn_id=turn_id)


def _refund(order_id: str) -> str:
    return json.dumps({"refunded": order_id, "pid": os.getpid()})


def _approval_reply(messages: Sequence[Message], tools: Sequence[Any]) -> AiMessage:
    last = messages[-1]
    if isinstance(last, ToolMessage):
        return AiMessage(f"after: {last.text}")
    return AiMessage(None, (ToolCall("c1", "refund", REFUND_ARGUMENTS),))


def approval_agent() -> Agent:
    """The same agent definition in every process: a refund that needs approval."""
    refund = Tool("refund", _refund, requires_approval=True)
    return Agent("support", ScriptedChatModel([_approval_reply], cycle=True), tools=[refund])


def suspend_turn(
    kind: str, url: str, conversation_ids: Sequence[str]
) -> tuple[int, list[tuple[str, str, list[tuple[str, str, str, str]]]]]:
    """Start a turn needing approval on each conversation; returns this pid and, per turn,
    ``(turn_id, status, pending approvals as tuples)``."""
    store = open_store(kind, url)
    runner = AgentRunner(store)
    out = []
    try:
        for conversation_id in conversation_ids:
            turn = runner.run(approval_agent(), conversation_id, "refund ORD-2024-001 please")
            pending = [
                (p.tool_call_id, p.tool_name, p.arguments, p.form_message_id)
                for p in turn.pending_approvals
            ]
            out.append((turn.turn_id, turn.status.value, pending))
    finally:
        runner.close()
        store.close()
    return os.getpid(), out


def resume_turn(
    kind: str, url: str, conversation_id: str, turn_id: str, approvals: dict[str, bool]
) -> tuple[int, str, Any, Any]:
    """Resume with a fresh runner; returns ``(pid, "ok", status, final text)`` or
    ``(pid, "error", error class name, message)``."""
    store = open_store(kind, url)
    runner = AgentRunner(store)
    try:
        turn = runner.resume(approval_agent(), conversation_id, turn_id, approvals)
    except AgentCtxError as error:
        return os.getpid(), "error", type(error).__name__, str(error)
    finally:
        runner.close()
        store.close()
    final = turn.final_message.text if turn.final_message is not None else None
    return os.getpid(), "ok", turn.status.value, final
