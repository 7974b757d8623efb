"""`AgentRunner`: the blocking driver of the turn loop.

>>> from agentctx_fast import Agent, AiMessage, InMemoryAgentStore, ScriptedChatModel
>>> agent = Agent("support", ScriptedChatModel([AiMessage("Hello!")]), instructions="Be kind.")
>>> turn = AgentRunner(InMemoryAgentStore()).run(agent, "conversation-1", "hi")
>>> turn.status, turn.final_message.text
(<TurnStatus.COMPLETED: 'completed'>, 'Hello!')
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Self

from agentctx_fast._blocking import run_sync
from agentctx_fast.core.messages import Message, UserMessage
from agentctx_fast.errors import InvalidArgumentError
from agentctx_fast.memory import ChatMemoryProvider
from agentctx_fast.runner import _engine
from agentctx_fast.runner._drivers import Runner
from agentctx_fast.runner._io import BlockingTurnIO
from agentctx_fast.runner._state import check_agent, check_history
from agentctx_fast.runner.agent import Agent, AgentTurn
from agentctx_fast.runner.tools import is_async_callable
from agentctx_fast.stores.base import AgentStore
from agentctx_fast.stores.turn_store import AgentTurnStore


class AgentRunner(Runner[AgentStore, ChatMemoryProvider, AgentTurnStore]):
    """Runs turns of agents over the conversations of a store (or of a memory provider).

    ``store`` supplies chat memory and the turn store (snapshots and leases); a separate
    ``chat_memory_provider`` replaces its memories. Without a store, snapshots and leases live in
    this process only. ``metrics`` receives the observations listed in
    `agentctx_fast.observability.metrics`; ``tracing`` (an
    `agentctx_fast.observability.otel.OtelTracing`, the ``otel`` extra) makes OpenTelemetry spans of
    turns, model calls and tool calls; ``lease_seconds`` is how long a crashed process can block a
    conversation. An agent whose model or tools are ``async def`` needs `AsyncAgentRunner`.
    """

    blocking = True

    def close(self) -> None:
        """Stop the lease-renewing thread (turns still running stop renewing)."""
        self._keeper.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

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
        agent = _blocking_agent(agent)
        return run_sync(
            _engine.run(
                self._engine, BlockingTurnIO(), agent, conversation_id, message, turn_id, metadata
            )
        )

    def run_history(
        self, agent: Agent, history: Sequence[Message], message: UserMessage | str
    ) -> AgentTurn:
        """Run one turn over an explicit ``history``; it is copied and nothing is written back
        (append ``turn.messages`` yourself). A suspended turn here cannot be resumed."""
        agent = _blocking_agent(agent)
        copied = check_history(history)
        return run_sync(_engine.run_history(self._engine, BlockingTurnIO(), agent, copied, message))

    def resume(
        self,
        agent: Agent,
        conversation_id: str,
        turn_id: str,
        approvals: Mapping[str, bool] | None = None,
    ) -> AgentTurn:
        """Record the user's decisions on a suspended turn (``{tool_call_id: True | False}``)
        and continue it; with no approvals, continue a `RUNNING` turn whose process died once
        its lease has expired (`AgentConversationBusyError` while it is alive): a stored tool
        result is never run again, an unanswered call runs again only for an idempotent tool
        and otherwise gets an error result: "interrupted: the tool may have run; its outcome
        is unknown" once its start was recorded, "not run: …" before. Raises
        `TurnNotFoundError` for an unknown turn and `TurnStateError` for a finished one."""
        agent = _blocking_agent(agent)
        return run_sync(
            _engine.resume(
                self._engine, BlockingTurnIO(), agent, conversation_id, turn_id, approvals
            )
        )

    def cancel(self, conversation_id: str, turn_id: str) -> AgentTurn:
        """Cancel an open turn. A suspended turn (or one whose process died) is closed now,
        its dangling tool calls answered with error results; a turn running elsewhere is
        flagged and ends as `CANCELLED` at its next step (the returned turn says RUNNING)."""
        return run_sync(_engine.cancel(self._engine, BlockingTurnIO(), conversation_id, turn_id))

    def turn(self, conversation_id: str, turn_id: str) -> AgentTurn:
        """The stored state of a turn (its messages are in chat memory)."""
        return run_sync(_engine.turn(self._engine, conversation_id, turn_id))


def _blocking_agent(agent: object) -> Agent:
    """The agent, if nothing it calls is async: a coroutine must never become a tool result."""
    checked = check_agent(agent)
    if is_async_callable(getattr(checked.chat_model, "chat", None)):
        raise InvalidArgumentError(
            f"agent {checked.name!r}: its chat model is async; run it with AsyncAgentRunner"
        )
    for tool in checked.tools:
        if tool.is_async:
            raise InvalidArgumentError(
                f"agent {checked.name!r}: tool {tool.name!r} is async; run it with AsyncAgentRunner"
            )
    return checked
