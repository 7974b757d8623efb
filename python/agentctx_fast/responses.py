"""Conversion to and from OpenAI Responses API input items.

`to_responses` gives a list ``client.responses.create(input=...)`` accepts: system and user
messages as input messages, an AI message as its provider items (``reasoning`` with its
encrypted content, hosted-tool calls) followed by its assistant message and its
``function_call`` items, a tool message as a ``function_call_output``. That order is the one the
API produced them in, so a reasoning item is followed by the item it belongs to.
`from_responses` reads items back into messages, keeping each output message's ``id`` (as the
`AiMessage`'s ``message_id``), the ids and statuses of function calls and provider items.

What has no place in the message model is kept in the message's ``metadata`` under
`RESPONSES_METADATA_KEY`: an input message's other keys (``"type": "message"``, ``status``)
and list content of a system message, an output message's ``status`` (when not
``"completed"``) and other keys (``phase``), its content when it carries annotations or several
parts, each function call's item ``id`` and ``status`` (by call id), a function call output's
``status`` and list output. `to_responses` puts them back.

Limits (what the format does not carry): ``turn_id``, ``version``, other metadata, participant
names and `ToolMessage.is_error`; an assistant message ``id`` is sent only when it is an API id
(``msg_…``), other ids only with ``include_ids=True`` (a storage form, not API input); image
``detail`` ``"auto"`` reads back as None; an `AiMessage` is read back from consecutive items
in the order above, so an API output that interleaves them differently (a reasoning item after
a function call) becomes two AI messages.

>>> from agentctx_fast import AiMessage, ToolCall, ToolMessage, UserMessage
>>> reply = AiMessage(
...     tool_calls=(ToolCall("call_1", "get_order", '{"id": 1}'),),
...     provider_items=({"type": "reasoning", "id": "rs_1", "summary": []},),
... )
>>> [item.get("type") for item in to_responses([UserMessage("where?"), reply])]
[None, 'reasoning', 'function_call']
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agentctx_fast._provider import ANTHROPIC_BLOCK_TYPES, items_for
from agentctx_fast.errors import AgentCtxError, ContentTooLargeError, InvalidArgumentError
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
from agentctx_fast.openai import (
    _URI_SCHEME,
    _data_url,
    _image_mime,
    _parse_data_url,
    _where,
    read_field,
)

if TYPE_CHECKING:
    from openai.types.responses import ResponseInputItemParam

__all__ = ["RESPONSES_METADATA_KEY", "ResponsesFormatError", "from_responses", "to_responses"]

RESPONSES_METADATA_KEY = "openai_responses"
"""The metadata key holding the Responses fields a message has no place for."""


class ResponsesFormatError(InvalidArgumentError):
    """A Responses input item that cannot become a message; names the item's index."""


# -- to_responses --------------------------------------------------------------------------------


def _part_to_responses(part: Part, where: str) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "input_text", "text": part.text}
    if isinstance(part, ImagePart):
        image: dict[str, Any] = {"type": "input_image", "detail": part.detail or "auto"}
        if part.data is not None:
            mime = _image_mime(part)
            if mime is None:
                raise InvalidArgumentError(
                    f"{where}: an inline image needs a mime_type (not png, jpeg, gif or webp)"
                )
            image["image_url"] = _data_url(mime, part.data)
        elif _URI_SCHEME.match(str(part.uri)):
            image["image_url"] = part.uri
        else:
            image["file_id"] = part.uri
        return image
    if isinstance(part, AudioPart):
        raise InvalidArgumentError(
            f"{where}: audio cannot be sent; Responses input messages take no audio parts"
        )
    file: dict[str, Any] = {"type": "input_file"}
    uri = str(part.uri)
    if part.data is not None or uri.startswith("data:"):
        if part.data is not None:
            uri = _data_url(part.mime_type or "application/octet-stream", part.data)
        file["file_data"] = uri
        file["filename"] = part.name or "file"
        return file
    file["file_url" if _URI_SCHEME.match(uri) else "file_id"] = uri
    if part.name is not None:
        file["filename"] = part.name
    return file


def _extras(message: Message) -> dict[str, Any]:
    kept = message.metadata.get(RESPONSES_METADATA_KEY)
    return kept if isinstance(kept, dict) else {}


