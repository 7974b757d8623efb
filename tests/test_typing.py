"""The public API is typed end to end (SPEC §14, §22): ``mypy --strict`` accepts `examples/`,
the README's Python snippets (those of the README present when the tests run) and the documented
async path, and rejects a store or client of the wrong kind.

A README snippet that is deliberately partial is skipped when the line just before its fence is
``<!-- no-typecheck -->`` (it still runs in test_docs.py).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent
SKIP = "<!-- no-typecheck -->"

TYPED_API = """
import openai
import redis.asyncio

from agentctx_fast import (
    Agent, AgentRunner, AgentStore, AsyncAgentRunner, AsyncAgentStore, AsyncInMemoryAgentStore,
    AsyncOpenAIChatModel, AsyncRedisAgentStore, AsyncScriptedChatModel, AsyncSqlAgentStore,
    InMemoryAgentStore, OpenAIChatModel, RedisAgentStore, ScriptedChatModel, SqlAgentStore, Tool,
    tool,
)
from agentctx_fast.stores.doctor import diagnose, repair


@tool
def lookup(order_id: str) -> str:
    return order_id


@tool(name="refund", requires_approval=True)
async def refund(order_id: str, amount: float) -> str:
    return order_id


def shout(text: str) -> str:
    return text.upper()


def agents(client: openai.OpenAI, async_client: openai.AsyncOpenAI) -> list[Agent]:
    tools: list[Tool] = [lookup, refund, Tool.from_function(shout, description="Shout.")]
    return [
        Agent("a", AsyncOpenAIChatModel(async_client, "gpt-4o"), tools=tools),
        Agent("a", OpenAIChatModel(client, "gpt-4o")),
        Agent("a", AsyncScriptedChatModel([])),
        Agent("a", ScriptedChatModel([])),
    ]


def blocking(store: AgentStore) -> list[AgentRunner]:
    return [
        AgentRunner(store),
        AgentRunner(InMemoryAgentStore()),
        AgentRunner(SqlAgentStore("sqlite://")),
        AgentRunner(RedisAgentStore("redis://")),
        AgentRunner(),
    ]


async def doctor(sql: AsyncSqlAgentStore, redis_store: AsyncRedisAgentStore) -> None:
    await diagnose(sql)
    await repair(redis_store)


def asynchronous(store: AsyncAgentStore, client: redis.asyncio.Redis) -> list[AsyncAgentRunner]:
    return [
        AsyncAgentRunner(store),
        AsyncAgentRunner(AsyncInMemoryAgentStore()),
        AsyncAgentRunner(AsyncSqlAgentStore("sqlite://")),
        AsyncAgentRunner(AsyncRedisAgentStore("redis://")),
        AsyncAgentRunner(AsyncRedisAgentStore(client)),
    ]
"""

WRONG_KINDS = """
import openai

from agentctx_fast import (
    AgentRunner, AsyncAgentRunner, AsyncInMemoryAgentStore, AsyncOpenAIChatModel,
    AsyncRedisAgentStore, InMemoryAgentStore, OpenAIChatModel,
)
from agentctx_fast.stores.doctor import diagnose


def wrong(client: openai.OpenAI, async_client: openai.AsyncOpenAI) -> None:
    AgentRunner(AsyncInMemoryAgentStore())
    AsyncAgentRunner(InMemoryAgentStore())
    AsyncRedisAgentStore(6379)
    AsyncOpenAIChatModel(client, "gpt-4o")
    OpenAIChatModel(async_client, "gpt-4o")
    never_awaited = diagnose(InMemoryAgentStore())
"""


def readme_snippets(text: str) -> dict[int, str]:
    """The README's ```python blocks by the line of their fence, those marked to skip left out."""
    snippets = {}
    for match in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M):
        line = text.count("\n", 0, match.start()) + 1
        before = text[: match.start()].rstrip("\n").rpartition("\n")[2]
        if before.strip() != SKIP:
            snippets[line] = match.group(1)
    return snippets


def mypy_errors(tmp_path: Path, files: list[Path]) -> tuple[int, list[str]]:
    # In a child process (mypy raises the interpreter's recursion limit for good), from the
    # project root so that its configuration points mypy at this tree's package.
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-incremental",
            "--cache-dir",
            str(tmp_path / "cache"),
            *map(str, files),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env=os.environ.copy(),
        cwd=ROOT,
        check=False,
    )
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert result.returncode in (0, 1), result.stdout + result.stderr
    return result.returncode, errors


def test_the_examples_the_readme_and_the_typed_api_pass_mypy_strict(tmp_path: Path) -> None:
    snippets = readme_snippets((ROOT / "README.md").read_text(encoding="utf-8"))
    assert snippets, "the README has no Python snippet"
    files = sorted((ROOT / "examples").glob("*.py"))
    assert files, "no example found"
    for line, body in snippets.items():
        path = tmp_path / f"readme_line_{line}.py"
        path.write_text(body, encoding="utf-8")
        files.append(path)
    typed = tmp_path / "typed_api.py"
    typed.write_text(TYPED_API, encoding="utf-8")
    wrong = tmp_path / "wrong_kinds.py"
    wrong.write_text(WRONG_KINDS, encoding="utf-8")
    code, errors = mypy_errors(tmp_path, [*files, typed, wrong])
    wrong_errors = [error for error in errors if error.startswith(str(wrong))]
    assert [error for error in errors if error not in wrong_errors] == []
    # Each line of `wrong` is refused: a store or client of the wrong kind, or not a client.
    assert code == 1
    assert [int(error.split(":")[1]) for error in wrong_errors] == [12, 13, 14, 15, 16, 17]
    assert all("[arg-type]" in error for error in wrong_errors), wrong_errors


def test_a_snippet_marked_before_its_fence_is_left_out() -> None:
    text = "a\n```python\nx = 1\n```\n\n<!-- no-typecheck -->\n```python\npartial(\n```\n"
    assert readme_snippets(text) == {2: "x = 1\n"}
