"""SPEC §20: a tool that may have run is never called "not run".

A refund turn (tests/interrupt_workers.py) stops for good inside its refund (run by the turn, or
by ``resume`` once the user approved it), or right after the model's reply asking for it was
stored (before the refund was recorded as started). Another
runner then takes the conversation over once the lease has expired (seen through a clock that
is an hour ahead, so no test waits for a lease): ``run`` closes the turn, ``resume`` continues
it, ``cancel`` ends it. The refund's result says "may have run" in the first case, "not run" in
the second, and the refund is never run again (it is not idempotent).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agentctx_fast import (
    Agent,
    AgentRunner,
    AiMessage,
    ScriptedChatModel,
    TurnStatus,
    validate_tool_protocol,
)
from interrupt_workers import killed_in_turn, refund_agent, run_stopped_turn, stopped_runner
from runner_helpers import results_by_call
from store_fixtures import new_conversation_id

SPAWN = multiprocessing.get_context("spawn")
MAY_HAVE_RUN = "interrupted: the tool may have run; its outcome is unknown"
NOT_STARTED = "not run: the turn was interrupted before the tool started"
CLOSED_TEXT = {  # the "not run" text of each way the turn is taken over
    "run": "not run: the process running the turn stopped (lease expired)",
    "resume": NOT_STARTED,
    "cancel": "not run: the turn ended cancelled (cancelled)",
}


def _ahead() -> float:
    """A clock an hour ahead: every lease of the stopped turn has expired by it."""
    return time.time() + 3600.0


def _take_over(store: Any, conversation: str, where: str, then: str) -> None:
    """``then`` on the stopped turn "killed" with a runner whose clock is ahead; check the
    result its refund call ``c1`` got."""
    reruns: list[str] = []

    def refund(order_id: str) -> str:
        reruns.append(order_id)
        return "refunded again"

    agent = refund_agent(refund, AiMessage("done"))
    runner = AgentRunner(store, clock=_ahead)
    try:
        if then == "run":
            nxt = Agent("next", ScriptedChatModel([AiMessage("next answer")]))
            turn = runner.run(nxt, conversation, "anything else?")
            assert turn.status is TurnStatus.COMPLETED
            assert runner.turn(conversation, "killed").status is TurnStatus.FAILED
        elif then == "resume":
            turn = runner.resume(agent, conversation, "killed")
            assert turn.status is TurnStatus.COMPLETED and turn.final_message is not None
            assert turn.final_message.text == "done"
        else:
            turn = runner.cancel(conversation, "killed")
            assert turn.status is TurnStatus.CANCELLED
            assert runner.turn(conversation, "killed").status is TurnStatus.CANCELLED
    finally:
        runner.close()
    stored = store.chat_memory(conversation).get_messages()
    assert validate_tool_protocol(stored) == []
    result = results_by_call(m for m in stored if m.turn_id == "killed")["c1"]
    expected = CLOSED_TEXT[then] if where == "reply" else MAY_HAVE_RUN
    assert (result.text, result.is_error) == (expected, True)
    assert reruns == []  # not idempotent: never run again
    if then == "resume":  # the model was told
        (model_call,) = agent.chat_model.calls  # type: ignore[attr-defined]
        assert model_call.messages[-1].text == expected


def _wait_for(path: Path, seconds: float) -> None:
    deadline = time.time() + seconds
    while not path.exists():
        assert time.time() < deadline, f"the child never wrote {path}"
        time.sleep(0.02)


@pytest.mark.parametrize("then", ["run", "resume", "cancel"])
@pytest.mark.parametrize("where", ["tool", "approved", "reply"])
def test_a_process_killed_in_or_before_a_tool(
    process_store: tuple[str, str, Any], tmp_path: Path, where: str, then: str
) -> None:
    kind, url, store = process_store
    conversation = new_conversation_id()
    marker = tmp_path / "stopped"
    child = SPAWN.Process(target=killed_in_turn, args=(kind, url, conversation, str(marker), where))
    child.start()
    try:
        _wait_for(marker, 60)
        assert child.pid is not None
        os.kill(child.pid, signal.SIGKILL)
        child.join(10)
    finally:
        if child.is_alive():
            child.kill()
            child.join(10)
    assert child.exitcode == -signal.SIGKILL
    _take_over(store, conversation, where, then)


@pytest.mark.parametrize("then", ["run", "resume", "cancel"])
@pytest.mark.parametrize("where", ["tool", "approved", "reply"])
def test_a_runner_stopped_in_or_before_a_tool(store: Any, where: str, then: str) -> None:
    """The same on every store, the in-process one included: the turn's runner is held still
    in a thread (a paused process) while another runner takes the turn over."""
    conversation = new_conversation_id()
    stopped, release = threading.Event(), threading.Event()

    def stop() -> None:
        stopped.set()
        release.wait(60)

    paused, agent = stopped_runner(store, where, stop, lease_seconds=600.0)

    def run_paused() -> None:
        try:
            run_stopped_turn(paused, agent, where, conversation)
        except Exception:
            pass  # what the paused runner does once let go is not this test's subject

    thread = threading.Thread(target=run_paused)
    thread.start()
    try:
        assert stopped.wait(30)
        _take_over(store, conversation, where, then)
    finally:
        release.set()
        thread.join(30)
        paused.close()
