"""Every extra that is missing raises `MissingDependencyError` naming ``pip install
'agentctx-fast[EXTRA]'``, at every entry point: the stores and their memories, the estimators,
the model clients, the integrations and the CLI commands (one line on standard error, exit
status 2); ``from agentctx_fast import *`` works without the sql and redis extras (SPEC §22).

Each case runs in a fresh interpreter where the extra's package cannot be imported
(without_packages.py), as on a machine where it was never installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import agentctx_fast

HIDE = Path(__file__).resolve().parent / "without_packages.py"
SOURCE = Path(agentctx_fast.__file__).resolve().parent.parent
DEAD_PG = "postgresql://u@127.0.0.1:1/db"  # never reached: the driver is missing first
DEAD_REDIS = "redis://127.0.0.1:1/0"


def _run(hidden: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = os.environ.copy()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SOURCE), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, str(HIDE), hidden, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env=env,
        check=False,
    )


def _raised(hidden: str, code: str) -> str:
    """What ``code`` raised without the ``hidden`` packages: the error's class and message."""
    program = "from agentctx_fast.errors import MissingDependencyError\n"
    program += f"try:\n{textwrap.indent(code, '    ')}\n"
    program += "except MissingDependencyError as error:\n"
    program += "    print(type(error).__name__, error)\n"
    program += "else:\n    print('no error')\n"
    result = _run(hidden, "-c", program)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


