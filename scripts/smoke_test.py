"""Smoke test of an installed wheel: the backend it reports, its version and license, a window,
a SQLite store round trip. Run from outside the source tree:
python3 smoke_test.py EXPECTED_BACKEND EXPECTED_VERSION"""

from __future__ import annotations

import importlib.metadata
import sys
import time

import agentctx_fast
from agentctx_fast import (
    AiMessage,
    BackendUnavailableError,
    BpeTokenEstimator,
    SqlAgentStore,
    ToolCall,
    ToolMessage,
    UserMessage,
    build_window,
)

expected, expected_version = sys.argv[1], sys.argv[2]
if agentctx_fast.backend != expected:
    sys.exit(f"backend is {agentctx_fast.backend!r}, expected {expected!r}")
if agentctx_fast.__version__ != expected_version:
    sys.exit(f"__version__ is {agentctx_fast.__version__!r}, expected {expected_version!r}")
distribution = importlib.metadata.distribution("agentctx-fast")
licenses = [f for f in distribution.files or () if f.name == "LICENSE"]
if len(licenses) != 1 or not licenses[0].read_text().startswith("MIT License\n"):
    sys.exit(f"the installed wheel has no MIT LICENSE file: {licenses}")
if distribution.metadata["License-Expression"] != "MIT":
    sys.exit(f"License-Expression is {distribution.metadata['License-Expression']!r}")
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
store.schema.initialize()
memory = store.chat_memory("conversation-1")
for message in history:
    assert memory.add_message_if_absent(message)
assert [m.message_id for m in memory.get_messages()] == [m.message_id for m in history]
assert memory.get_messages() == history
# Exact counts from the vocabularies built into the native wheel; the pure wheel (installed
# without tiktoken) says what to install.
first_use = ""
if expected == "rust":
    for encoding, expected_tokens in (("o200k_base", 6), ("cl100k_base", 9)):
        start = time.perf_counter()
        tokens = BpeTokenEstimator(encoding).count_text("Hello world, 你好世界")
        first_use += f", {encoding} first use {(time.perf_counter() - start) * 1e3:.0f} ms"
        assert tokens == expected_tokens, (encoding, tokens)
else:
    try:
        BpeTokenEstimator("o200k_base")
    except BackendUnavailableError as error:
        assert "pip install" in str(error), error
    else:
        sys.exit("BpeTokenEstimator on the pure wheel without tiktoken did not fail")
print(
    f"python {sys.version.split()[0]}: agentctx_fast {agentctx_fast.__version__} (MIT), "
    f"backend {agentctx_fast.backend}, "
    f"window of {len(window.messages)} messages, SQLite round trip ok{first_use}"
)
