"""Conversion to and from the Anthropic Messages request format.

`to_anthropic` gives ``(system, messages)`` for ``client.messages.create(system=...,
messages=...)``: the system messages as the ``system`` parameter (a string, a list of text
blocks when there are several, None without any), user messages with text, image and document
blocks, an AI message as its provider blocks (``thinking`` / ``redacted_thinking`` first, as the
API requires, and hosted-tool blocks), then its text and ``tool_use`` blocks, and the results
of consecutive tool messages grouped into one user message of ``tool_result`` blocks, as the API
requires right after the calls.

Limits (what the format does not carry): message ids (Anthropic messages have none),
``turn_id``, ``version``, metadata, participant names, refusals, ``ToolMessage.tool_name`` and
image ``detail``; system messages are all sent as the ``system`` parameter; tool arguments are
sent as the JSON object they hold and read back in ``json.dumps`` form; an empty AI text is
not sent (the API refuses empty text blocks). Audio has no Anthropic form and raises
`InvalidArgumentError`.

>>> from agentctx_fast import AiMessage, SystemMessage, ToolCall, ToolMessage, UserMessage
>>> system, messages = to_anthropic([
...     SystemMessage("Be brief."),
...     UserMessage("Where is ORD-1?"),
...     AiMessage(tool_calls=(ToolCall("toolu_1", "get_order", '{"id": "ORD-1"}'),)),
...     ToolMessage("toolu_1", "shipped"),
... ])
>>> system, messages[2]
('Be brief.', {'role': 'user', 'content': [{'type': 'tool_result', 'tool_use_id': 'toolu_1', \
'content': 'shipped'}]})
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agentctx_fast import _wire
from agentctx_fast.core.messages import (
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
    not_a_message,
)
from agentctx_fast.errors import AgentCtxError, ContentTooLargeError, InvalidArgumentError
from agentctx_fast.formats._provider import RESPONSES_ITEM_TYPES, items_for

if TYPE_CHECKING:
    from anthropic.types import MessageParam, TextBlockParam

__all__ = ["AnthropicFormatError", "from_anthropic", "to_anthropic"]


class AnthropicFormatError(InvalidArgumentError):
    """An Anthropic-format message that cannot become messages; names the message's index."""


def _source(part: ImagePart | FilePart, mime: str | None, where: str) -> dict[str, Any]:
    uri = str(part.uri)
    data = part.data
    if data is None and uri.startswith("data:"):
        parsed = _wire.parse_data_url(uri)
        if parsed is not None:
            mime, data = parsed[0] or mime, parsed[1]
    if data is not None:
        if mime is None:
            raise InvalidArgumentError(f"{where}: inline content needs a mime_type")
        encoded = base64.b64encode(data).decode("ascii")
        return {"type": "base64", "media_type": mime, "data": encoded}
    if _wire.URI_SCHEME.match(uri):
        return {"type": "url", "url": uri}
    return {"type": "file", "file_id": uri}


def _part_to_anthropic(part: Part, where: str) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if isinstance(part, ImagePart):
        return {"type": "image", "source": _source(part, _wire.image_mime(part), where)}
    if isinstance(part, FilePart):
        block: dict[str, Any] = {
            "type": "document",
            "source": _source(part, part.mime_type or "application/pdf", where),
        }
        if part.name is not None:
            block["title"] = part.name
        return block
    assert isinstance(part, AudioPart)
    raise InvalidArgumentError(f"{where}: audio cannot be sent; the Messages API takes no audio")


def _arguments(call: ToolCall, where: str) -> dict[str, Any]:
    try:
        value = json.loads(call.arguments)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise InvalidArgumentError(
            f"{where}: tool call {call.id!r} arguments must be a JSON object for tool_use input"
        )
    return value


def _ai_blocks(message: AiMessage, where: str) -> list[dict[str, Any]]:
    blocks = items_for(message, RESPONSES_ITEM_TYPES)
    if message.text:
        blocks.append({"type": "text", "text": message.text})
    for call in message.tool_calls:
        blocks.append(
            {"type": "tool_use", "id": call.id, "name": call.name, "input": _arguments(call, where)}
        )
    return blocks


def to_anthropic(
    messages: Sequence[Message],
) -> tuple[str | list[TextBlockParam] | None, list[MessageParam]]:
    """``(system, messages)`` for the Anthropic Messages API (UI messages left out).

    Content the API cannot take (audio, non-object tool arguments) raises
    `InvalidArgumentError` naming the message.
    """
    systems: list[str] = []
    out: list[Any] = []
    results: list[dict[str, Any]] | None = None  # the tool results being grouped
    for index, message in enumerate(messages):
        if isinstance(message, (SystemMessage, UserMessage, AiMessage)):
            results = None  # (a UI message, left out, does not end the group)
        if isinstance(message, SystemMessage):
            systems.append(message.text)
        elif isinstance(message, UserMessage):
            content: Any = message.content
            if not isinstance(content, str):
                content = _wire.write_parts(content, message, index, _part_to_anthropic)
            out.append({"role": "user", "content": content})
        elif isinstance(message, AiMessage):
            out.append(
                {"role": "assistant", "content": _ai_blocks(message, _wire.locate(message, index))}
            )
        elif isinstance(message, ToolMessage):
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id,
                "content": message.text,
            }
            if message.is_error:
                block["is_error"] = True
            if results is None:
                results = []
                out.append({"role": "user", "content": results})
            results.append(block)
        elif not isinstance(message, Message):
            raise not_a_message(message, _wire.locate(message, index))
    system: Any = None
    if len(systems) == 1:
        system = systems[0]
    elif systems:
        system = [{"type": "text", "text": text} for text in systems]
    return system, out


