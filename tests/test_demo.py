"""`agentctx demo`: the main job runs end to end on SQLite, and on the real servers."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from agentctx_fast import AgentFormMessage, ToolMessage, validate_tool_protocol
from agentctx_fast.cli.demo import run_demo
from agentctx_fast.cli.main import main
from agentctx_fast.stores.sql import SqlAgentStore


def _check_output(text: str) -> None:
    assert text.count("=== turn ") == 5
    calls = [int(n) for n in re.findall(r"model call (\d+): window of", text)]
    assert calls == list(range(1, len(calls) + 1)) and len(calls) == 10
    assert "--- turn suspended: issue_refund(" in text
    assert "a fresh runner on a fresh store handle resumes the turn" in text
    assert re.search(r"^\s+user\s+\S+\s+\d+\s+yes\s", text, re.MULTILINE), "no compacted row"
    assert "turns: completed, completed, completed, completed, completed" in text
    assert "tool protocol of the stored history: valid" in text
    assert "page requests: 1" in text
    # the coordinator: the trigger fires once, and the later windows hold its summary
    assert text.count("--- the compression trigger fired") == 1
    fired = text.index("--- the compression trigger fired")
    assert re.search(r"^\s+user\s+\S+\s+\d+\s+summary\s", text[fired:], re.MULTILINE)


def test_demo_command_on_sqlite_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "demo.db"
    assert main(["demo", "--db", str(db)]) == 0
    _check_output(capsys.readouterr().out)
    store = SqlAgentStore(f"sqlite:///{db}")
    try:
        with store.engine.connect() as connection:
            rows = connection.exec_driver_sql("SELECT DISTINCT conversation_id FROM agent_messages")
            ids = {row[0] for row in rows}
        assert len(ids) == 1
        stored = store.chat_memory(ids.pop()).get_messages()
    finally:
        store.close()
    assert not validate_tool_protocol(stored)
    forms = [m for m in stored if isinstance(m, AgentFormMessage)]
    assert [(f.status, f.version) for f in forms] == [("approved", 1)]
    refund = [m for m in stored if isinstance(m, ToolMessage) and m.tool_name == "issue_refund"]
    assert len(refund) == 1 and "RF-002-7781" in refund[0].text and not refund[0].is_error


@pytest.mark.servers
@pytest.mark.parametrize("kind", ["postgresql", "redis"])
def test_demo_on_servers(
    kind: str, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    server: Any = request.getfixturevalue("redis_server" if kind == "redis" else "postgres_server")
    url = server.url if kind == "redis" else server.dsn
    assert main(["demo", "--store", url]) == 0
    _check_output(capsys.readouterr().out)


def test_run_demo_returns_the_turns() -> None:
    from agentctx_fast.stores import InMemoryAgentStore

    lines: list[str] = []
    turns = run_demo(InMemoryAgentStore(), lines.append)
    assert [t.status.value for t in turns] == ["completed"] * 5
    assert turns[3].final_message is not None and "RF-002-7781" in turns[3].final_message.text
    _check_output("\n".join(lines))
