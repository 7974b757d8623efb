"""A cancel `cancel` acknowledged (it returned the turn as RUNNING: flagged, SPEC §11) ends the
turn CANCELLED, whatever the turn was about to do: here, suspend for an approval. Every store,
the blocking runner and the async one (bridged to a loop thread)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from agentctx_fast import (
    Agent,
    AgentRunner,
    AgentTurn,
    AiMessage,
    ScriptedChatModel,
    Tool,
    ToolCall,
    TurnStatus,
    validate_tool_protocol,
)
from async_bridge import runner_for
from runner_helpers import Recorder
from store_fixtures import (
    STORE_KINDS,
    every_store_kind,  # noqa: F401  (store_kind: every store)
    new_conversation_id,
)


def _refund_after_a_held_lookup() -> tuple[Agent, Recorder, threading.Event, threading.Event]:
    """An agent whose one reply calls ``refund`` (needs approval: the step suspends) and
    ``lookup``, which sets ``entered`` and runs until ``release`` is set; the refund's
    recorder."""
    entered, release = threading.Event(), threading.Event()

    def lookup() -> str:
        entered.set()
        assert release.wait(20), "the test never released the tool"
        return "paid"

    refund = Recorder("refunded")
    reply = AiMessage(tool_calls=(ToolCall("c1", "refund", "{}"), ToolCall("c2", "lookup", "{}")))
    agent = Agent(
        "a",
        ScriptedChatModel([reply]),
        tools=[Tool("refund", refund, requires_approval=True), Tool("lookup", lookup)],
    )
    return agent, refund, entered, release


def test_a_cancel_from_another_runner_during_a_step_that_suspends_cancels(store: Any) -> None:
    conversation = new_conversation_id()
    agent, refund, entered, release = _refund_after_a_held_lookup()
    running, other = runner_for(store), runner_for(store)  # two service instances
    out: list[Any] = []

    def target() -> None:
        try:
            out.append(running.run(agent, conversation, "refund it", turn_id="t1"))
        except BaseException as error:  # reported to the test
            out.append(error)

    thread = threading.Thread(target=target)
    thread.start()
    try:
        assert entered.wait(20)
        assert other.cancel(conversation, "t1").status is TurnStatus.RUNNING  # flagged
    finally:
        release.set()
        thread.join(20)
    (turn,) = out
    assert isinstance(turn, AgentTurn), turn
    assert turn.status is TurnStatus.CANCELLED
    assert other.turn(conversation, "t1").status is TurnStatus.CANCELLED
    assert refund.calls == []
    assert validate_tool_protocol(store.chat_memory(conversation).get_messages()) == []
    nxt = other.run(Agent("b", ScriptedChatModel([AiMessage("free")])), conversation, "next")
    assert nxt.status is TurnStatus.COMPLETED  # the conversation is free


class _HookedStore:
    """``store`` whose turn store runs ``before_cancel()`` before it flags a turn (the
    moment between a cancel reading the lease and flagging it)."""

    def __init__(self, store: Any, before_cancel: Any) -> None:
        self._store = store
        self._before_cancel = before_cancel

    def chat_memory_provider(self) -> Any:
        return self._store.chat_memory_provider()

    def compression_state_store(self) -> Any:
        return self._store.compression_state_store()

    def turn_store(self) -> Any:
        inner, hook = self._store.turn_store(), self._before_cancel

        class Hooked:
            def __getattr__(self, name: str) -> Any:
                return getattr(inner, name)

            def request_cancel(self, *args: Any) -> bool:
                hook()
                return bool(inner.request_cancel(*args))

        return Hooked()


@pytest.mark.parametrize("store_kind", STORE_KINDS)
def test_a_cancel_that_finds_the_turn_suspended_when_it_flags_it_cancels_it(store: Any) -> None:
    conversation = new_conversation_id()
    agent, refund, entered, release = _refund_after_a_held_lookup()
    out: list[Any] = []

    def target() -> None:
        try:
            out.append(AgentRunner(store).run(agent, conversation, "refund it", turn_id="t1"))
        except BaseException as error:  # reported to the test
            out.append(error)

    thread = threading.Thread(target=target)

    def suspend_meanwhile() -> None:  # the turn suspends before the cancel flags it
        release.set()
        thread.join(20)

    thread.start()
    try:
        assert entered.wait(20)
        AgentRunner(_HookedStore(store, suspend_meanwhile)).cancel(conversation, "t1")
    finally:
        release.set()
        thread.join(20)
    (suspended,) = out
    assert isinstance(suspended, AgentTurn) and suspended.status is TurnStatus.SUSPENDED
    runner = AgentRunner(store)
    assert runner.turn(conversation, "t1").status is TurnStatus.CANCELLED
    assert refund.calls == []
    assert validate_tool_protocol(store.chat_memory(conversation).get_messages()) == []
    nxt = runner.run(Agent("b", ScriptedChatModel([AiMessage("free")])), conversation, "next")
    assert nxt.status is TurnStatus.COMPLETED  # the conversation is free
