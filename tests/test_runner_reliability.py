"""Runner reliability on the real stores: racing threads and processes on one conversation, a
process killed in the middle of a turn, and a turn suspended in one process and resumed in
another (SPEC §11: busy protection through a lease a crashed process cannot hold for ever)."""

from __future__ import annotations

import itertools
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from agentctx_fast import (
    Agent,
    AgentConversationBusyError,
    AgentRunner,
    AgentTurn,
    AiMessage,
    ScriptedChatModel,
    Tool,
    ToolMessage,
    TurnNotFoundError,
    TurnStatus,
    validate_tool_protocol,
)
from async_bridge import runner_for
from runner_helpers import ConcurrencyProbe, check_memory, ids, results_by_call
from runner_workers import REFUND_ARGUMENTS, crash_in_turn, race_turns, resume_turn, suspend_turn
from store_fixtures import make_store, new_conversation_id

SPAWN = multiprocessing.get_context("spawn")
LEASE_OF_THE_KILLED = 30.0
"""The killed child's lease: long, so the checks that it is still alive never race it; its
expiry is then reached with a runner whose clock is past it (`past_expiry`), not by sleeping."""


def past_expiry(expires_at: float) -> Callable[[], float]:
    """A runner's clock that reads just past ``expires_at`` now and runs on from there."""
    shift = expires_at + 0.1 - time.time()
    return lambda: time.time() + shift


REFUSED = "refused by the user"  # SPEC §11
MAY_HAVE_RUN = "interrupted: the tool may have run; its outcome is unknown"  # SPEC §20


def _check_race(
    store: Any, conversation: str, ok: dict[str, list[str]], busy: list[tuple[str, str]]
) -> list[str]:
    """Busy runs wrote nothing and name a turn that ran; every completed turn is stored whole
    and contiguous, nothing lost or duplicated. Returns the turn ids in stored order."""
    assert len(ok) >= 2 and busy, (len(ok), len(busy))
    for turn_id, holder in busy:
        assert holder in ok, (turn_id, holder)
    stored = store.chat_memory(conversation).get_messages()
    order = list(dict.fromkeys(m.turn_id for m in stored))
    assert sorted(order) == sorted(ok)
    assert ids(stored) == [message_id for turn_id in order for message_id in ok[turn_id]]
    assert all(len(message_ids) == 2 for message_ids in ok.values())
    assert len(set(ids(stored))) == len(stored)
    assert all(m.version == 0 for m in stored)
    assert validate_tool_protocol(stored) == []
    runner = AgentRunner(store)
    for turn_id, _ in busy:
        with pytest.raises(TurnNotFoundError):
            runner.turn(conversation, turn_id)
    for turn_id in ok:
        assert runner.turn(conversation, turn_id).status is TurnStatus.COMPLETED
    return order


