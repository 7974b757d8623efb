"""`AgentRunner`: the blocking driver of the turn loop.

>>> from agentctx_fast import Agent, AiMessage, InMemoryAgentStore, ScriptedChatModel
>>> agent = Agent("support", ScriptedChatModel([AiMessage("Hello!")]), instructions="Be kind.")
>>> turn = AgentRunner(InMemoryAgentStore()).run(agent, "conversation-1", "hi")
>>> turn.status, turn.final_message.text
(<TurnStatus.COMPLETED: 'completed'>, 'Hello!')
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agentctx_fast._sync import run_sync
from agentctx_fast.agent import Agent, AgentTurn
from agentctx_fast.coordinator import InMemoryCompressionStateStore, awaitable_state_store
from agentctx_fast.errors import InvalidArgumentError
from agentctx_fast.memory import AsyncChatMemory, ChatMemory, ChatMemoryProvider, awaitable_memory
from agentctx_fast.messages import Message, UserMessage
from agentctx_fast.metrics import AgentMetrics
from agentctx_fast.runner._drivers import (
    DEFAULT_CLOCK,
    Clock,
    new_keeper,
    store_label,
    store_parts,
)
from agentctx_fast.runner._engine import TurnEngine
from agentctx_fast.runner._io import BlockingTurnIO
from agentctx_fast.runner._leases import ThreadLeaseKeeper
from agentctx_fast.runner._state import check_agent, check_history
from agentctx_fast.stores._bridge import awaitable_turn_store
from agentctx_fast.stores.base import AgentStore
from agentctx_fast.stores.turns import AgentTurnStore, InMemoryAgentTurnStore
from agentctx_fast.tools import is_async_callable

if TYPE_CHECKING:
    from agentctx_fast.otel import OtelTracing


class AgentRunner:
    """Runs turns of agents over the conversations of a store (or of a memory provider).

    ``store`` supplies chat memory and the turn store (snapshots and leases); a separate
    ``chat_memory_provider`` replaces its memories. Without a store, snapshots and leases live
    in this process only. ``metrics`` receives the observations listed in
    `agentctx_fast.metrics`; ``tracing`` (an `agentctx_fast.otel.OtelTracing`, the ``otel``
    extra) makes OpenTelemetry spans of turns, model calls and tool calls; ``lease_seconds`` is
    how long a crashed process can block a conversation. An agent whose model or tools are
    ``async def`` needs `AsyncAgentRunner`.
    """

    def __init__(
        self,
        store: AgentStore | None = None,
        chat_memory_provider: ChatMemoryProvider | None = None,
        *,
        metrics: AgentMetrics | None = None,
        tracing: OtelTracing | None = None,
        lease_seconds: float = 30.0,
        clock: Clock = DEFAULT_CLOCK,
    ) -> None:
        provider, turn_store = store_parts(store, chat_memory_provider, want_async=False)
        self.turn_store: AgentTurnStore = turn_store or InMemoryAgentTurnStore()
        turns = awaitable_turn_store(self.turn_store)
        self._keeper, seconds = new_keeper(ThreadLeaseKeeper, turns, lease_seconds, clock)
        memories = None if provider is None else _memories(provider)
        states = awaitable_state_store(
            store.compression_state_store()
            if store is not None and callable(getattr(store, "compression_state_store", None))
            else InMemoryCompressionStateStore()
        )
        self._engine = TurnEngine(
            memories, turns, states, self._keeper, seconds, clock, metrics,
            tracing, store_label(store),
        )  # fmt: skip

    def close(self) -> None:
        """Stop the lease-renewing thread (turns still running stop renewing)."""
        self._keeper.close()

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
            self._engine.run(BlockingTurnIO(), agent, conversation_id, message, turn_id, metadata)
        )

    def run_history(
        self, agent: Agent, history: Sequence[Message], message: UserMessage | str
    ) -> AgentTurn:
        """Run one turn over an explicit ``history``; it is copied and nothing is written back
        (append ``turn.messages`` yourself). A suspended turn here cannot be resumed."""
        agent = _blocking_agent(agent)
        copied = check_history(history)
        return run_sync(self._engine.run_history(BlockingTurnIO(), agent, copied, message))

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
            self._engine.resume(BlockingTurnIO(), agent, conversation_id, turn_id, approvals)
        )

    def cancel(self, conversation_id: str, turn_id: str) -> AgentTurn:
        """Cancel an open turn. A suspended turn (or one whose process died) is closed now,
        its dangling tool calls answered with error results; a turn running elsewhere is
        flagged and ends as `CANCELLED` at its next step (the returned turn says RUNNING)."""
        return run_sync(self._engine.cancel(BlockingTurnIO(), conversation_id, turn_id))

    def turn(self, conversation_id: str, turn_id: str) -> AgentTurn:
        """The stored state of a turn (its messages are in chat memory)."""
        return run_sync(self._engine.turn(conversation_id, turn_id))


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


def _memories(provider: ChatMemoryProvider) -> Any:
    def locate(conversation_id: str) -> AsyncChatMemory:
        memory = provider(conversation_id)
        if not isinstance(memory, ChatMemory):
            raise InvalidArgumentError(
                f"chat_memory_provider returned {type(memory).__name__}, not a ChatMemory"
            )
        return awaitable_memory(memory)

    return locate
