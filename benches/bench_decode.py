"""Decoding stored message records (issue 17, item 3): at most about twice ``json.loads``.

Side by side, on the same records in one run: ``json.loads`` of each record (the yardstick),
our decode as the Rust backend runs it (`_native.decode_message`, the fast path in Rust), as the
Python backend runs it (``json.loads`` and `_fast_message`), and ``checked``: the checked path
alone (the decoder before the fast paths, what a malformed record still costs). Each round
decodes every record of a corpus through `load_message`, as a store's loader does on a miss:

- ``workload``: `workload.conversation` (tool-heavy: 1-3 calls per other turn, tool results of
  200-4,000 characters, a fifth Chinese);
- ``service``: `bench_runner.tool_history`, the conversations the service benchmarks store
  (short tool results, ids and turn ids on every message).

Compare the medians within a group: the ratio to ``json.loads`` is the goal's figure.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from agentctx_fast import Message
from agentctx_fast._backend import native
from agentctx_fast.stores import serializer as serializer_module
from agentctx_fast.stores.serializer import JsonAgentStoreSerializer, load_message
from bench_runner import tool_history
from workload import conversation

SERIALIZER = JsonAgentStoreSerializer()
CORPORA: dict[str, Callable[[], list[Message]]] = {
    "workload": lambda: list(conversation(400)),
    "service": lambda: tool_history(400),
}


@contextmanager
def decoder(kind: str) -> Iterator[None]:
    """`load_message` as the ``rust`` or ``python`` backend decodes, or ``checked`` alone."""
    saved = serializer_module._decode_message, serializer_module._fast_message
    serializer_module._decode_message = native.decode_message if kind == "rust" else None  # type: ignore[union-attr]
    if kind == "checked":
        serializer_module._fast_message = lambda fields: None
    try:
        yield
    finally:
        serializer_module._decode_message, serializer_module._fast_message = saved


@pytest.mark.parametrize("corpus", list(CORPORA))
@pytest.mark.parametrize("kind", ["json.loads", "rust", "python", "checked"])
def test_decode(benchmark: Any, corpus: str, kind: str) -> None:
    if kind == "rust" and native is None:
        pytest.skip("the Rust extension is not built")
    messages = CORPORA[corpus]()
    records = [SERIALIZER.dumps(m) for m in messages]
    benchmark.group = f"decode {len(records)} records: {corpus}"
    benchmark.extra_info["records"] = len(records)
    benchmark.extra_info["bytes"] = sum(map(len, records))
    if kind == "json.loads":
        loads = json.loads
        result = benchmark(lambda: [loads(r) for r in records])
        assert len(result) == len(records)
        return
    with decoder(kind):
        result = benchmark(lambda: [load_message(SERIALIZER, r) for r in records])
    assert result == messages