def test_threads_race_on_one_conversation(store: Any) -> None:
    conversation = new_conversation_id()
    probe = ConcurrencyProbe(0.05)
    threads, attempts = 8, 3
    barrier = threading.Barrier(threads)
    ok: dict[str, list[str]] = {}
    busy: list[tuple[str, str]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker(number: int) -> None:
        runner = AgentRunner(store)  # one runner per thread, like one per service instance
        try:
            barrier.wait(10)
            for attempt in range(attempts):
                turn_id = f"t{number}-{attempt}"
                agent = Agent("racer", ScriptedChatModel([probe]))
                try:
                    turn = runner.run(agent, conversation, f"q {turn_id}", turn_id=turn_id)
                except AgentConversationBusyError as error:
                    with lock:
                        busy.append((turn_id, error.turn_id))
                    time.sleep(0.02 * (1 + number % 4))  # spread the retries past one turn
                    continue
                assert turn.status is TurnStatus.COMPLETED
                with lock:
                    ok[turn_id] = ids(turn.messages)
        except BaseException as error:  # reported below
            errors.append(error)
        finally:
            runner.close()

    pool = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join(60)
    assert errors == []
    assert probe.peak == 1  # never two model calls of the conversation at once
    assert probe.entered == len(ok)
    assert len(ok) + len(busy) == threads * attempts
    _check_race(store, conversation, ok, busy)


def test_processes_race_on_one_conversation(process_store: tuple[str, str, Any]) -> None:
    kind, url, store = process_store
    conversation = new_conversation_id()
    processes, attempts = 4, 3
    with ProcessPoolExecutor(processes, mp_context=SPAWN) as pool:
        start_at = time.time() + 2.5  # a wall-clock barrier once every child has started
        futures = [
            pool.submit(race_turns, kind, url, conversation, n, attempts, 0.15, start_at)
            for n in range(processes)
        ]
        outcomes = [o for f in futures for o in f.result(timeout=60)]
    assert len(outcomes) == processes * attempts
    ok = {turn_id: message_ids for what, turn_id, _, message_ids, _ in outcomes if what == "ok"}
    spans = {turn_id: span for what, turn_id, _, _, span in outcomes if what == "ok"}
    assert all(status == "completed" for what, _, status, _, _ in outcomes if what == "ok")
    busy = [(turn_id, holder) for what, turn_id, holder, _, _ in outcomes if what == "busy"]
    assert len(ok) + len(busy) == len(outcomes)
    order = _check_race(store, conversation, ok, busy)
    # The model calls of the turns (in the order they were stored) never overlapped.
    ordered = [spans[turn_id] for turn_id in order]
    for earlier, later in itertools.pairwise(ordered):
        assert earlier is not None and later is not None
        assert later[0] >= earlier[1], "two model calls of one conversation overlapped"


def _wait_for(path: Path, seconds: float) -> None:
    deadline = time.time() + seconds
    while not path.exists():
        assert time.time() < deadline, f"the child never wrote {path}"
        time.sleep(0.02)


@pytest.mark.parametrize("where", ["tool", "model"])
def test_a_process_killed_mid_turn(
    process_store: tuple[str, str, Any], tmp_path: Path, where: str
) -> None:
    kind, url, store = process_store
    conversation = new_conversation_id()
    marker = tmp_path / "in-turn"
    child = SPAWN.Process(
        target=crash_in_turn,
        args=(kind, url, conversation, "killed", str(marker), where, LEASE_OF_THE_KILLED),
    )
    child.start()
    try:
        _wait_for(marker, 30)
        memory = store.chat_memory(conversation)
        written = memory.get_messages()
        assert [type(m).__name__ for m in written][:2] == ["UserMessage", "AiMessage"]
        assert child.pid is not None
        os.kill(child.pid, signal.SIGKILL)
        child.join(10)
    finally:
        if child.is_alive():
            child.kill()
            child.join(10)
    assert child.exitcode == -signal.SIGKILL

    runner = AgentRunner(store, lease_seconds=1.0)
    try:
        model = ScriptedChatModel([AiMessage("after the crash")])
        with pytest.raises(AgentConversationBusyError) as busy:
            runner.run(Agent("next", model), conversation, "too early")
        assert busy.value.turn_id == "killed"
        assert model.calls == []
        assert memory.get_messages() == written  # the refused run wrote nothing

        lease = runner.turn_store.open_turn(conversation)
        assert lease is not None and lease.turn_id == "killed" and lease.expires_at is not None
        runner.close()
        runner = AgentRunner(store, lease_seconds=1.0, clock=past_expiry(lease.expires_at))
        turn = runner.run(Agent("next", model), conversation, "after expiry")
        assert turn.status is TurnStatus.COMPLETED
        assert runner.turn(conversation, "killed").status is TurnStatus.FAILED
    finally:
        runner.close()

    stored = memory.get_messages()
    assert validate_tool_protocol(stored) == []
    assert stored[: len(written)] == written  # nothing of the killed turn was removed
    killed = [m for m in stored if m.turn_id == "killed"]
    results = results_by_call(killed)
    assert set(results) == {"c1"}
    if where == "tool":  # the dangling call was answered by the recovery (SPEC §20)
        assert (results["c1"].text, results["c1"].is_error) == (MAY_HAVE_RUN, True)
        assert results["c1"].message_id not in ids(written)
    else:
        assert not results["c1"].is_error and results["c1"] in written
    recovered = AgentTurn("killed", conversation, TurnStatus.FAILED, tuple(killed))
    check_memory(memory, [recovered, turn])


def test_suspend_in_one_process_resume_in_another(process_store: tuple[str, str, Any]) -> None:
    kind, url, store = process_store
    approve, refuse = new_conversation_id(), new_conversation_id()
    fresh = {"mp_context": SPAWN, "max_tasks_per_child": 1}  # a new process for every task
    with ProcessPoolExecutor(1, **fresh) as pool:
        suspend_pid, suspended = pool.submit(suspend_turn, kind, url, [approve, refuse]).result(60)
    (approve_turn, status_a, pending_a), (refuse_turn, status_r, pending_r) = suspended
    assert status_a == status_r == "suspended"
    for pending, conversation in ((pending_a, approve), (pending_r, refuse)):
        ((call_id, tool_name, arguments, form_id),) = pending
        assert (call_id, tool_name, arguments) == ("c1", "refund", REFUND_ARGUMENTS)
        form = store.chat_memory(conversation).get_message(form_id)
        assert form is not None and form.status == "pending" and form.version == 0

    with ProcessPoolExecutor(1, **fresh) as pool:
        first = pool.submit(resume_turn, kind, url, approve, approve_turn, {"c1": True})
        second = pool.submit(resume_turn, kind, url, refuse, refuse_turn, {"c1": False})
        approved, refused = first.result(60), second.result(60)
        again = pool.submit(resume_turn, kind, url, approve, approve_turn, {"c1": True}).result(60)

    pid_a, outcome_a, status_a, final_a = approved
    assert (outcome_a, status_a) == ("ok", "completed")
    assert pid_a != suspend_pid
    result_a = results_by_call(store.chat_memory(approve).get_messages())["c1"]
    assert not result_a.is_error
    assert f'"pid": {pid_a}' in result_a.text  # the tool ran in the resuming process
    assert final_a == f"after: {result_a.text}"

    pid_r, outcome_r, status_r, final_r = refused
    assert (outcome_r, status_r, final_r) == ("ok", "completed", f"after: {REFUSED}")
    assert pid_r not in (suspend_pid, pid_a)
    result_r = results_by_call(store.chat_memory(refuse).get_messages())["c1"]
    assert (result_r.text, result_r.is_error) == (REFUSED, True)

    pid_again, outcome, error_class, _ = again
    assert (outcome, error_class) == ("error", "TurnStateError")
    assert pid_again not in (suspend_pid, pid_a, pid_r)

    runner = AgentRunner(store)
    for conversation, turn_id, decision in (
        (approve, approve_turn, "approved"),
        (refuse, refuse_turn, "refused"),
    ):
        assert runner.turn(conversation, turn_id).status is TurnStatus.COMPLETED
        stored = store.chat_memory(conversation).get_messages()
        assert len([m for m in stored if isinstance(m, ToolMessage)]) == 1  # ran once
        forms = [m for m in stored if type(m).__name__ == "AgentFormMessage"]
        assert [(f.status, f.version) for f in forms] == [(decision, 1)]
        check_memory(
            store.chat_memory(conversation),
            [AgentTurn(turn_id, conversation, TurnStatus.COMPLETED, tuple(stored))],
        )
        nxt = runner.run(Agent("a", ScriptedChatModel([AiMessage("free")])), conversation, "hi")
        assert nxt.status is TurnStatus.COMPLETED


@pytest.mark.parametrize("driver", ["blocking", "async"])
@pytest.mark.parametrize(
    ("where", "idempotent"), [("tool", False), ("tool", True), ("model", False)]
)
def test_a_killed_turn_is_resumed(
    process_store: tuple[str, str, Any],
    tmp_path: Path,
    where: str,
    idempotent: bool,
    driver: str,
    request: pytest.FixtureRequest,
) -> None:
    """SPEC §11: ``resume`` with no approvals continues a RUNNING turn whose process died, once
    its lease expired: a stored result is never run again, an unanswered call runs again only
    for an idempotent tool, otherwise the model sees that the tool may have run (SPEC §20)."""
    kind, url, blocking_store = process_store
    conversation = new_conversation_id()
    # the blocking runner, or the async runner on the async store (bridged to a loop thread);
    # made before the kill, so that its setup (a cluster's slot map) does not eat the lease
    store = blocking_store if driver == "blocking" else make_store(f"async-{kind}", request)
    _kill_mid_turn(kind, url, conversation, tmp_path / "in-turn", where)
    memory = store.chat_memory(conversation)
    written = memory.get_messages()
    reruns: list[str] = []

    def slow_tool() -> str:
        reruns.append("ran")
        return "tool result, run again"

    model = ScriptedChatModel([AiMessage("done after the crash")])
    agent = Agent("crasher", model, tools=[Tool("slow_tool", slow_tool, idempotent=idempotent)])
    runner = runner_for(store, lease_seconds=1.0)
    try:
        with pytest.raises(AgentConversationBusyError) as busy:
            runner.resume(agent, conversation, "killed")  # its lease is still alive
        assert busy.value.turn_id == "killed"
        assert memory.get_messages() == written and model.calls == []
        lease = store.turn_store().open_turn(conversation)
        assert lease is not None and lease.expires_at is not None
        runner.close()
        runner = runner_for(store, lease_seconds=1.0, clock=past_expiry(lease.expires_at))
        turn = runner.resume(agent, conversation, "killed")
        assert runner.turn(conversation, "killed").status is TurnStatus.COMPLETED
        stored = memory.get_messages()
    finally:
        runner.close()
        if store is not blocking_store:
            store.close()
    assert turn.status is TurnStatus.COMPLETED and turn.final_message is not None
    assert turn.final_message.text == "done after the crash"
    assert validate_tool_protocol(stored) == []
    assert stored[: len(written)] == written  # nothing written before the crash changed
    result = results_by_call(stored)["c1"]
    if where == "model":
        assert reruns == [] and (result.text, result.is_error) == ("tool result", False)
    elif idempotent:
        assert reruns == ["ran"] and (result.text, result.is_error) == (
            "tool result, run again",
            False,
        )
    else:
        assert reruns == []
        assert (result.text, result.is_error) == (MAY_HAVE_RUN, True)
    # the model's next call saw the result of c1, and was the only call after the crash
    assert len(model.calls) == 1
    assert model.calls[0].messages[-1].text == result.text
    assert ids(stored)[-1] == "killed:ai:2"


def _kill_mid_turn(kind: str, url: str, conversation: str, marker: Path, where: str) -> None:
    """Run turn "killed" in a child process and SIGKILL it in its tool or its model call."""
    child = SPAWN.Process(
        target=crash_in_turn,
        args=(kind, url, conversation, "killed", str(marker), where, LEASE_OF_THE_KILLED),
    )
    child.start()
    try:
        _wait_for(marker, 30)
        assert child.pid is not None
        os.kill(child.pid, signal.SIGKILL)
        child.join(10)
    finally:
        if child.is_alive():
            child.kill()
            child.join(10)
    assert child.exitcode == -signal.SIGKILL