def _ai_to_responses(message: AiMessage, index: int, include_ids: bool) -> list[dict[str, Any]]:
    extras = _extras(message)
    out = items_for(message, ANTHROPIC_BLOCK_TYPES)
    text, refusal = message.text, message.refusal
    api_id = message.message_id.startswith("msg_")
    wants_item = text is not None or refusal is not None
    if wants_item or include_ids or not (out or message.tool_calls):
        content: list[dict[str, Any]] = []
        if text is not None:
            content.append({"type": "output_text", "text": text, "annotations": []})
        if refusal is not None:
            content.append({"type": "refusal", "refusal": refusal})
        kept = extras.get("content")
        if isinstance(kept, list) and _joined(kept, "output_text", "text") == text:
            content = kept  # annotations, logprobs, several parts: as the API gave them
        if api_id or include_ids:
            item: dict[str, Any] = {
                "type": "message",
                "role": "assistant",
                "id": message.message_id,
                "status": "completed",
                "content": content,
            }
            item.update((k, v) for k, v in extras.items() if k not in ("content", "calls"))
            out.append(item)
        elif text is not None or refusal is not None or not out:
            # Without an API id the easy form: the assistant's text (a refusal as its text).
            out.append(
                {"role": "assistant", "content": text if text is not None else refusal or ""}
            )
    calls = extras.get("calls")
    for call in message.tool_calls:
        item = {
            "type": "function_call",
            "call_id": call.id,
            "name": call.name,
            "arguments": call.arguments,
        }
        kept = calls.get(call.id) if isinstance(calls, dict) else None
        if isinstance(kept, dict):
            item.update(kept)
        out.append(item)
    return out


def _joined(content: list[Any], kind: str, key: str) -> str | None:
    texts = [p.get(key) for p in content if isinstance(p, Mapping) and p.get("type") == kind]
    strings = [t for t in texts if isinstance(t, str)]
    return "".join(strings) if texts and len(strings) == len(texts) else None


def _message_to_responses(message: object, index: int, include_ids: bool) -> list[dict[str, Any]]:
    if isinstance(message, AiMessage):
        return _ai_to_responses(message, index, include_ids)
    item: dict[str, Any]
    if isinstance(message, SystemMessage):
        extras = _extras(message)
        kept = extras.get("content")
        text: Any = message.text
        if isinstance(kept, list) and _joined(kept, "input_text", "text") == text:
            text = kept  # the parts the item came with
        item = {"role": message.role, "content": text}
        item.update((k, v) for k, v in extras.items() if k != "content")
    elif isinstance(message, UserMessage):
        content: Any = message.content
        if not isinstance(content, str):
            where = _where(message, index)
            content = [
                _part_to_responses(p, f"{where} content[{i}]") for i, p in enumerate(content)
            ]
        item = {"role": "user", "content": content}
        item.update(_extras(message))
    elif isinstance(message, ToolMessage):
        extras = _extras(message)
        output = extras.get("output")
        if not (isinstance(output, list) and _joined(output, "input_text", "text") == message.text):
            output = message.text
        item = {"type": "function_call_output", "call_id": message.tool_call_id, "output": output}
        if message.tool_name is not None:
            item["name"] = message.tool_name
        item.update((k, v) for k, v in extras.items() if k != "output")
    elif isinstance(message, Message):
        return []  # UI messages have no model form
    else:
        where = _where(message, index)
        raise InvalidArgumentError(f"{where} is not a Message: got {type(message).__name__}")
    if include_ids:
        item["id"] = message.message_id
    return [item]


def to_responses(
    messages: Sequence[Message], *, include_ids: bool = False
) -> list[ResponseInputItemParam]:
    """Responses API input items for ``messages`` (UI messages left out).

    ``include_ids=True`` adds every message's ``id`` (and always writes an AI message's
    assistant item) so `from_responses` gives the same messages back: a storage form, not API
    input. Content the API cannot take raises `InvalidArgumentError` naming the message.
    """
    out: list[Any] = []
    for index, message in enumerate(messages):
        out.extend(_message_to_responses(message, index, include_ids))
    return out


# -- from_responses ------------------------------------------------------------------------------


