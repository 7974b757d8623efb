"""A refund turn stopped in its tool or just before it (tests/test_runner_interrupted.py).

SPEC §20: a tool that may have run is never called "not run". The turn's model asks for one
refund (call ``c1``, a tool without ``idempotent=True``); the turn stops for good either inside
the refund (``where="tool"``: it may have run), inside the refund run by ``resume`` once the
user approved it (``where="approved"``: the refund needs approval; it may have run), or right
after the reply asking for it was stored, before the refund was recorded as started
(``where="reply"``: it did not run). Module level, so a spawned child process can import it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agentctx_fast import (
    Agent,
    AgentRunner,
    AiMessage,
    ChatMemory,
    Message,
    ScriptedChatModel,
    Tool,
    ToolCall,
    TurnStatus,
)
from store_workers import open_store

REFUND_ARGUMENTS = json.dumps({"order_id": "ORD-2024-001"})


def refund_agent(refund: Callable[..., str], *replies: AiMessage, approval: bool = False) -> Agent:
    """The agent of the turn: a refund asked for as call ``c1``, then ``replies``."""
    model = ScriptedChatModel([AiMessage(None, (ToolCall("c1", "refund", REFUND_ARGUMENTS),))])
    if replies:
        model = ScriptedChatModel(list(replies))
    return Agent("refunds", model, tools=[Tool("refund", refund, requires_approval=approval)])


class StopAfterReply(ChatMemory):
    """A chat memory that calls ``stop()`` once it has stored a model reply with tool calls:
    the turn stops before any of its tools is recorded as started or runs."""

    def __init__(self, memory: ChatMemory, stop: Callable[[], None]) -> None:
        self._memory = memory
        self._stop = stop

    def add_message_if_absent(self, message: Message) -> bool:
        added = self._memory.add_message_if_absent(message)
        if isinstance(message, AiMessage) and message.tool_calls:
            self._stop()
        return added

    def add_messages_if_absent(self, messages: Sequence[Message]) -> list[bool]:
        return self._memory.add_messages_if_absent(messages)

    def get_messages(self, count: int | None = None, *, offset: int = 0) -> list[Message]:
        return self._memory.get_messages(count, offset=offset)

    def get_message(self, message_id: str) -> Message | None:
        return self._memory.get_message(message_id)

    def update_message(self, message: Message, expected_version: int) -> Message:
        return self._memory.update_message(message, expected_version)

    def message_count(self) -> int:
        return self._memory.message_count()

    def clear(self) -> None:
        self._memory.clear()


def stopped_runner(store: Any, where: str, stop: Callable[[], None], **options: Any) -> Any:
    """A runner on ``store`` whose turn calls ``stop()`` where it is to stop, and its agent."""

    def stopping(conversation_id: str) -> ChatMemory:
        return StopAfterReply(store.chat_memory(conversation_id), stop)

    def refund(order_id: str) -> str:
        if where in ("tool", "approved"):
            stop()
        return f"refunded {order_id}"

    provider = stopping if where == "reply" else None
    agent = refund_agent(refund, approval=where == "approved")
    return AgentRunner(store, provider, **options), agent


def run_stopped_turn(runner: Any, agent: Agent, where: str, conversation_id: str) -> None:
    """The turn "killed" run until it stops (with ``where="approved"``: suspended, then
    resumed with the refund approved)."""
    turn = runner.run(agent, conversation_id, "refund ORD-2024-001", turn_id="killed")
    if where == "approved":
        assert turn.status is TurnStatus.SUSPENDED, turn
        runner.resume(agent, conversation_id, "killed", {"c1": True})


def killed_in_turn(kind: str, url: str, conversation_id: str, marker: str, where: str) -> None:
    """Run the refund turn; where it is to stop, write ``marker`` and block (the parent
    SIGKILLs this process). Its lease (600 s) outlives the test: the parent sees it expired
    through a clock that is ahead."""
    store = open_store(kind, url)

    def block() -> None:
        Path(marker).write_text(str(os.getpid()))
        time.sleep(600)

    runner, agent = stopped_runner(store, where, block, lease_seconds=600.0)
    run_stopped_turn(runner, agent, where, conversation_id)