API_CASES = [
    ("SqlAgentStore", "sqlalchemy", "sql",
     "from agentctx_fast import SqlAgentStore\nSqlAgentStore('sqlite://')"),
    ("AsyncSqlAgentStore", "sqlalchemy", "sql",
     "from agentctx_fast import AsyncSqlAgentStore\nAsyncSqlAgentStore('sqlite://')"),
    ("stores.SqlAgentStore", "sqlalchemy", "sql",
     "from agentctx_fast.stores import SqlAgentStore\nSqlAgentStore('sqlite://')"),
    ("SqlChatMemory", "sqlalchemy", "sql", "from agentctx_fast.stores.sql import SqlChatMemory"),
    ("SqlAgentStore-postgresql", "psycopg", "postgresql",
     f"from agentctx_fast import SqlAgentStore\nSqlAgentStore({DEAD_PG!r})"),
    ("SqlAgentStore-postgres", "psycopg", "postgresql",
     "from agentctx_fast import SqlAgentStore\nSqlAgentStore('postgres://u@127.0.0.1:1/db')"),
    ("AsyncSqlAgentStore-postgresql", "psycopg", "postgresql",
     f"from agentctx_fast import AsyncSqlAgentStore\nAsyncSqlAgentStore({DEAD_PG!r})"),
    ("RedisAgentStore", "redis", "redis",
     f"from agentctx_fast import RedisAgentStore\nRedisAgentStore({DEAD_REDIS!r})"),
    ("AsyncRedisAgentStore", "redis", "redis",
     f"from agentctx_fast import AsyncRedisAgentStore\nAsyncRedisAgentStore({DEAD_REDIS!r})"),
    ("RedisChatMemory", "redis", "redis",
     "from agentctx_fast.stores.redis import RedisChatMemory"),
    ("TiktokenEstimator", "tiktoken", "tiktoken",
     "from agentctx_fast import TiktokenEstimator\nTiktokenEstimator('cl100k_base')"),
    ("OpenAIChatModel", "openai", "openai",
     "from agentctx_fast import OpenAIChatModel\nOpenAIChatModel(object(), 'm')"),
    ("AsyncOpenAIChatModel", "openai", "openai",
     "from agentctx_fast import AsyncOpenAIChatModel\nAsyncOpenAIChatModel(object(), 'm')"),
    ("langchain", "langchain_core", "langchain", "import agentctx_fast.integrations.langchain"),
    ("pydantic_ai", "pydantic_ai", "pydantic-ai",
     "import agentctx_fast.integrations.pydantic_ai"),
    ("langchain-agents", "langchain", "langchain",
     "from agentctx_fast.integrations.langchain import AgentCtxMiddleware\nAgentCtxMiddleware()"),
    ("openai-agents", "agents", "openai-agents",
     "import agentctx_fast.integrations.openai_agents"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("hidden", "extra", "code"), [case[1:] for case in API_CASES], ids=[c[0] for c in API_CASES]
)
def test_a_missing_extra_is_named(hidden: str, extra: str, code: str) -> None:
    raised = _raised(hidden, code)
    # one wording for every extra: the package missing, then the command installing it
    assert raised.startswith(f"MissingDependencyError {hidden} is not installed; "), raised
    assert raised.endswith(f"pip install 'agentctx-fast[{extra}]'"), raised


CLI_CASES = [
    ("demo", "sqlalchemy", "sql", ["demo"]),
    ("demo-redis", "redis", "redis", ["demo", "--store", DEAD_REDIS]),
    ("demo-postgres", "psycopg", "postgresql", ["demo", "--store", "postgres://u@127.0.0.1:1/db"]),
    ("schema", "sqlalchemy", "sql", ["schema", "--url", DEAD_PG]),
    ("doctor-sqlite", "sqlalchemy", "sql", ["doctor", "--store", "sqlite:///doctor.db"]),
    ("doctor-postgresql", "psycopg", "postgresql", ["doctor", "--store", DEAD_PG]),
    ("doctor-redis", "redis", "redis", ["doctor", "--store", DEAD_REDIS]),
    ("doctor-cluster", "redis", "redis", ["doctor", "--store", DEAD_REDIS, "--cluster"]),
]


@pytest.mark.parametrize(
    ("hidden", "extra", "args"), [case[1:] for case in CLI_CASES], ids=[c[0] for c in CLI_CASES]
)
def test_a_cli_command_names_the_missing_extra_in_one_line(
    hidden: str, extra: str, args: list[str], tmp_path: Path
) -> None:
    result = _run(hidden, "-m", "agentctx_fast", *args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr  # one line, no traceback
    assert result.stderr.startswith("agentctx: MissingDependencyError: "), result.stderr
    assert result.stderr.rstrip("\n").endswith(f"pip install 'agentctx-fast[{extra}]'")
    assert list(tmp_path.iterdir()) == []  # no database file left behind


def test_star_import_works_without_the_store_extras() -> None:
    """The names of the SQL and Redis stores import (the in-memory stores, the core and the
    runner work); making one of those stores names its extra."""
    code = (
        "from agentctx_fast import *\n"
        "InMemoryAgentStore().chat_memory('c').add_message(UserMessage('hi'))\n"
        "assert build_window([UserMessage('hi')]).messages\n"
        "for made in (lambda: SqlAgentStore('sqlite://'), lambda: RedisAgentStore('redis://')):\n"
        "    try:\n        made()\n"
        "    except MissingDependencyError as error:\n        print(error)\n"
    )
    result = _run("sqlalchemy,redis,aiosqlite,psycopg", "-c", code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "sqlalchemy is not installed; install the extra: pip install 'agentctx-fast[sql]'",
        "redis is not installed; install the extra: pip install 'agentctx-fast[redis]'",
    ]


def test_the_async_sqlite_store_needs_no_aiosqlite() -> None:
    """An `AsyncSqlAgentStore` made from an ``sqlite://`` URL runs on the blocking engine, so
    the ``sql`` extra (SQLAlchemy alone) serves it: it writes and reads without aiosqlite."""
    code = (
        "import asyncio\n"
        "from agentctx_fast import AsyncSqlAgentStore, UserMessage\n"
        "async def main():\n"
        "    store = AsyncSqlAgentStore('sqlite://')\n"
        "    await store.schema.initialize()\n"
        "    memory = store.chat_memory('c')\n"
        "    await memory.add_message_if_absent(UserMessage('hi', message_id='u1'))\n"
        "    print([m.text for m in await memory.get_messages()])\n"
        "    await store.aclose()\n"
        "asyncio.run(main())\n"
    )
    result = _run("aiosqlite", "-c", code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['hi']"