def _get(item: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    return read_field(item, key, kind, where, ResponsesFormatError)


def _b64(text: str, where: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ResponsesFormatError(f"{where}: data is not base64") from None


def _part_from_responses(part: Any, where: str) -> Part:
    if not isinstance(part, Mapping):
        raise ResponsesFormatError(f"{where}: a content part must be an object")
    kind = part.get("type")
    if kind in ("input_text", "output_text"):
        return TextPart(_get(part, "text", str, where))
    if kind == "input_image":
        detail = part.get("detail")
        detail = None if detail == "auto" else detail
        if part.get("file_id") is not None:
            return ImagePart(uri=_get(part, "file_id", str, where), detail=detail)
        url = _get(part, "image_url", str, where)
        parsed = _parse_data_url(url)
        if parsed is not None:
            return ImagePart(mime_type=parsed[0], data=parsed[1], detail=detail)
        return ImagePart(uri=url, detail=detail)
    if kind == "input_file":
        name = part.get("filename")
        for key in ("file_id", "file_url"):
            if part.get(key) is not None:
                return FilePart(uri=_get(part, key, str, where), name=name)
        file_data = _get(part, "file_data", str, where)
        parsed = _parse_data_url(file_data)
        if parsed is None:
            parsed = (None, _b64(file_data, where))
        return FilePart(mime_type=parsed[0], data=parsed[1], name=name)
    raise ResponsesFormatError(f"{where}: unknown content part type {kind!r}")


# The order `to_responses` writes an AI message's items in.
_PROVIDER, _TEXT, _CALL = range(3)


class _Reply:
    """An AI message being read from consecutive items."""

    def __init__(self, where: str) -> None:
        self.where = where  # the first item, which errors name
        self.rank = -1
        self.has_text = False
        self.text: str | None = None
        self.refusal: str | None = None
        self.calls: list[ToolCall] = []
        self.items: list[dict[str, Any]] = []
        self.ids: dict[str, Any] = {}
        self.extras: dict[str, Any] = {}

    def takes(self, rank: int) -> bool:
        return rank > self.rank or (rank == self.rank and rank != _TEXT)

    def message(self) -> AiMessage:
        metadata = {RESPONSES_METADATA_KEY: self.extras} if self.extras else {}
        return AiMessage(
            self.text,
            tuple(self.calls),
            refusal=self.refusal,
            provider_items=tuple(self.items),
            metadata=metadata,
            **self.ids,
        )


def _assistant(reply: _Reply, item: Mapping[str, Any], where: str) -> None:
    content = item.get("content")
    if isinstance(content, str):
        reply.text = content
    elif isinstance(content, list):
        parts = [p for p in content if isinstance(p, Mapping)]
        if len(parts) != len(content):
            raise ResponsesFormatError(f"{where}: a content part must be an object")
        for i, part in enumerate(parts):
            if part.get("type") not in ("output_text", "input_text", "refusal"):
                raise ResponsesFormatError(
                    f"{where}: content[{i}] is a {part.get('type')!r} part; an assistant message "
                    "takes only text and refusal parts"
                )
        texts = [_get(p, "text", str, where) for p in parts if p.get("type") != "refusal"]
        refusals = [_get(p, "refusal", str, where) for p in parts if p.get("type") == "refusal"]
        reply.text = "".join(texts) if texts else None
        reply.refusal = "".join(refusals) if refusals else None
        plain = [
            p
            for p in parts
            if p.get("type") == "output_text"
            and p.keys() == {"type", "text", "annotations"}
            and p.get("annotations") == []
        ]
        simple = [p for p in parts if p.get("type") == "refusal" and len(p) == 2]
        if len(texts) > 1 or len(refusals) > 1 or len(plain) + len(simple) != len(parts):
            reply.extras["content"] = [dict(p) for p in parts]
    else:
        raise ResponsesFormatError(f"{where}: an assistant message needs 'content'")
    if item.get("id") is not None:
        reply.ids["message_id"] = _get(item, "id", str, where)
    for key, value in item.items():
        if key not in ("type", "role", "id", "content") and not (
            key == "status" and value == "completed"
        ):
            reply.extras[key] = value


def _function_call(reply: _Reply, item: Mapping[str, Any], where: str) -> None:
    call_id = item.get("call_id")
    if not isinstance(call_id, str) or not call_id:
        raise ResponsesFormatError(f"{where}: a function call has no call_id")
    arguments = item.get("arguments")
    if not isinstance(arguments, str):
        raise ResponsesFormatError(
            f"{where}: function call {call_id!r} arguments must be a JSON string, "
            f"got {type(arguments).__name__}"
        )
    reply.calls.append(ToolCall(call_id, _get(item, "name", str, where), arguments))
    kept = {k: v for k, v in item.items() if k not in ("type", "call_id", "name", "arguments")}
    if kept:
        reply.extras.setdefault("calls", {})[call_id] = kept


def _output(item: Mapping[str, Any], where: str) -> ToolMessage:
    call_id = item.get("call_id")
    if not isinstance(call_id, str) or not call_id:
        raise ResponsesFormatError(f"{where}: a function call output has no call_id")
    output = item.get("output")
    extras = {k: v for k, v in item.items() if k not in ("type", "call_id", "output", "name", "id")}
    if isinstance(output, list):
        text = "".join(
            _get(p, "text", str, where)
            for p in output
            if isinstance(p, Mapping) and p.get("type") == "input_text"
        )
        extras["output"] = output
    elif isinstance(output, str):
        text = output
    else:
        raise ResponsesFormatError(f"{where}: 'output' must be a string or a list of parts")
    ids = {"message_id": _get(item, "id", str, where)} if item.get("id") is not None else {}
    name = item.get("name")
    return ToolMessage(
        call_id,
        text,
        tool_name=name if isinstance(name, str) and name else None,
        metadata={RESPONSES_METADATA_KEY: extras} if extras else {},
        **ids,
    )


def _input_message(item: Mapping[str, Any], role: Any, where: str) -> Message:
    common: dict[str, Any] = {}
    if item.get("id") is not None:
        common["message_id"] = _get(item, "id", str, where)
    # The item's other keys ("type": "message", "status") come back with it.
    extras = {k: v for k, v in item.items() if k not in ("role", "content", "id")}
    content = item.get("content")
    if role in ("system", "developer"):
        if isinstance(content, list):
            extras["content"] = content
            content = "".join(
                _get(p, "text", str, where) for p in content if isinstance(p, Mapping)
            )
        if not isinstance(content, str):
            raise ResponsesFormatError(f"{where}: a {role} message needs 'content'")
        if extras:
            common["metadata"] = {RESPONSES_METADATA_KEY: extras}
        return SystemMessage(content, role=role, **common)
    if extras:
        common["metadata"] = {RESPONSES_METADATA_KEY: extras}
    if isinstance(content, list):
        parts = tuple(
            _part_from_responses(p, f"{where} content[{i}]") for i, p in enumerate(content)
        )
        return UserMessage(parts, **common)
    if not isinstance(content, str):
        raise ResponsesFormatError(f"{where}: a user message needs a string or list 'content'")
    return UserMessage(content, **common)


def _read(items: Sequence[Mapping[str, Any]]) -> tuple[list[Message], list[int]]:
    """The messages of ``items`` and the index of each one's first item."""
    out: list[Message] = []
    starts: list[int] = []
    reply: _Reply | None = None
    reply_start = 0
    for index, item in enumerate(items):
        where = f"item {index}"
        before, ended = len(out), reply
        try:
            reply = _take(out, reply, item, where)
        except (ResponsesFormatError, ContentTooLargeError):
            raise
        except AgentCtxError as error:  # a value a message class refuses
            raise ResponsesFormatError(f"{where}: {error}") from None
        added = len(out) - before
        if ended is not None and reply is not ended:  # the reply read so far ended here
            starts.append(reply_start)
            added -= 1
        if added:
            starts.append(index)
        if reply is not None and reply is not ended:
            reply_start = index
    if reply is not None:
        try:
            out.append(reply.message())
        except AgentCtxError as error:
            raise ResponsesFormatError(f"{reply.where}: {error}") from None
        starts.append(reply_start)
    return out, starts


def _take(out: list[Message], reply: _Reply | None, item: Any, where: str) -> _Reply | None:
    """Reads ``item``: appends what it ends to ``out`` and gives the reply being read."""
    if not isinstance(item, Mapping):
        raise ResponsesFormatError(f"{where} is not an object")
    kind, role = item.get("type"), item.get("role")
    rank: int | None
    if kind in (None, "message") and role in ("user", "system", "developer"):
        rank = None
    elif kind in (None, "message") and role == "assistant":
        rank = _TEXT
    elif kind == "function_call":
        rank = _CALL
    elif kind == "function_call_output":
        rank = None
    elif isinstance(kind, str) and kind != "message":
        rank = _PROVIDER
    elif role is None:
        raise ResponsesFormatError(f"{where} has no type or role")
    else:
        raise ResponsesFormatError(f"{where}: unknown role {role!r}")
    if reply is not None and (rank is None or not reply.takes(rank)):
        try:
            out.append(reply.message())
        except AgentCtxError as error:
            raise ResponsesFormatError(f"{reply.where}: {error}") from None
        reply = None
    if rank is None:
        if kind == "function_call_output":
            out.append(_output(item, where))
        else:
            out.append(_input_message(item, role, where))
        return None
    if reply is None:
        reply = _Reply(where)
    reply.rank = rank
    if rank == _TEXT:
        _assistant(reply, item, where)
    elif rank == _CALL:
        _function_call(reply, item, where)
    else:
        reply.items.append(dict(item))
    return reply


def from_responses(items: Sequence[Mapping[str, Any]]) -> list[Message]:
    """Messages for Responses API input (or output) items.

    Consecutive assistant-side items (provider items, an assistant message, function calls, in
    that order) make one `AiMessage`; any other item type (reasoning, hosted-tool calls and
    results, ``item_reference``) is kept opaque in its ``provider_items``. Malformed input
    raises `ResponsesFormatError` (an `InvalidArgumentError`) naming the item, or
    `ContentTooLargeError` for inline content over the cap.
    """
    return _read(items)[0]


def group_responses(items: Sequence[Mapping[str, Any]]) -> list[tuple[Message, int]]:
    """`from_responses`, each message with the number of items it was read from (in order, so
    they add up to ``len(items)``): what a store of items needs to give each message's items
    back."""
    messages, starts = _read(items)
    ends = [*starts[1:], len(items)] if starts else []  # no item, no message
    return [(m, end - start) for m, start, end in zip(messages, starts, ends, strict=True)]
