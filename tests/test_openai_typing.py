"""`to_openai` and `openai_tools` type-check as the SDK's ``messages=`` and ``tools=``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SNIPPET = """
import openai

from agentctx_fast import Tool, UserMessage, openai_tools, to_openai
from agentctx_fast import AsyncOpenAIChatModel, ChatModel, OpenAIChatModel, StreamingChatModel


def get_order(order_id: str) -> str:
    return order_id


def send(client: openai.OpenAI) -> None:
    client.chat.completions.create(
        model="gpt-4o",
        messages=to_openai([UserMessage("hi")]),
        tools=openai_tools([Tool("get_order", get_order)]),
    )
    stored = to_openai([UserMessage("hi")], include_ids=True)
    client.chat.completions.create(model="gpt-4o", messages=stored)  # line 19: not API input


def models(
    client: openai.OpenAI, async_client: openai.AsyncOpenAI
) -> tuple[ChatModel, StreamingChatModel]:
    return OpenAIChatModel(client, "gpt-4o"), AsyncOpenAIChatModel(async_client, "gpt-4o")
"""


def test_request_messages_tools_and_models_type_check_and_the_storage_form_does_not(
    tmp_path: Path,
) -> None:
    source = tmp_path / "snippet.py"
    source.write_text(SNIPPET, encoding="utf-8")
    # In a child process: mypy raises the interpreter's recursion limit for good.
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-incremental",
            "--cache-dir",
            str(tmp_path / "cache"),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=os.environ.copy(),
        check=False,
    )
    out = result.stdout
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert result.returncode == 1, out + result.stderr
    assert len(errors) == 1, out
    assert errors[0].startswith(f"{source}:19:") and 'Argument "messages"' in errors[0]
