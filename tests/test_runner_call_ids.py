"""Tool-call ids a model reuses from one step to the next within a turn (SPEC §6: models
number their calls per step, ``call_0``, ``call_1``, …, and reuse ids legitimately).

A call is the call of its step: an approval given in one step never decides a call of a later
step with the same id, a result of an earlier step never answers it, and a turn closed early
answers it. Every store, the blocking runner and the async one (bridged to a loop thread).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from typing import Any

from agentctx_fast import (
    Agent,
    AiMessage,
    Message,
    ScriptedChatModel,
    Tool,
    ToolCall,
    ToolMessage,
    TurnStatus,
    validate_tool_protocol,
)
from async_bridge import runner_for
from runner_helpers import Recorder, check_memory
from store_fixtures import (
    every_store_kind,  # noqa: F401  (store_kind: every store)
    new_conversation_id,
)


class WindowRecorder:
    """A scripted model that keeps every window it was given."""

    def __init__(self, replies: list[AiMessage]) -> None:
        self.windows: list[list[Message]] = []
        self.model = ScriptedChatModel([self._reply(r) for r in replies])

    def _reply(self, reply: AiMessage) -> Any:
        def reply_fn(messages: Sequence[Message], tools: Sequence[Any]) -> AiMessage:
            self.windows.append(list(messages))
            return reply

        return reply_fn


def _step(call_id: str, name: str, order_id: str) -> AiMessage:
    return AiMessage(tool_calls=(ToolCall(call_id, name, json.dumps({"order_id": order_id})),))


def _agent(model: Any, refund: Recorder) -> Agent:
    return Agent(
        "support",
        model,
        tools=[
            Tool("refund", refund, requires_approval=True),
            Tool("lookup", lambda order_id: f"order {order_id}: paid"),
        ],
    )


def test_an_approval_does_not_decide_a_later_call_with_the_same_id(store: Any) -> None:
    conversation = new_conversation_id()
    refund = Recorder("refunded")
    script = WindowRecorder(
        [_step("call_0", "refund", "A"), _step("call_0", "refund", "B"), AiMessage("done")]
    )
    agent = _agent(script.model, refund)
    runner = runner_for(store)
    first = runner.run(agent, conversation, "refund A and B")
    assert first.status is TurnStatus.SUSPENDED
    second = runner.resume(agent, conversation, first.turn_id, {"call_0": True})

    # the user approved refunding A; refunding B waits for its own approval
    assert refund.calls == [{"order_id": "A"}]
    assert second.status is TurnStatus.SUSPENDED
    (pending,) = second.pending_approvals
    assert json.loads(pending.arguments) == {"order_id": "B"}
    third = runner.resume(agent, conversation, first.turn_id, {"call_0": False})
    assert third.status is TurnStatus.COMPLETED
    assert refund.calls == [{"order_id": "A"}]
    check_memory(store.chat_memory(conversation), [third])


def test_an_earlier_result_does_not_answer_an_approved_call_with_the_same_id(store: Any) -> None:
    conversation = new_conversation_id()
    refund = Recorder("refunded")
    script = WindowRecorder(
        [_step("call_0", "lookup", "A"), _step("call_0", "refund", "A"), AiMessage("done")]
    )
    agent = _agent(script.model, refund)
    runner = runner_for(store)
    first = runner.run(agent, conversation, "look up A, then refund it")
    assert first.status is TurnStatus.SUSPENDED
    turn = runner.resume(agent, conversation, first.turn_id, {"call_0": True})

    assert turn.status is TurnStatus.COMPLETED
    assert refund.calls == [{"order_id": "A"}]  # approved, so it ran
    last = script.windows[-1]
    assert validate_tool_protocol(last) == []  # the model saw the refund's result
    assert isinstance(last[-1], ToolMessage) and last[-1].text == "refunded"
    check_memory(store.chat_memory(conversation), [turn])


def test_a_cancel_answers_a_call_whose_id_an_earlier_step_used(store: Any) -> None:
    conversation = new_conversation_id()
    refund = Recorder("refunded")
    script = WindowRecorder([_step("call_0", "lookup", "A"), _step("call_0", "refund", "A")])
    runner = runner_for(store)
    suspended = runner.run(_agent(script.model, refund), conversation, "look up A, refund it")
    assert suspended.status is TurnStatus.SUSPENDED
    cancelled = runner.cancel(conversation, suspended.turn_id)

    assert cancelled.status is TurnStatus.CANCELLED
    assert refund.calls == []
    stored = store.chat_memory(conversation).get_messages()
    assert validate_tool_protocol(stored) == []  # SPEC §20: cancel leaves no unanswered call


def test_one_approval_of_a_repeated_call_id_runs_what_its_form_shows_once(store: Any) -> None:
    """A reply that repeats a call id (SPEC §6 ``duplicate_call_id``) gets one approval form
    per id, showing the first call: approving it never runs the other call's arguments."""
    conversation = new_conversation_id()
    refund = Recorder("refunded")
    reply = AiMessage(
        tool_calls=(
            ToolCall("c1", "refund", json.dumps({"order_id": "A"})),
            ToolCall("c1", "refund", json.dumps({"order_id": "B"})),
        )
    )
    agent = _agent(ScriptedChatModel([reply, AiMessage("done")]), refund)
    runner = runner_for(store)
    suspended = runner.run(agent, conversation, "refund A")
    assert suspended.status is TurnStatus.SUSPENDED
    (pending,) = suspended.pending_approvals
    form = store.chat_memory(conversation).get_message(pending.form_message_id)
    assert form is not None and form.payload["arguments"] == pending.arguments
    turn = runner.resume(agent, conversation, suspended.turn_id, {"c1": True})

    assert turn.status is TurnStatus.COMPLETED
    assert refund.calls == [json.loads(pending.arguments)]  # once, what the user approved


