"""Conversion to and from the OpenAI chat-completions message format (SPEC §15)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentctx_fast.errors import AgentCtxError, InvalidMessageTypeError
from agentctx_fast.messages import (
    AiMessage,
    AudioPart,
    FilePart,
    ImagePart,
    Message,
    Part,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    UserMessage,
)


class OpenAIFormatError(AgentCtxError, ValueError):
    """An OpenAI-format entry that cannot become a message; names the entry's index."""


def _part_to_openai(part: Part) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if isinstance(part, ImagePart):
        return {"type": "image_url", "image_url": {"url": part.uri}}
    if isinstance(part, AudioPart):
        return {"type": "input_audio", "input_audio": {"url": part.uri, "format": part.mime_type}}
    return {"type": "file", "file": {"file_id": part.uri, "filename": part.name}}


def to_openai(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """OpenAI chat messages for ``messages``; UI messages (never model input) are left out."""
    out: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        entry: dict[str, Any]
        if isinstance(message, SystemMessage):
            entry = {"role": "system", "content": message.text}
        elif isinstance(message, UserMessage):
            content = message.content
            entry = {
                "role": "user",
                "content": content
                if isinstance(content, str)
                else [_part_to_openai(p) for p in content],
            }
        elif isinstance(message, AiMessage):
            entry = {"role": "assistant", "content": message.text}
            if message.tool_calls:
                entry["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    }
                    for call in message.tool_calls
                ]
        elif isinstance(message, ToolMessage):
            entry = {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.text}
            if message.tool_name is not None:
                entry["name"] = message.tool_name
        elif isinstance(message, Message):
            continue
        else:
            raise InvalidMessageTypeError(
                f"messages[{index}] is not a Message: got {type(message).__name__}"
            )
        entry["id"] = message.message_id
        out.append(entry)
    return out


def _field(entry: dict[str, Any], name: str, index: int, types: type | tuple[type, ...]) -> Any:
    value = entry.get(name)
    if not isinstance(value, types):
        raise OpenAIFormatError(f"entry {index}: {name!r} has the wrong type ({value!r})")
    return value


def _part_from_openai(part: Any, index: int) -> Part:
    if not isinstance(part, dict):
        raise OpenAIFormatError(f"entry {index}: a content part must be an object")
    kind = part.get("type")
    if kind == "text":
        return TextPart(_field(part, "text", index, str))
    if kind == "image_url":
        return ImagePart(uri=_field(_field(part, "image_url", index, dict), "url", index, str))
    if kind == "input_audio":
        audio = _field(part, "input_audio", index, dict)
        return AudioPart(uri=_field(audio, "url", index, str), mime_type=audio.get("format"))
    if kind == "file":
        file = _field(part, "file", index, dict)
        return FilePart(uri=_field(file, "file_id", index, str), name=file.get("filename"))
    raise OpenAIFormatError(f"entry {index}: unknown content part type {kind!r}")


def _text(entry: dict[str, Any], index: int) -> str:
    content = entry.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(_part_from_openai(p, index).text for p in content)  # type: ignore[union-attr]
    raise OpenAIFormatError(f"entry {index}: 'content' must be a string or a list of parts")


def from_openai(entries: Sequence[dict[str, Any]]) -> list[Message]:
    """Messages for OpenAI chat entries; an ``id`` field becomes the ``message_id``."""
    out: list[Message] = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise OpenAIFormatError(f"entry {index} is not an object")
        ids: dict[str, Any] = {}
        if "id" in entry and entry["id"] is not None:
            ids["message_id"] = _field(entry, "id", index, str)
        role = entry.get("role")
        message: Message
        if role in ("system", "developer"):
            message = SystemMessage(_text(entry, index), **ids)
        elif role == "user":
            content = entry.get("content")
            if isinstance(content, list):
                message = UserMessage(tuple(_part_from_openai(p, index) for p in content), **ids)
            else:
                message = UserMessage(_text(entry, index), **ids)
        elif role == "assistant":
            calls = []
            for raw in entry.get("tool_calls") or ():
                if not isinstance(raw, dict) or not isinstance(raw.get("id"), str) or not raw["id"]:
                    raise OpenAIFormatError(f"entry {index}: a tool call has no id")
                function = _field(raw, "function", index, dict)
                arguments = function.get("arguments", "{}")
                if not isinstance(arguments, str):
                    raise OpenAIFormatError(
                        f"entry {index}: tool call {raw['id']!r} arguments must be a JSON string"
                    )
                calls.append(ToolCall(raw["id"], _field(function, "name", index, str), arguments))
            content = entry.get("content")
            text = None if content is None else _text(entry, index)
            message = AiMessage(text, tuple(calls), **ids)
        elif role == "tool":
            name = entry.get("name")
            message = ToolMessage(
                _field(entry, "tool_call_id", index, str),
                _text(entry, index),
                tool_name=name if isinstance(name, str) else None,
                **ids,
            )
        else:
            raise OpenAIFormatError(f"entry {index}: unknown role {role!r}")
        out.append(message)
    return out
