"""A runner paused past its lease (SIGSTOP) and continued after another runner took the
conversation writes nothing (SPEC §20: fencing), on every store child processes can open.

The pause is deterministic: the child stops itself at a hook between its lease check and the
write of its reply; the runner that takes over reads a clock ahead by more than the lease, so
no test waits for a lease to run out.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path
from typing import Any

from agentctx_fast import (
    Agent,
    AgentRunner,
    AiMessage,
    ScriptedChatModel,
    TurnStatus,
    validate_tool_protocol,
)
from pause_workers import LATE_TEXT, pause_in_turn
from store_fixtures import new_conversation_id

SPAWN = multiprocessing.get_context("spawn")


def _stopped(pid: int) -> bool:
    """True once the process is in the stopped state (``T`` in /proc)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] == "T"


def _wait(condition: Any, what: str, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_a_paused_runner_writes_nothing_after_a_takeover(
    process_store: tuple[str, str, Any], tmp_path: Path
) -> None:
    kind, url, store = process_store
    conversation = new_conversation_id()
    marker, outcome = tmp_path / "stopped", tmp_path / "outcome"
    child = SPAWN.Process(
        target=pause_in_turn, args=(kind, url, conversation, "paused", str(marker), str(outcome))
    )
    child.start()
    try:
        _wait(marker.exists, "the child to reach the hook")
        assert child.pid is not None
        _wait(lambda: _stopped(child.pid), "the child to stop")

        # Another runner, whose clock is past the paused runner's lease, takes over.
        ahead = AgentRunner(store, lease_seconds=2.0, clock=lambda: time.time() + 60.0)
        try:
            turn = ahead.run(Agent("b", ScriptedChatModel([AiMessage("fresh")])), conversation,
                             "hello again", turn_id="taker")  # fmt: skip
            assert turn.status is TurnStatus.COMPLETED
            assert ahead.turn(conversation, "paused").status is TurnStatus.FAILED
        finally:
            ahead.close()
        after_takeover = store.chat_memory(conversation).get_messages()

        os.kill(child.pid, signal.SIGCONT)
        child.join(60)
    finally:
        if child.is_alive():
            child.kill()
            child.join(10)
    assert child.exitcode == 0
    result, tools = outcome.read_text().splitlines()
    assert result.startswith("raised LeaseLostError"), result
    assert tools == "tools run: 0"
    stored = store.chat_memory(conversation).get_messages()
    assert stored == after_takeover  # the paused runner wrote nothing once continued
    assert LATE_TEXT not in [m.text for m in stored if isinstance(m, AiMessage)]
    assert validate_tool_protocol(stored) == []
    assert [m.turn_id for m in stored] == ["paused", "taker", "taker"]