def test_a_resumed_interrupted_step_answers_a_call_whose_id_an_earlier_step_used(
    store: Any,
) -> None:
    """The runner is held still inside the second step's tool (a paused process) while a
    runner whose clock is an hour ahead resumes the turn: that call, whose id the first step
    used too, gets its "may have run" result, and the model sees a whole protocol."""
    conversation = new_conversation_id()
    stopped, release = threading.Event(), threading.Event()

    def ship(order_id: str) -> str:
        stopped.set()
        release.wait(60)
        return "shipped"

    tools = [Tool("lookup", lambda order_id: "paid"), Tool("ship", ship)]
    paused_model = ScriptedChatModel([_step("call_0", "lookup", "A"), _step("call_0", "ship", "A")])
    paused = runner_for(store, lease_seconds=600.0)
    out: list[Any] = []

    def run_paused() -> None:
        try:
            out.append(
                paused.run(Agent("a", paused_model, tools=tools), conversation, "go", turn_id="t1")
            )
        except Exception as error:  # what the paused runner does once let go is not the subject
            out.append(error)

    thread = threading.Thread(target=run_paused)
    thread.start()
    try:
        assert stopped.wait(30)
        script = WindowRecorder([AiMessage("done")])
        later = runner_for(store, clock=lambda: time.time() + 3600.0)
        turn = later.resume(Agent("a", script.model, tools=tools), conversation, "t1")
    finally:
        release.set()
        thread.join(30)
    assert turn.status is TurnStatus.COMPLETED
    (window,) = script.windows
    assert validate_tool_protocol(window) == []
    assert isinstance(window[-1], ToolMessage) and window[-1].tool_call_id == "call_0"
    assert window[-1].text == "interrupted: the tool may have run; its outcome is unknown"
    assert validate_tool_protocol(store.chat_memory(conversation).get_messages()) == []


def _stranded_resume_taken_again() -> tuple[Any, str, Any, Recorder]:
    """A resume ran the approved call, stored its result and the model's next reply, then
    stopped (its process paused in the next step's tool) with the turn's record still the
    suspended one; the same resume sent again once that lease expired takes the suspension
    back (SPEC §20) and completes. The store, conversation, retried turn and approved tool."""
    from agentctx_fast import AgentRunner, InMemoryAgentStore

    store = InMemoryAgentStore()
    conversation = new_conversation_id()
    lookup = Recorder("order A: paid")
    entered, release = threading.Event(), threading.Event()

    def track(order_id: str) -> str:
        if entered.is_set():
            return "in transit"  # the retry runs the stored later step's call again
        entered.set()
        assert release.wait(30)
        return "late"

    def agent(*replies: AiMessage) -> Agent:
        tools = [
            Tool("lookup", lookup, requires_approval=True, idempotent=True),
            Tool("track", track, idempotent=True),
        ]
        return Agent("support", ScriptedChatModel(list(replies)), tools=tools)

    first = AgentRunner(store, lease_seconds=5.0)
    suspended = first.run(agent(_step("call_0", "lookup", "A")), conversation, "look up A")
    assert suspended.status is TurnStatus.SUSPENDED
    outcome: list[object] = []

    def paused_resume() -> None:
        try:
            outcome.append(first.resume(agent(_step("call_1", "track", "A")), conversation,
                                        suspended.turn_id, {"call_0": True}))  # fmt: skip
        except Exception as error:  # the lease is lost once the retry took the turn
            outcome.append(error)

    thread = threading.Thread(target=paused_resume)
    thread.start()
    try:
        assert entered.wait(30)
        assert lookup.calls == [{"order_id": "A"}]
        retry = AgentRunner(store, lease_seconds=5.0, clock=lambda: time.time() + 60.0)
        try:
            turn = retry.resume(agent(AiMessage("done")), conversation, suspended.turn_id,
                                {"call_0": True})  # fmt: skip
        finally:
            retry.close()
    finally:
        release.set()
        thread.join(30)
        first.close()
    assert turn.status is TurnStatus.COMPLETED
    return store, conversation, turn, lookup


def test_a_stranded_resume_taken_again_does_not_run_its_approved_call_twice() -> None:
    """The approved call's result, stored before the later reply, answers it."""
    _, _, _, lookup = _stranded_resume_taken_again()
    assert lookup.calls == [{"order_id": "A"}]  # approved once, run once


def test_a_stranded_resume_taken_again_stores_a_whole_turn() -> None:
    store, conversation, turn, _ = _stranded_resume_taken_again()
    stored = store.chat_memory(conversation).get_messages()
    assert validate_tool_protocol(stored) == []
    assert [m.text for m in stored if isinstance(m, ToolMessage)] == ["order A: paid", "in transit"]
    assert stored[-1].text == "done"
    check_memory(store.chat_memory(conversation), [turn])
