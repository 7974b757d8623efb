"""Reading a conversation file for the ``agentctx window`` command (SPEC §18).

A file (or ``-`` for standard input) holds OpenAI-form messages: a JSON array, JSONL (one
message a line), or an object with a ``messages`` array. Entries with ``"role": "ui"`` are
UI-only messages (``"kind": "action"`` or ``"form"``, an optional ``payload`` and ``status``).
Every problem is a `ConversationFileError` whose one-line message names the file, the entry
(and its line, for JSONL) and what is wrong.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

from agentctx_fast._ids import is_unicode_text
from agentctx_fast.core.messages import AgentActionMessage, AgentFormMessage, Message
from agentctx_fast.errors import AgentCtxError, ContentTooLargeError, InvalidArgumentError
from agentctx_fast.formats.openai import from_openai

STDIN = "-"


class ConversationFileError(InvalidArgumentError):
    """A conversation file that cannot be read; the message names the file and the entry."""


def read_conversation(source: str | Path, stdin: BinaryIO | None = None) -> list[Message]:
    """The messages of the conversation file ``source`` (``"-"`` reads ``stdin``)."""
    name = "<stdin>" if str(source) == STDIN else str(source)
    raw = _read_bytes(source, name, stdin)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        bad_line = raw[: error.start].count(b"\n") + 1
        raise ConversationFileError(
            f"{name}: not UTF-8 text (byte 0x{raw[error.start]:02x} at line {bad_line}, "
            f"offset {error.start})"
        ) from None
    if not text.strip():
        raise ConversationFileError(f"{name}: the file is empty; expected messages")
    entries = _entries(text, name)
    if not entries:
        raise ConversationFileError(f"{name}: no messages in the file")
    check_surrogates = _SURROGATE_ESCAPE.search(text) is not None
    messages: list[Message] = []
    for index, line, entry in entries:
        where = f"entry {index}" if line is None else f"entry {index} (line {line})"
        if check_surrogates and _lone_surrogate_in(entry, name):
            raise ConversationFileError(
                f"{name}: {where}: holds a lone surrogate (an unpaired \\uD800-\\uDFFF "
                "escape), which is not text and cannot be sent"
            )
        try:
            messages.append(_message(entry))
        except AgentCtxError as error:
            problem = str(error).removeprefix("entry 0: ").removeprefix("entry 0 ")
            raise ConversationFileError(f"{name}: {where}: {_one_line(problem)}") from None
    return messages


def _read_bytes(source: str | Path, name: str, stdin: BinaryIO | None) -> bytes:
    if str(source) == STDIN:
        return (stdin or sys.stdin.buffer).read()
    path = Path(source)
    try:
        if path.is_dir():
            raise ConversationFileError(f"{name}: is a directory, not a conversation file")
        return path.read_bytes()
    except OSError as error:
        raise ConversationFileError(f"{name}: cannot read: {error.strerror or error}") from None


# Raw UTF-8 cannot hold a surrogate: only a \uD800-\uDFFF escape in the JSON can make one.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _has_lone_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        return not is_unicode_text(value)
    if isinstance(value, list):
        return any(_has_lone_surrogate(item) for item in value)
    if isinstance(value, dict):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(v) for k, v in value.items())
    return False


def _lone_surrogate_in(entry: Any, name: str) -> bool:
    try:
        return _has_lone_surrogate(entry)
    except RecursionError:
        raise ConversationFileError(f"{name}: JSON nested too deeply") from None


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _json_error(name: str, error: json.JSONDecodeError, line_offset: int = 0) -> str:
    return (
        f"{name}: not valid JSON at line {error.lineno + line_offset}, column {error.colno}: "
        f"{error.msg}"
    )


def _entries(text: str, name: str) -> list[tuple[int, int | None, Any]]:
    """``(index, line or None, entry)`` for every entry of the file."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            whole = json.loads(text)
        except json.JSONDecodeError as error:
            if error.msg != "Extra data":
                raise ConversationFileError(_json_error(name, error)) from None
            return _jsonl(text, name)  # several objects: one message a line
        except RecursionError:
            raise ConversationFileError(f"{name}: JSON nested too deeply") from None
        if isinstance(whole, dict) and "messages" in whole:
            whole = whole["messages"]
            if not isinstance(whole, list):
                raise ConversationFileError(f"{name}: 'messages' must be an array")
            return [(i, None, entry) for i, entry in enumerate(whole)]
        first_line = text[: len(text) - len(stripped)].count("\n") + 1
        return [(0, first_line, whole)]  # JSONL of a single message
    try:
        whole = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConversationFileError(_json_error(name, error)) from None
    except RecursionError:
        raise ConversationFileError(f"{name}: JSON nested too deeply") from None
    if not isinstance(whole, list):
        raise ConversationFileError(
            f"{name}: expected a JSON array of messages, JSONL, or an object with a "
            f"'messages' array; got a JSON {type(whole).__name__}"
        )
    return [(i, None, entry) for i, entry in enumerate(whole)]


def _jsonl(text: str, name: str) -> list[tuple[int, int | None, Any]]:
    out: list[tuple[int, int | None, Any]] = []
    # split("\n"), not splitlines(): JSON text may hold U+2028 and other line separators.
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            out.append((len(out), number, json.loads(line)))
        except json.JSONDecodeError as error:
            raise ConversationFileError(_json_error(name, error, number - 1)) from None
        except RecursionError:
            raise ConversationFileError(f"{name}: line {number}: JSON nested too deeply") from None
    return out


def _message(entry: Any) -> Message:
    if isinstance(entry, Mapping) and entry.get("role") == "ui":
        return _ui_message(entry)
    try:
        return from_openai([entry])[0]
    except ContentTooLargeError as error:
        raise ContentTooLargeError(str(error).removeprefix("entry 0: ")) from None


def _ui_message(entry: Mapping[str, Any]) -> Message:
    ids: dict[str, Any] = {}
    if entry.get("id") is not None:
        if not isinstance(entry["id"], str):
            raise InvalidArgumentError("'id' must be a string")
        ids["message_id"] = entry["id"]
    kind = entry.get("kind", "action")
    if kind == "form":
        return AgentFormMessage(payload=entry.get("payload"), status=entry.get("status"), **ids)
    if kind == "action":
        return AgentActionMessage(payload=entry.get("payload"), **ids)
    raise InvalidArgumentError(f"a ui entry's kind must be 'action' or 'form', got {kind!r}")