# -- from_anthropic ------------------------------------------------------------------------------


def _get(block: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    return _wire.read_field(block, key, kind, where, AnthropicFormatError)


def _media(block: Mapping[str, Any], where: str) -> dict[str, Any]:
    source = _get(block, "source", Mapping, where)
    kind = source.get("type")
    if kind == "base64":
        text = _get(source, "data", str, where)
        data = _wire.b64decode(text, AnthropicFormatError, f"{where}: data is not base64")
        return {"mime_type": source.get("media_type"), "data": data}
    if kind == "url":
        return {"uri": _get(source, "url", str, where)}
    if kind == "file":
        return {"uri": _get(source, "file_id", str, where)}
    raise AnthropicFormatError(f"{where}: unknown source type {kind!r}")


def _part_from_anthropic(block: Mapping[str, Any], where: str) -> Part:
    kind = block.get("type")
    if kind == "text":
        return TextPart(_get(block, "text", str, where))
    if kind == "image":
        return ImagePart(**_media(block, where))
    if kind == "document":
        return FilePart(name=block.get("title"), **_media(block, where))
    raise AnthropicFormatError(f"{where}: unknown content block type {kind!r}")


def _tool_result(block: Mapping[str, Any], where: str) -> ToolMessage:
    content = block.get("content", "")
    if isinstance(content, list):
        content = "".join(
            _get(b, "text", str, where)
            for b in content
            if isinstance(b, Mapping) and b.get("type") == "text"
        )
    if not isinstance(content, str):
        raise AnthropicFormatError(f"{where}: tool_result content must be a string or blocks")
    is_error = block.get("is_error") is True
    return ToolMessage(_get(block, "tool_use_id", str, where), content, is_error=is_error)


def _user(content: Any, where: str) -> list[Message]:
    if isinstance(content, str):
        return [UserMessage(content)]
    out: list[Message] = []
    parts: list[Part] = []
    for i, block in enumerate(content):
        at = f"{where} content[{i}]"
        if not isinstance(block, Mapping):
            raise AnthropicFormatError(f"{at}: a content block must be an object")
        if block.get("type") == "tool_result":
            out.append(_tool_result(block, at))
        else:
            parts.append(_part_from_anthropic(block, at))
    if parts or not out:
        out.append(UserMessage(tuple(parts)))
    return out


def _assistant(content: Any, where: str) -> AiMessage:
    if isinstance(content, str):
        return AiMessage(content)
    texts: list[str] = []
    calls: list[ToolCall] = []
    items: list[dict[str, Any]] = []
    for i, block in enumerate(content):
        at = f"{where} content[{i}]"
        if not isinstance(block, Mapping):
            raise AnthropicFormatError(f"{at}: a content block must be an object")
        kind = block.get("type")
        if kind == "text" and block.keys() <= {"type", "text"}:
            texts.append(_get(block, "text", str, at))
        elif kind == "tool_use":
            arguments = json.dumps(_get(block, "input", Mapping, at), ensure_ascii=False)
            calls.append(
                ToolCall(_get(block, "id", str, at), _get(block, "name", str, at), arguments)
            )
        else:  # thinking, redacted_thinking, hosted tools, text with citations: kept opaque
            items.append(dict(block))
    return AiMessage("".join(texts) if texts else None, tuple(calls), provider_items=tuple(items))


def from_anthropic(
    messages: Sequence[Mapping[str, Any]], system: str | Sequence[Mapping[str, Any]] | None = None
) -> list[Message]:
    """Messages for an Anthropic Messages request: ``system`` first (one `SystemMessage` per
    text block), then each message; a user message's ``tool_result`` blocks become
    `ToolMessage` s (its other blocks one `UserMessage` after them), an assistant message's
    blocks other than text and ``tool_use`` (``thinking``, ``redacted_thinking``, hosted tools,
    text with citations) its ``provider_items``. Malformed input raises
    `AnthropicFormatError` (an `InvalidArgumentError`) naming the message.
    """
    out: list[Message] = []
    if isinstance(system, str):
        out.append(SystemMessage(system))
    elif system is not None:
        for i, block in enumerate(system):
            if not isinstance(block, Mapping) or block.get("type") != "text":
                raise AnthropicFormatError(f"system[{i}] must be a text block")
            out.append(SystemMessage(_get(block, "text", str, f"system[{i}]")))
    for index, entry in enumerate(messages):
        where = f"message {index}"
        try:
            if not isinstance(entry, Mapping):
                raise AnthropicFormatError(f"{where} is not an object")
            role, content = entry.get("role"), entry.get("content")
            if not isinstance(content, (str, list)):
                raise AnthropicFormatError(f"{where}: 'content' must be a string or a list")
            if role == "user":
                out.extend(_user(content, where))
            elif role == "assistant":
                out.append(_assistant(content, where))
            else:
                raise AnthropicFormatError(f"{where}: unknown role {role!r}")
        except (AnthropicFormatError, ContentTooLargeError):
            raise
        except AgentCtxError as error:  # a value a message class refuses
            raise AnthropicFormatError(f"{where}: {error}") from None
    return out
