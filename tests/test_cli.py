"""The ``agentctx window`` command (SPEC §18): input forms, output, and one-line errors."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletionMessageParam

from agentctx_fast import AgentActionMessage, AgentFormMessage, build_window, to_openai
from agentctx_fast.cli.main import PENDING_TEXT, ConversationFileError, main, read_conversation
from agentctx_fast.core.tokens import estimator_for_model
from openai_schema import request_errors, type_errors

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "support-conversation.json"
UI_IDS = {"ui1", "form3"}
SUMMARY = re.compile(
    r"-- (?P<messages>\d+) messages, (?P<estimated_tokens>\d+) estimated tokens, attached "
    r"(?P<attached_turns>\d+) / dropped (?P<dropped_turns>\d+) / compacted "
    r"(?P<compacted_turns>\d+) turns, cut_by=(?P<cut_by>\w+), repairs=(?P<repairs>\d+)"
)


def _run_json(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, Any]]:
    """The window as request messages with ids (``--json --ids``)."""
    assert main(["window", str(EXAMPLE), "--json", "--ids", *args]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    parsed: list[dict[str, Any]] = json.loads(captured.out)
    return parsed


def _ids(capsys: pytest.CaptureFixture[str], *args: str) -> list[str]:
    return [entry["id"] for entry in _run_json(capsys, *args)]


def _summary(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["window", str(EXAMPLE), *args]) == 0
    out = capsys.readouterr().out
    match = SUMMARY.search(out)
    assert match is not None, out
    found: dict[str, Any] = {
        k: v if k == "cut_by" else int(v) for k, v in match.groupdict().items()
    }
    return found


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


def test_summary_line_matches_build_window(capsys: pytest.CaptureFixture[str]) -> None:
    summary = _summary(capsys)
    window = build_window(read_conversation(EXAMPLE))
    assert summary == {
        "messages": len(window.messages),
        "estimated_tokens": window.estimated_tokens,
        "attached_turns": window.attached_turns,
        "dropped_turns": window.dropped_turns,
        "compacted_turns": 0,
        "cut_by": "None",
        "repairs": 0,
    }


def test_json_is_the_request_messages_of_the_window(capsys: pytest.CaptureFixture[str]) -> None:
    """The example ends with a call still running: ``--close-pending`` answers it "not run"."""
    assert main(["window", str(EXAMPLE), "--json", "--close-pending"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    printed = json.loads(captured.out)
    window = build_window(read_conversation(EXAMPLE))
    assert printed[:-1] == to_openai(window.messages)
    assert printed[-1] == {"role": "tool", "tool_call_id": "call_0", "content": PENDING_TEXT}
    assert type_errors(printed, list[ChatCompletionMessageParam]) == []
    assert request_errors({"model": "gpt-4o", "messages": printed}) is None
    assert all("id" not in entry for entry in printed)


def _pending_file(tmp_path: Path) -> Path:
    """The example with a last turn of three calls, only the second of them answered; the
    earlier turns reuse the call ids (ids are unique within a turn only)."""
    entries = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    calls = [
        {"id": f"call_{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        for i in range(3)
    ]
    path = tmp_path / "pending.json"
    last = [
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "tool_call_id": "call_1", "content": "done"},
    ]
    path.write_text(json.dumps([*entries[:-1], *last]), encoding="utf-8")
    return path


def test_json_refuses_a_window_with_calls_left_without_results(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    line = _error_line(capsys, str(EXAMPLE), "--json")
    assert line.startswith(f"agentctx: {EXAMPLE}: ") and "(call_0)" in line
    assert "--close-pending" in line
    line = _error_line(capsys, str(_pending_file(tmp_path)), "--json")
    assert "(call_0, call_2)" in line


def test_close_pending_answers_each_open_call_as_not_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = _pending_file(tmp_path)
    assert main(["window", str(path), "--json", "--close-pending"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert request_errors({"model": "gpt-4o", "messages": printed}) is None
    assert printed[-3:] == [
        {"role": "tool", "tool_call_id": "call_1", "content": "done"},
        {"role": "tool", "tool_call_id": "call_0", "content": PENDING_TEXT},
        {"role": "tool", "tool_call_id": "call_2", "content": PENDING_TEXT},
    ]
    assert main(["window", str(path), "--close-pending"]) == 0  # the table shows them too
    out = capsys.readouterr().out
    assert "closed pending call call_0 as not run" in out
    assert "closed pending call call_2 as not run" in out


def test_a_closed_pipe_ends_the_command_quietly(tmp_path: Path) -> None:
    """``agentctx … | head``: the reader is gone before anything is written (deterministic:
    the pipe's read end is closed first), small output and output past the pipe's buffer."""
    big = tmp_path / "big.json"
    turns = [
        [{"role": "user", "content": f"question {i} " * 40}, {"role": "assistant", "content": "a"}]
        for i in range(400)
    ]
    big.write_text(json.dumps([entry for turn in turns for entry in turn]), encoding="utf-8")
    for args in (
        ["window", str(EXAMPLE)],
        ["window", str(big), "--json", "--max-turns", "1000", "--max-messages", "1000"],
        ["demo", "--db", str(tmp_path / "demo.db")],
    ):
        read_end, write_end = os.pipe()
        os.close(read_end)
        try:
            result = subprocess.run(
                [sys.executable, "-m", "agentctx_fast", *args],
                stdout=write_end,
                stderr=subprocess.PIPE,
                text=True,
                timeout=120,
                cwd=ROOT,
                env=os.environ.copy(),
                check=False,
            )
        finally:
            os.close(write_end)
        assert result.returncode == 141, (args, result.stderr)
        assert result.stderr == "", args


def test_json_of_a_closed_conversation_is_accepted_as_api_input(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    entries = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    closed = [*entries[:-1], {"role": "user", "content": "Never mind, thanks."}]
    path = tmp_path / "closed.json"
    path.write_text(json.dumps(closed), encoding="utf-8")
    assert main(["window", str(path), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert request_errors({"model": "gpt-4o", "messages": printed}) is None


def test_json_with_ids_reads_back_as_the_same_window(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    printed = _run_json(capsys)
    path = tmp_path / "window.json"
    path.write_text(json.dumps(printed), encoding="utf-8")
    window = build_window(read_conversation(EXAMPLE))
    assert [m.message_id for m in read_conversation(path)] == [
        m.message_id for m in window.messages
    ]


@pytest.mark.parametrize(
    "args",
    [[], ["--max-turns", "1"], ["--compact", "--keep-recent", "0"], ["--max-tokens", "50"]],
)
def test_ui_messages_never_appear(capsys: pytest.CaptureFixture[str], args: list[str]) -> None:
    assert main(["window", str(EXAMPLE), "--json", "--ids", *args]) == 0
    entries = json.loads(capsys.readouterr().out)  # stderr may note a current turn over budget
    assert entries and not UI_IDS & {entry["id"] for entry in entries}


def test_max_turns_zero_gives_only_the_current_turn(capsys: pytest.CaptureFixture[str]) -> None:
    assert _ids(capsys, "--max-turns", "0") == ["sys", "u5", "a5"]
    summary = _summary(capsys, "--max-turns", "0")
    assert summary["attached_turns"] == 0
    assert summary["dropped_turns"] == 4
    assert summary["cut_by"] == "max_attached_turns"


def test_compact_keep_recent_one(capsys: pytest.CaptureFixture[str]) -> None:
    ids = _ids(capsys, "--compact", "--keep-recent", "1")
    assert _summary(capsys, "--compact", "--keep-recent", "1")["compacted_turns"] == 3
    assert ids == ["sys", "u1", "a1f", "u2", "a2f", "u3", "a3f", "u4", "a4", "u5", "a5"]
    window = build_window(
        read_conversation(EXAMPLE),
        compact_completed_tool_turns=True,
        compression_keep_recent_turns=1,
    )
    assert ids == [m.message_id for m in window.messages]


def test_system_option_replaces_the_files_instructions(capsys: pytest.CaptureFixture[str]) -> None:
    entries = _run_json(capsys, "--system", "Be brief.")
    assert entries[0] == {"role": "system", "content": "Be brief.", "id": "system"}
    assert "sys" not in {entry["id"] for entry in entries}


def test_model_counts_with_the_models_estimator(capsys: pytest.CaptureFixture[str]) -> None:
    summary = _summary(capsys, "--model", "gpt-4")
    window = build_window(read_conversation(EXAMPLE), token_estimator=estimator_for_model("gpt-4"))
    assert summary["estimated_tokens"] == window.estimated_tokens
    # SPEC §7: exact counts of the model's encoding (tiktoken's on the Python backend)
    assert type(estimator_for_model("gpt-4")).__name__ == "BpeTokenEstimator"
    assert estimator_for_model("gpt-4").encoding == "cl100k_base"  # type: ignore[attr-defined]
    assert estimator_for_model("gpt-4o-mini").encoding == "o200k_base"  # type: ignore[attr-defined]
    assert type(estimator_for_model("llama-3")).__name__ == "HeuristicTokenEstimator"
    o200k = _summary(capsys, "--model", "gpt-4o")
    assert (
        o200k["estimated_tokens"]
        == build_window(
            read_conversation(EXAMPLE), token_estimator=estimator_for_model("gpt-4o")
        ).estimated_tokens
    )
    assert o200k["estimated_tokens"] != summary["estimated_tokens"]


def test_a_current_turn_over_max_tokens_is_reported(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["window", str(EXAMPLE), "--max-tokens", "10"]) == 0
    captured = capsys.readouterr()
    assert "current turn alone" in captured.err and "--max-tokens 10" in captured.err
    assert len(captured.err.strip().splitlines()) == 1
    assert SUMMARY.search(captured.out) is not None
    assert main(["window", str(EXAMPLE), "--max-tokens", "100000"]) == 0
    assert capsys.readouterr().err == ""


def test_stdin_and_the_messages_object(capsys: pytest.CaptureFixture[str]) -> None:
    entries = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    expected = _run_json(capsys)
    for text in (json.dumps({"messages": entries}), json.dumps(entries)):
        stdin = io.BytesIO(text.encode())
        assert [m.message_id for m in read_conversation("-", stdin=stdin)] == [
            e["id"] for e in entries
        ]
    document = json.dumps({"model": "gpt-4o", "messages": entries})
    result = subprocess.run(
        [sys.executable, "-m", "agentctx_fast", "window", "-", "--json", "--ids"],
        input=document,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=os.environ.copy(),
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == expected


def test_jsonl_input(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    entries = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    path = tmp_path / "conversation.jsonl"
    path.write_text("\n".join(json.dumps(e, ensure_ascii=False) for e in entries), encoding="utf-8")
    assert main(["window", str(path), "--json", "--ids"]) == 0
    from_jsonl = json.loads(capsys.readouterr().out)
    assert from_jsonl == _run_json(capsys)


def test_help_shows_defaults_and_no_markup(capsys: pytest.CaptureFixture[str]) -> None:
    for args in (["--help"], ["window", "--help"], ["demo", "--help"]):
        with pytest.raises(SystemExit) as exited:
            main(args)
        assert exited.value.code == 0
        out = capsys.readouterr().out
        assert "``" not in out and "`" not in out
    with pytest.raises(SystemExit):
        main(["window", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for default in ("(default: 10)", "(default: 100)", "(default: 2)", "(default: none)"):
        assert default in out


def _error_line(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["window", *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("agentctx: ")
    assert "Traceback" not in captured.err
    return lines[0]


def test_missing_file_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    line = _error_line(capsys, str(missing))
    assert str(missing) in line and "No such file" in line


def test_a_directory_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert (
        _error_line(capsys, str(tmp_path))
        == f"agentctx: {tmp_path}: is a directory, not a conversation file"
    )


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"", "the file is empty"),
        (b"  \n\n", "the file is empty"),
        (b"[]", "no messages in the file"),
        (b'[{"role": "user", "content": "caf\xe9"}]', "not UTF-8 text (byte 0xe9 at line 1"),
        (b'{"role": "user", "content": "hi"}\n\n\xff', "not UTF-8 text (byte 0xff at line 3"),
        (b'[{"role": "user", "content": "hi"', "not valid JSON at line 1, column 34"),
        (b"{not json}\n", "not valid JSON at line 1, column 2"),
        (
            b'{"role": "user", "content": "a"}\n\n{"role": "user", "content": "b"}\n{"role": x}\n',
            "not valid JSON at line 4, column 10",
        ),
        (b'[\n  {"role": "user",\n   "content": "a",}\n]', "not valid JSON at line 3, column 19"),
        (b'"just a string"', "expected a JSON array of messages, JSONL, or an object"),
        (b'{"messages": {"role": "user"}}', "'messages' must be an array"),
        (b'[{"role": "wizard", "content": "x"}]', "entry 0: unknown role 'wizard'"),
        (
            b'{"role": "user", "content": "a"}\n\n{"content": "b"}\n',
            "entry 1 (line 3): has no role",
        ),
        (
            b'[{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]',
            "entry 0: content[0] image_url: 'url' is missing",
        ),
        (
            b'[{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": [{"id": "c",'
            b' "type": "function", "function": {"name": "f", "arguments": "{}"}}]}, {"role": '
            b'"tool", "tool_call_id": "c", "content": [{"type": "image_url", "image_url": '
            b'{"url": "https://x/y.png"}}]}]',
            "entry 2: content[0] is a 'image_url' part; a tool message takes only text parts",
        ),
        (b'[{"role": "ui", "kind": "popup"}]', "entry 0: a ui entry's kind must be"),
        (b"[1]", "entry 0: is not an object"),
        (b'{"messages": []}', "no messages in the file"),
        (b'[{"role": "user", "content": "\\ud800"}]', "entry 0: holds a lone surrogate"),
        (
            b'[{"role": "user", "content": "q"}, {"role": "user", "content": "q", "name": "a b"}]',
            "entry 1: message",
        ),
    ],
)
def test_bad_input_is_one_line_naming_file_entry_and_problem(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: bytes, problem: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    line = _error_line(capsys, str(path))
    assert line.startswith(f"agentctx: {path}: ")
    assert problem in line


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
ENTRIES = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "tool", "system", "developer", "ui", "x"])},
    optional={
        "content": JSON_VALUES
        | st.lists(
            st.fixed_dictionaries(
                {"type": st.sampled_from(["text", "image_url", "input_audio", "file", "refusal"])},
                optional={
                    "text": JSON_VALUES,
                    "image_url": JSON_VALUES,
                    "input_audio": JSON_VALUES,
                    "file": JSON_VALUES,
                },
            ),
            max_size=2,
        ),
        "id": JSON_VALUES,
        "name": JSON_VALUES,
        "tool_call_id": JSON_VALUES,
        "tool_calls": JSON_VALUES,
        "refusal": JSON_VALUES,
        "payload": JSON_VALUES,
    },
)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=60),
        st.lists(ENTRIES, max_size=5).map(lambda es: json.dumps(es).encode()),
        st.lists(ENTRIES, max_size=5).map(lambda es: "\n".join(json.dumps(e) for e in es).encode()),
    ),
    st.booleans(),
)
def test_no_input_gives_a_traceback(data: bytes, as_json: bool) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "conversation.json"
        path.write_bytes(data)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main(["window", str(path), *(["--json"] if as_json else [])])
    assert status in (0, 2)
    if status == 2:
        assert out.getvalue() == ""
        assert len(err.getvalue().splitlines()) == 1
        assert err.getvalue().startswith(f"agentctx: {path}: ")
    elif as_json:  # the shape is the SDK's request type whatever the content
        printed = json.loads(out.getvalue())
        assert type_errors(printed, list[ChatCompletionMessageParam]) == []


def test_read_conversation_raises_a_typed_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(b"\xff")
    with pytest.raises(ConversationFileError, match="not UTF-8"):
        read_conversation(path)
    assert issubclass(ConversationFileError, ValueError)


def test_a_bad_limit_is_one_line_naming_the_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "ok.json"
    path.write_text(json.dumps([{"role": "user", "content": "hi", "id": "u1"}]), encoding="utf-8")
    line = _error_line(capsys, str(path), "--max-turns", "-1")
    assert line.startswith(f"agentctx: {path}: InvalidArgumentError: ")
    assert "max_attached_turns" in line


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
    assert any(line.startswith("-- ") for line in lines)
    assert "sys" in result.stdout


def test_current_turn_none_and_kept_tool_results(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``--current-turn none`` treats the last turn as history; ``--keep-tool-results N``
    sends the current turn's older results as placeholders over ``--max-tokens``."""
    entries: list[dict[str, Any]] = [
        {"role": "user", "content": "What did I order?", "id": "u1"},
        {"role": "assistant", "content": "A lamp.", "id": "a1"},
        {"role": "user", "content": "Read every page of the export.", "id": "u2"},
    ]
    for n in range(3):
        call = {"id": f"c{n}", "type": "function", "function": {"name": "fetch", "arguments": "{}"}}
        entries.append({"role": "assistant", "content": None, "tool_calls": [call], "id": f"s{n}"})
        entries.append(
            {"role": "tool", "tool_call_id": f"c{n}", "content": "x" * 300, "id": f"r{n}"}
        )
    path = tmp_path / "loop.json"
    path.write_text(json.dumps(entries), encoding="utf-8")

    def sent(*args: str) -> list[dict[str, Any]]:
        assert main(["window", str(path), "--json", "--ids", *args]) == 0
        parsed: list[dict[str, Any]] = json.loads(capsys.readouterr().out)
        return parsed

    last = [e["id"] for e in sent("--max-turns", "0")]
    assert last == ["u2", "s0", "r0", "s1", "r1", "s2", "r2"]
    assert [e["id"] for e in sent("--max-turns", "1", "--current-turn", "none")] == last
    assert [e["id"] for e in sent("--max-turns", "0", "--current-turn", "none")] == []
    tools = [
        e for e in sent("--max-tokens", "50", "--keep-tool-results", "1") if e["role"] == "tool"
    ]
    assert [e["content"] for e in tools] == [
        "[tool result left out of this window: call c0, tool fetch, 300 characters]",
        "[tool result left out of this window: call c1, tool fetch, 300 characters]",
        "x" * 300,
    ]
    assert [e["id"] for e in tools] == ["r0", "r1", "r2"]
