"""Smoke test of an installed wheel: the backend it reports, a window, a SQLite store round
trip. Run from outside the source tree: python3 smoke_test.py EXPECTED_BACKEND"""

from __future__ import annotations

import sys

import agentctx_fast
from agentctx_fast import (
    AiMessage,
    SqlAgentStore,
    ToolCall,
    ToolMessage,
    UserMessage,
    build_window,
)

expected = sys.argv[1]
if agentctx_fast.backend != expected:
    sys.exit(f"backend is {agentctx_fast.backend!r}, expected {expected!r}")
history = [
    UserMessage("Where is ORD-2024-001?", message_id="u1"),
    AiMessage(tool_calls=(ToolCall("call_0", "get_order", '{"id": 1}'),), message_id="a1"),
    ToolMessage("call_0", '{"status": "shipped"}', message_id="t1"),
    AiMessage("It has shipped.", message_id="a1f"),
    UserMessage("Thanks! And ORD-2024-002?", message_id="u2"),
]
window = build_window(
    history, system="Be brief.", compact_completed_tool_turns=True, compression_keep_recent_turns=0
)
assert [m.message_id for m in window.messages] == ["system", "u1", "a1f", "u2"], window.messages
store = SqlAgentStore("sqlite://")
store.schema().initialize()
memory = store.chat_memory("conversation-1")
for message in history:
    assert memory.add_message_if_absent(message)
assert [m.message_id for m in memory.get_messages()] == [m.message_id for m in history]
assert memory.get_messages() == history
print(
    f"python {sys.version.split()[0]}: backend {agentctx_fast.backend}, "
    f"window of {len(window.messages)} messages, SQLite round trip ok"
)
