"""The ``agentctx window`` command on the example conversation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentctx_fast import AgentActionMessage, AgentFormMessage, build_window
from agentctx_fast.cli import main, read_conversation

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "support-conversation.json"
UI_IDS = {"ui1", "form3"}


def _run_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["window", str(EXAMPLE), "--json", *args]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    parsed: dict[str, Any] = json.loads(captured.out)
    return parsed


def test_read_conversation_keeps_ui_messages_in_the_history() -> None:
    history = read_conversation(EXAMPLE)
    ids = [m.message_id for m in history]
    assert ids[0] == "sys"
    assert UI_IDS <= set(ids)
    assert isinstance(history[ids.index("ui1")], AgentActionMessage)
    assert isinstance(history[ids.index("form3")], AgentFormMessage)


def test_plain_output_has_a_line_per_window_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["window", str(EXAMPLE)]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    lines = captured.out.splitlines()
    window = build_window(read_conversation(EXAMPLE))
    ids = [m.message_id for m in window.messages]
    header, rows, rest = lines[0], lines[1 : 1 + len(ids)], lines[1 + len(ids) :]
    assert header.split()[:3] == ["role", "id", "tokens"]
    assert [row.split()[1] for row in rows] == ids
    assert rows[0].split()[0] == "system"
    assert rows[1].split()[0] == "user"
    assert rest and rest[0].startswith("-- ")
    assert f"-- {len(ids)} messages" in rest[0]
    assert not any(line.split()[1:2] == [ui] for line in lines for ui in UI_IDS)


def test_json_output_matches_build_window(capsys: pytest.CaptureFixture[str]) -> None:
    output = _run_json(capsys)
    window = build_window(read_conversation(EXAMPLE))
    assert [row["id"] for row in output["window"]] == [m.message_id for m in window.messages]
    assert not UI_IDS & {row["id"] for row in output["window"]}
    summary = output["summary"]
    assert summary["messages"] == len(window.messages)
    assert summary["estimated_tokens"] == window.estimated_tokens
    assert summary["attached_turns"] == window.attached_turns
    assert summary["dropped_turns"] == window.dropped_turns
    assert summary["compacted_turns"] == 0
    assert summary["cut_by"] is None
    assert output["window"][0] == {
        "role": "system",
        "id": "sys",
        "tokens": output["window"][0]["tokens"],
        "text": output["window"][0]["text"],
    }
    assert {row["role"] for row in output["window"]} <= {"system", "user", "assistant", "tool"}


@pytest.mark.parametrize(
    "args",
    [[], ["--max-turns", "1"], ["--compact", "--keep-recent", "0"], ["--max-tokens", "50"]],
)
def test_ui_messages_never_appear(capsys: pytest.CaptureFixture[str], args: list[str]) -> None:
    output = _run_json(capsys, *args)
    assert not UI_IDS & {row["id"] for row in output["window"]}


def test_max_turns_zero_gives_only_the_current_turn(capsys: pytest.CaptureFixture[str]) -> None:
    output = _run_json(capsys, "--max-turns", "0")
    assert [row["id"] for row in output["window"]] == ["sys", "u5", "a5"]
    assert output["summary"]["attached_turns"] == 0
    assert output["summary"]["dropped_turns"] == 4
    assert output["summary"]["cut_by"] == "max_attached_turns"


def test_compact_keep_recent_one(capsys: pytest.CaptureFixture[str]) -> None:
    output = _run_json(capsys, "--compact", "--keep-recent", "1")
    ids = [row["id"] for row in output["window"]]
    assert output["summary"]["compacted_turns"] > 0
    assert output["summary"]["compacted_turns"] == 3  # u1-u3 are completed tool turns
    assert ids == ["sys", "u1", "a1f", "u2", "a2f", "u3", "a3f", "u4", "a4", "u5", "a5"]
    window = build_window(
        read_conversation(EXAMPLE),
        compact_completed_tool_turns=True,
        compression_keep_recent_turns=1,
    )
    assert ids == [m.message_id for m in window.messages]


def test_system_option_replaces_the_files_instructions(capsys: pytest.CaptureFixture[str]) -> None:
    output = _run_json(capsys, "--system", "Be brief.")
    assert output["window"][0]["id"] == "system"
    assert output["window"][0]["text"] == "Be brief."
    assert "sys" not in {row["id"] for row in output["window"]}


def test_missing_file_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    assert main(["window", str(missing)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("agentctx: ")
    assert "nope.json" in captured.err


@pytest.mark.parametrize(
    "content",
    ['[{"role": "user", "content": "hi"', "{not json}\n", '[{"role": "wizard", "content": "x"}]'],
    ids=["truncated-array", "bad-jsonl", "unknown-role"],
)
def test_malformed_file_exits_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content, encoding="utf-8")
    assert main(["window", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("agentctx: ")
    assert len(captured.err.strip()) > len("agentctx: ")


def test_jsonl_input(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    entries = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    path = tmp_path / "conversation.jsonl"
    path.write_text("\n".join(json.dumps(e, ensure_ascii=False) for e in entries), encoding="utf-8")
    assert main(["window", str(path), "--json"]) == 0
    from_jsonl = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in from_jsonl["window"]] == [r["id"] for r in _run_json(capsys)["window"]]


def test_module_entry_point() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "agentctx_fast", "window", str(EXAMPLE)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=os.environ.copy(),
        check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[-1].startswith("-- ") or any(line.startswith("-- ") for line in lines)
    assert "sys" in result.stdout
