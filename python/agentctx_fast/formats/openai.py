"""Conversion to and from the OpenAI Chat Completions request format.

`to_openai` gives exactly what ``client.chat.completions.create(messages=...)`` accepts: each
message carries only the keys that API defines. `from_openai` reads that form back (and the
``id`` key that ``include_ids=True`` adds for storage), keeping everything the format carries.

>>> from agentctx_fast import AiMessage, ToolCall, ToolMessage, UserMessage
>>> history = [
...     UserMessage("Where is ORD-1?", message_id="u1"),
...     AiMessage(tool_calls=(ToolCall("c1", "get_order", '{"id": "ORD-1"}'),), message_id="a1"),
...     ToolMessage("c1", "shipped", tool_name="get_order", message_id="t1"),
... ]
>>> to_openai(history)[2]
{'role': 'tool', 'tool_call_id': 'c1', 'content': 'shipped'}
>>> [m.message_id for m in from_openai(to_openai(history, include_ids=True))]
['u1', 'a1', 't1']
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, overload

from agentctx_fast import _wire
from agentctx_fast.core.messages import (
    SYSTEM_ROLES,
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
from agentctx_fast.errors import (
    AgentCtxError,
    ContentTooLargeError,
    InvalidArgumentError,
)

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam

__all__ = ["OpenAIFormatError", "from_openai", "openai_tools", "to_openai"]


class OpenAIFormatError(InvalidArgumentError):
    """An OpenAI-format entry that cannot become a message; names the entry's index."""


_AUDIO_FORMATS = {
    "audio/wav": "wav",
    "audio/x-wav": "wav",
    "audio/wave": "wav",
    "audio/vnd.wave": "wav",
    "audio/mpeg": "mp3",
    "audio/mp3": "mp3",
    "audio/mpeg3": "mp3",
    "audio/x-mp3": "mp3",
}
_AUDIO_MIME = {"wav": "audio/wav", "mp3": "audio/mpeg"}


def _audio_format(part: AudioPart, where: str) -> str:
    fmt = _AUDIO_FORMATS.get((part.mime_type or "").lower())
    if fmt is None and part.mime_type is None and part.name:
        fmt = {".wav": "wav", ".mp3": "mp3"}.get(part.name[-4:].lower())
    if fmt is None:
        raise InvalidArgumentError(
            f"{where}: audio format {part.mime_type or part.name!r} cannot be sent; the Chat "
            "Completions API takes wav or mp3 input audio"
        )
    return fmt


def _part_to_openai(part: Part, where: str) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if isinstance(part, ImagePart):
        url = str(part.uri) if part.data is None else _wire.inline_image_url(part, part.data, where)
        image: dict[str, Any] = {"url": url}
        if part.detail is not None:
            image["detail"] = part.detail
        return {"type": "image_url", "image_url": image}
    if isinstance(part, AudioPart):
        fmt = _audio_format(part, where)
        data = part.data
        if data is None:
            parsed = _wire.parse_data_url(str(part.uri))
            if parsed is None:
                raise InvalidArgumentError(
                    f"{where}: audio by reference ({part.uri!r}) cannot be sent; the Chat "
                    "Completions API takes input audio as inline base64 data"
                )
            data = parsed[1]
        return {
            "type": "input_audio",
            "input_audio": {"data": base64.b64encode(data).decode("ascii"), "format": fmt},
        }
    return {"type": "file", "file": _file_to_openai(part, where)}


def _file_to_openai(part: FilePart, where: str) -> dict[str, Any]:
    if part.data is not None:
        url = _wire.inline_file_url(part, part.data)
        return {"file_data": url, "filename": part.name or "file"}
    uri = str(part.uri)
    if uri.startswith("data:"):
        return {"file_data": uri, "filename": part.name or "file"}
    if _wire.URI_SCHEME.match(uri):
        raise InvalidArgumentError(
            f"{where}: file {uri!r} is a URL; the Chat Completions API takes a provider file id "
            "(upload it first) or inline data"
        )
    file: dict[str, Any] = {"file_id": uri}
    if part.name is not None:
        file["filename"] = part.name
    return file


