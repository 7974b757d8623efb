"""The README's Python examples and the docstring examples run as tests."""

from __future__ import annotations

import doctest
import importlib
import re
from pathlib import Path

import pytest

from openai_server import Completion, serve, usage

README = Path(__file__).parent.parent / "README.md"
MODULES = [
    "agentctx_fast",
    "agentctx_fast.compressors",
    "agentctx_fast.coordinator",
    "agentctx_fast.agent",
    "agentctx_fast.calibration",
    "agentctx_fast.memory",
    "agentctx_fast.metrics",
    "agentctx_fast._sync",
    "agentctx_fast.runner.sync",
    "agentctx_fast.runner.aio",
    "agentctx_fast.scripted",
    "agentctx_fast.tools",
    "agentctx_fast.messages",
    "agentctx_fast.openai",
    "agentctx_fast.integrations.langchain",
    "agentctx_fast.protocol",
    "agentctx_fast.tokens",
    "agentctx_fast.turns",
    "agentctx_fast.stores.memory",
    "agentctx_fast.stores._redis_io",
    "agentctx_fast.stores.serializer",
    "agentctx_fast.stores.sql",
    "agentctx_fast.stores.turns",
    "agentctx_fast.window",
    "agentctx_fast._core_types",
    "agentctx_fast._docstrings",
]


def test_readme_python_examples_run(monkeypatch: pytest.MonkeyPatch) -> None:
    # The OpenAI example talks to the local strict Chat Completions server, scripted for it.
    server_run = serve()
    server = next(server_run)
    server.script += [
        Completion({"tool_calls": [{"id": "call_0", "type": "function", "function": {
            "name": "get_order", "arguments": '{"order_id": "ORD-7"}'}}]}, usage(60, 12)),
        Completion({"content": "ORD-7 has shipped."}, usage(90, 6)),
    ]
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    try:
        blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
        assert blocks
        for block in blocks:
            exec(compile(block, str(README), "exec"), {})
        assert len(server.requests) == 2 and server.rejected == []
        assert server.script == []
    finally:
        server_run.close()


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
