"""Runner work paused in a child process by tests/test_paused_runner.py (importable without
pytest): the child stops itself with SIGSTOP at a hook past its lease check, and reports how
its call ended once the parent continues it."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from agentctx_fast import (
    Agent,
    AgentRunner,
    AiMessage,
    JsonAgentStoreSerializer,
    ScriptedChatModel,
    Tool,
    ToolCall,
)

LATE_TEXT = "late reply"


class StopBeforeWriting(JsonAgentStoreSerializer):
    """The default serializer, except that the process stops itself (SIGSTOP) the first time
    it is asked to encode the late reply: the runner has checked its lease and is about to
    write it."""

    def __init__(self, marker: Path) -> None:
        self._marker = marker

    def dumps(self, obj: object) -> bytes:
        if isinstance(obj, AiMessage) and obj.text == LATE_TEXT and not self._marker.exists():
            self._marker.write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGSTOP)
        return super().dumps(obj)


def open_store(kind: str, url: str, serializer: Any) -> Any:
    if kind == "redis-cluster":
        from redis.cluster import RedisCluster

        from agentctx_fast.stores.redis import RedisAgentStore

        return RedisAgentStore(RedisCluster.from_url(url), serializer=serializer)
    if kind == "redis":
        from agentctx_fast.stores.redis import RedisAgentStore

        return RedisAgentStore(url, serializer=serializer)
    from agentctx_fast.stores.sql import SqlAgentStore

    return SqlAgentStore(url, serializer=serializer)


def pause_in_turn(
    kind: str, url: str, conversation_id: str, turn_id: str, marker: str, outcome: str
) -> None:
    """Run ``turn_id``, whose model answers with a tool call, stopped before that reply is
    written; write to ``outcome`` how the call ended."""
    store = open_store(kind, url, StopBeforeWriting(Path(marker)))
    ran: list[str] = []
    late = AiMessage(LATE_TEXT, tool_calls=(ToolCall("c1", "refund", '{"order": "o1"}'),))
    agent = Agent(
        "paused",
        ScriptedChatModel([late, AiMessage("done")]),
        tools=[Tool("refund", lambda order: ran.append(order) or "refunded")],
    )
    runner = AgentRunner(store, lease_seconds=2.0)
    try:
        turn = runner.run(agent, conversation_id, "refund o1", turn_id=turn_id)
        result = f"returned {turn.status.value}"
    except Exception as error:  # reported to the parent
        result = f"raised {type(error).__name__}: {error}"
    finally:
        runner.close()
        store.close()
    Path(outcome).write_text(f"{result}\ntools run: {len(ran)}")