def _system_to_openai(message: SystemMessage, index: int) -> dict[str, Any]:
    entry: dict[str, Any] = {"role": message.role, "content": message.text}
    if message.name is not None:
        entry["name"] = message.name
    return entry


def _user_to_openai(message: UserMessage, index: int) -> dict[str, Any]:
    content: Any = message.content
    if not isinstance(content, str):  # (the usual text content stays on the short path)
        content = _wire.write_parts(content, message, index, _part_to_openai)
    entry: dict[str, Any] = {"role": "user", "content": content}
    if message.name is not None:
        entry["name"] = message.name
    return entry


def _ai_to_openai(message: AiMessage, index: int) -> dict[str, Any]:
    entry: dict[str, Any] = {"role": "assistant"}
    text, calls, refusal = message.text, message.tool_calls, message.refusal
    if text is not None:
        entry["content"] = text
    elif not calls and refusal is None:
        entry["content"] = ""  # the API needs content when there is nothing else
    if refusal is not None:
        entry["refusal"] = refusal
    if message.name is not None:
        entry["name"] = message.name
    if calls:
        out = []  # a plain loop: cheaper than a comprehension for the usual one call
        for call in calls:
            if not call.id:  # the API needs one, and `from_openai` reads none as malformed
                where = _wire.locate(message, index)
                raise InvalidArgumentError(f"{where}: tool call {call.name!r} has no id")
            function = {"name": call.name, "arguments": call.arguments}
            out.append({"id": call.id, "type": "function", "function": function})
        entry["tool_calls"] = out
    return entry


def _tool_to_openai(message: ToolMessage, index: int) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.text}


# The converter of each model-visible message class (a subclass is matched by isinstance).
_CONVERTERS: dict[type, Any] = {
    SystemMessage: _system_to_openai,
    UserMessage: _user_to_openai,
    AiMessage: _ai_to_openai,
    ToolMessage: _tool_to_openai,
}


def _message_to_openai(message: object, index: int) -> dict[str, Any] | None:
    convert = _CONVERTERS.get(type(message))
    if convert is not None:
        return convert(message, index)  # type: ignore[no-any-return]
    for kind, convert in _CONVERTERS.items():
        if isinstance(message, kind):
            return convert(message, index)  # type: ignore[no-any-return]
    if isinstance(message, Message):
        return None  # UI messages have no model form
    raise not_a_message(message, _wire.locate(message, index))


@overload
def to_openai(
    messages: Sequence[Message], *, include_ids: Literal[False] = False
) -> list[ChatCompletionMessageParam]: ...


@overload
def to_openai(
    messages: Sequence[Message], *, include_ids: Literal[True]
) -> list[dict[str, Any]]: ...


@overload
def to_openai(messages: Sequence[Message], *, include_ids: bool) -> list[Any]: ...


def to_openai(messages: Sequence[Message], *, include_ids: bool = False) -> Any:
    """The OpenAI Chat Completions request messages for ``messages``.

    The list is passed unchanged as ``messages=`` to ``client.chat.completions.create``. UI
    messages (never model input) are left out. ``include_ids=True`` adds each message's id as
    ``"id"``, for storage and files: that form is not API input. A part the API cannot take
    (audio other than wav or mp3, audio or a file by URL) raises `InvalidArgumentError` naming
    the message.
    """
    out: list[dict[str, Any]] = []
    converters = _CONVERTERS
    for index, message in enumerate(messages):
        convert = converters.get(type(message))  # a library class, else the slower match
        entry = _message_to_openai(message, index) if convert is None else convert(message, index)
        if entry is None:
            continue
        if include_ids:
            entry["id"] = message.message_id
        out.append(entry)
    return out


def openai_tools(tools: Sequence[Any]) -> list[ChatCompletionToolParam]:
    """The agent's tools as Chat Completions function tools (the ``tools=`` argument).

    Any object with ``name``, ``description`` and ``parameters`` (a JSON schema) works, a
    `Tool` among them.

    >>> from agentctx_fast import Tool
    >>> def get_order(order_id: str) -> str:
    ...     '''Look an order up.'''
    ...     return order_id
    >>> openai_tools([Tool("get_order", get_order)])[0]["function"]["name"]
    'get_order'
    """
    out: list[Any] = []
    for index, tool in enumerate(tools):
        name = getattr(tool, "name", None)
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(f"tools[{index}] has no name")
        parameters = getattr(tool, "parameters", None)
        if parameters is None:
            parameters = {"type": "object", "properties": {}}
        if not isinstance(parameters, Mapping):
            raise InvalidArgumentError(f"tool {name!r}: parameters must be a JSON schema object")
        function: dict[str, Any] = {"name": name, "parameters": dict(parameters)}
        description = getattr(tool, "description", None)
        if description:
            function["description"] = str(description)
        out.append({"type": "function", "function": function})
    return out


# --- reading -------------------------------------------------------------------------------


def _get(entry: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    return _wire.read_field(entry, key, kind, where, OpenAIFormatError)


def _part_from_openai(part: Any, where: str) -> Part:
    if not isinstance(part, Mapping):
        raise OpenAIFormatError(f"{where}: a content part must be an object")
    kind = part.get("type")
    if kind == "text":
        return TextPart(_get(part, "text", str, where))
    if kind == "image_url":
        image = _get(part, "image_url", Mapping, where)
        url = _get(image, "url", str, f"{where} image_url")
        return _wire.image_from_url(url, image.get("detail"))
    if kind == "input_audio":
        audio = _get(part, "input_audio", Mapping, where)
        fmt = _get(audio, "format", str, f"{where} input_audio")
        if fmt not in _AUDIO_MIME:
            raise OpenAIFormatError(f"{where}: input audio format must be wav or mp3, got {fmt!r}")
        data = _wire.b64decode(
            _get(audio, "data", str, f"{where} input_audio"),
            OpenAIFormatError,
            f"{where}: input audio data is not base64",
        )
        return AudioPart(mime_type=_AUDIO_MIME[fmt], data=data)
    if kind == "file":
        file = _get(part, "file", Mapping, where)
        name = file.get("filename")
        if file.get("file_id") is not None:
            return FilePart(uri=_get(file, "file_id", str, f"{where} file"), name=name)
        parsed = _wire.decode_file_data(
            _get(file, "file_data", str, f"{where} file"),
            OpenAIFormatError,
            f"{where}: file_data is not base64",
        )
        return FilePart(mime_type=parsed[0], data=parsed[1], name=name)
    raise OpenAIFormatError(f"{where}: unknown content part type {kind!r}")


def _text_content(entry: Mapping[str, Any], where: str, *, allow_refusal: bool = False) -> Any:
    """The text of a content that only text parts may make up (None when absent)."""
    content = entry.get("content")
    if isinstance(content, str) or (content is None and allow_refusal):
        return content
    if content is None:
        raise OpenAIFormatError(f"{where}: a {entry.get('role')} message needs 'content'")
    if not isinstance(content, list):
        raise OpenAIFormatError(f"{where}: 'content' must be a string or a list of parts")
    texts: list[str] = []
    for i, part in enumerate(content):
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind == "refusal" and allow_refusal:
            continue
        if kind != "text":
            raise OpenAIFormatError(
                f"{where}: content[{i}] is a {kind!r} part; a {entry.get('role')} message "
                "takes only text parts"
            )
        texts.append(_get(part, "text", str, f"{where} content[{i}]"))
    return "\n".join(texts)


def _tool_call_from_openai(raw: Any, where: str) -> ToolCall:
    if not isinstance(raw, Mapping):
        raise OpenAIFormatError(f"{where}: a tool call must be an object")
    call_id = raw.get("id")
    if not isinstance(call_id, str) or not call_id:
        raise OpenAIFormatError(f"{where}: a tool call has no id")
    if raw.get("type", "function") != "function":
        raise OpenAIFormatError(f"{where}: tool call {call_id!r} is not a function call")
    function = _get(raw, "function", Mapping, f"{where} tool call {call_id!r}")
    arguments = _wire.json_string_arguments(
        function.get("arguments"), f"tool call {call_id!r}", where, OpenAIFormatError
    )
    name = _get(function, "name", str, f"{where} tool call {call_id!r}")
    return ToolCall(call_id, name, arguments)


def _assistant_from_openai(entry: Mapping[str, Any], where: str, ids: dict[str, Any]) -> Message:
    for legacy in ("function_call", "audio"):
        if entry.get(legacy) is not None:
            raise OpenAIFormatError(f"{where}: assistant {legacy!r} is not supported")
    calls = entry.get("tool_calls") or []
    if not isinstance(calls, list):
        raise OpenAIFormatError(f"{where}: 'tool_calls' must be a list")
    refusal = entry.get("refusal")
    content = entry.get("content")
    if refusal is None and isinstance(content, list):
        parts = [p for p in content if isinstance(p, Mapping) and p.get("type") == "refusal"]
        if parts:
            refusal = "\n".join(_get(p, "refusal", str, where) for p in parts)
    if refusal is not None and not isinstance(refusal, str):
        raise OpenAIFormatError(f"{where}: 'refusal' must be a string")
    text = _text_content(entry, where, allow_refusal=True)
    if isinstance(content, list) and not any(
        isinstance(p, Mapping) and p.get("type") == "text" for p in content
    ):
        text = None
    return AiMessage(
        text,
        tuple(_tool_call_from_openai(c, where) for c in calls),
        refusal=refusal,
        name=entry.get("name"),
        **ids,
    )


def _entry_from_openai(entry: Any, where: str) -> Message:
    if not isinstance(entry, Mapping):
        raise OpenAIFormatError(f"{where} is not an object")
    ids = _wire.read_id(entry, where, OpenAIFormatError)
    role = entry.get("role")
    if role in SYSTEM_ROLES:
        return SystemMessage(_text_content(entry, where), role=role, name=entry.get("name"), **ids)
    if role == "user":
        content = entry.get("content")
        if isinstance(content, list):
            parts = tuple(
                _part_from_openai(p, f"{where} content[{i}]") for i, p in enumerate(content)
            )
            return UserMessage(parts, name=entry.get("name"), **ids)
        if not isinstance(content, str):
            raise OpenAIFormatError(f"{where}: a user message needs a string or list 'content'")
        return UserMessage(content, name=entry.get("name"), **ids)
    if role == "assistant":
        return _assistant_from_openai(entry, where, ids)
    if role == "tool":
        # "name" is not part of the API's tool message; older files carry it: keep it.
        name = entry.get("name")
        return ToolMessage(
            _get(entry, "tool_call_id", str, where),
            _text_content(entry, where),
            tool_name=name if isinstance(name, str) and name else None,
            **ids,
        )
    if role == "function":
        raise OpenAIFormatError(f"{where}: the legacy 'function' role is not supported")
    if role is None:
        raise OpenAIFormatError(f"{where} has no role")
    raise OpenAIFormatError(f"{where}: unknown role {role!r}")


def from_openai(entries: Sequence[Mapping[str, Any]]) -> list[Message]:
    """Messages for OpenAI Chat Completions request messages (with or without ``id``).

    Keeps what the format carries: ``developer`` messages (a `SystemMessage` with
    ``role="developer"``), the ``name`` of system, user and assistant messages, ``refusal``,
    image ``detail`` and every content part. Malformed input raises `OpenAIFormatError` (an
    `InvalidArgumentError`) naming the entry, or `ContentTooLargeError` for inline content
    over the cap.
    """
    out: list[Message] = []
    for index, entry in enumerate(entries):
        where = f"entry {index}"
        try:
            out.append(_entry_from_openai(entry, where))
        except OpenAIFormatError:
            raise
        except ContentTooLargeError as error:
            raise ContentTooLargeError(f"{where}: {error}") from None
        except AgentCtxError as error:  # a value a message class refuses
            raise OpenAIFormatError(f"{where}: {error}") from None
    return out
