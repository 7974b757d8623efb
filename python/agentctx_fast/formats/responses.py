"""Conversion to and from OpenAI Responses API input items.

`to_responses` gives a list ``client.responses.create(input=...)`` accepts: system and user
messages as input messages, an AI message as its provider items (``reasoning`` with its
encrypted content, hosted-tool calls), its assistant message and its ``function_call`` items,
a tool message as a ``function_call_output``. `from_responses` reads items back into messages,
keeping each output message's ``id`` (as the `AiMessage`'s ``message_id``), the ids and
statuses of function calls and provider items.

One model turn is one `AiMessage`: every assistant-side item between two other items
(reasoning, hosted-tool items, assistant messages, function calls, in any order) belongs to it,
so the outputs that follow are the outputs of its calls (a window keeps a call and its output
together only when the output follows the AI message holding the call). The API's order is
kept: a reasoning item must stay right before the item it belongs to. `to_responses` writes an
AI message's items as provider items, assistant message, function calls unless the message
recorded another order; `from_responses` records one only when the items came in another order.

What has no place in the message model is kept in the message's ``metadata`` under
`RESPONSES_METADATA_KEY`: an input message's other keys (``"type": "message"``, ``status``)
and list content of a system message, an output message's ``status`` (when not
``"completed"``) and other keys (``phase``), its content when it carries annotations or several
parts, each function call's item ``id`` and ``status`` (by call id), a function call output's
``status`` and list output; for an AI message read from items in another order, ``"order"``
(a letter an item: ``p`` a provider item, ``m`` an assistant message, ``c`` a function call,
e.g. ``"pcpc"`` for reasoning, call, reasoning, call); for one read from several assistant
messages, ``"messages"`` (those items, whole: its ``text`` is their texts joined as paragraphs
with a blank line, its ``message_id`` the first one's id). `to_responses` puts them back; the
kept assistant messages only while the message's text and refusal are still theirs (an edited
text is sent as one assistant message in the first one's place).

Limits (what the format does not carry): ``turn_id``, ``version``, other metadata, participant
names and `ToolMessage.is_error`; an assistant message ``id`` is sent only when it is an API id
(``msg_…``), other ids only with ``include_ids=True`` (a storage form, not API input); image
``detail`` ``"auto"`` reads back as None; two AI messages with nothing between them (no user
input, no tool output) have no edge in the format and read back as one; an assistant message
with no text and no refusal is not sent beside function calls or provider items (the storage
form writes one to carry the message id).

>>> from agentctx_fast import AiMessage, ToolCall, ToolMessage, UserMessage
>>> reply = AiMessage(
...     tool_calls=(ToolCall("call_1", "get_order", '{"id": 1}'),),
...     provider_items=({"type": "reasoning", "id": "rs_1", "summary": []},),
... )
>>> [item.get("type") for item in to_responses([UserMessage("where?"), reply])]
[None, 'reasoning', 'function_call']
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

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
from agentctx_fast.errors import AgentCtxError, ContentTooLargeError, InvalidArgumentError
from agentctx_fast.formats._provider import ANTHROPIC_BLOCK_TYPES, items_for

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
            image["image_url"] = _wire.inline_image_url(part, part.data, where)
        elif _wire.URI_SCHEME.match(str(part.uri)):
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
            uri = _wire.inline_file_url(part, part.data)
        file["file_data"] = uri
        file["filename"] = part.name or "file"
        return file
    file["file_url" if _wire.URI_SCHEME.match(uri) else "file_id"] = uri
    if part.name is not None:
        file["filename"] = part.name
    return file


def _extras(message: Message) -> dict[str, Any]:
    """The Responses fields ``message`` keeps, copied: the items made from them are the
    caller's to edit, and a store may hold the message itself (the in-memory one does)."""
    kept = message.metadata.get(RESPONSES_METADATA_KEY)
    return _wire.copy_json(kept) if isinstance(kept, dict) else {}


def _ai_to_responses(message: AiMessage, index: int, include_ids: bool) -> list[dict[str, Any]]:
    extras = _extras(message)
    provider = items_for(message, ANTHROPIC_BLOCK_TYPES)
    said = _said(message, extras, include_ids, bool(provider))
    calls = extras.get("calls")
    out: list[dict[str, Any]] = []
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
    return _in_order(extras.get("order"), provider, said, out)


def _said(
    message: AiMessage, extras: dict[str, Any], include_ids: bool, has_items: bool
) -> list[dict[str, Any]]:
    """The message's assistant message items: the several it was read from (kept whole) while
    its text and refusal are still theirs, else one or none."""
    text, refusal = message.text, message.refusal
    api_id = message.message_id.startswith("msg_")
    several = extras.get("messages")
    if isinstance(several, list) and _said_by(several) == (text, refusal):
        items = [_wire.copy_json(item) for item in several]
        if api_id or include_ids:
            items[0]["id"] = message.message_id
        else:
            items[0].pop("id", None)
        return items
    if not (text is not None or refusal is not None or include_ids) and (
        has_items or message.tool_calls
    ):
        return []
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
        item.update((k, v) for k, v in extras.items() if k not in _AI_KEYS)
        return [item]
    if text is not None or refusal is not None or not has_items:
        # Without an API id the easy form: the assistant's text (a refusal as its text).
        return [{"role": "assistant", "content": text if text is not None else refusal or ""}]
    return []


def _said_by(items: list[Any]) -> tuple[str | None, str | None] | None:
    """The text and refusal of several kept assistant message items (None if unreadable)."""
    try:
        said = [_assistant(item, "kept") for item in items if isinstance(item, Mapping)]
    except ResponsesFormatError:
        return None
    if not said or len(said) != len(items):
        return None
    return _paragraphs(s.text for s in said), _paragraphs(s.refusal for s in said)


def _paragraphs(texts: Any) -> str | None:
    """Several assistant messages' texts as one: paragraphs, as a reader sees them."""
    present = [t for t in texts if t is not None]
    return "\n\n".join(present) if present else None


def _in_order(
    order: object,
    provider: list[dict[str, Any]],
    said: list[dict[str, Any]],
    calls: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    """The items in the recorded ``order`` (a letter an item: ``p`` a provider item, ``m`` an
    assistant message, ``c`` a function call) while it fits them, else in the default order:
    provider items, assistant messages, function calls. One assistant message where the order
    has several (their text edited) takes the first one's place; one where it has none (the
    storage form writes one for the message id) goes last."""
    default = [*provider, *said, *calls]
    if not isinstance(order, str):
        return default
    counts = (order.count("p"), order.count("m"), order.count("c"))
    if len(order) != sum(counts) or (counts[0], counts[2]) != (len(provider), len(calls)):
        return default
    if counts[1] != len(said) and len(said) > 1:
        return default
    queues = {"p": iter(provider), "m": iter(said), "c": iter(calls)}
    out = [item for letter in order if (item := next(queues[letter], None)) is not None]
    return out if counts[1] else out + said


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
            content = _wire.write_parts(content, message, index, _part_to_responses)
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
        raise not_a_message(message, _wire.locate(message, index))
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
    return _wire.read_field(item, key, kind, where, ResponsesFormatError)


def _call_id(item: Mapping[str, Any], what: str, where: str) -> str:
    call_id = item.get("call_id")
    if not isinstance(call_id, str) or not call_id:
        raise ResponsesFormatError(f"{where}: a {what} has no call_id")
    return call_id


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
        return _wire.image_from_url(_get(part, "image_url", str, where), detail)
    if kind == "input_file":
        name = part.get("filename")
        for key in ("file_id", "file_url"):
            if part.get(key) is not None:
                return FilePart(uri=_get(part, key, str, where), name=name)
        file_data = _get(part, "file_data", str, where)
        parsed = _wire.decode_file_data(
            file_data, ResponsesFormatError, f"{where}: data is not base64"
        )
        return FilePart(mime_type=parsed[0], data=parsed[1], name=name)
    raise ResponsesFormatError(f"{where}: unknown content part type {kind!r}")


# What an AI message's Responses metadata holds besides its assistant item's other keys.
_AI_KEYS = ("content", "calls", "order", "messages")
_RANK = {"p": 0, "m": 1, "c": 2}  # the default order of an AI message's items


class _Said:
    """An assistant message item read: its text, refusal, id and what else it keeps."""

    def __init__(self, item: Mapping[str, Any]) -> None:
        self.item = item
        self.text: str | None = None
        self.refusal: str | None = None
        self.message_id: str | None = None
        self.extras: dict[str, Any] = {}


class _Reply:
    """An AI message being read from consecutive assistant-side items."""

    def __init__(self, where: str) -> None:
        self.where = where  # the first item, which errors name
        self.order: list[str] = []  # a letter an item, as in `_in_order`
        self.said: list[_Said] = []
        self.calls: list[ToolCall] = []
        self.items: list[dict[str, Any]] = []
        self.extras: dict[str, Any] = {}

    def message(self) -> AiMessage:
        """The AI message read; a value it refuses names the reply's first item."""
        try:
            return self._message()
        except AgentCtxError as error:
            raise ResponsesFormatError(f"{self.where}: {error}") from None

    def _message(self) -> AiMessage:
        extras = dict(self.extras)
        text = refusal = message_id = None
        order = list(self.order)
        if len(self.said) == 1 and not any(k in _AI_KEYS[1:] for k in self.said[0].extras):
            said = self.said[0]
            text, refusal, message_id = said.text, said.refusal, said.message_id
            extras.update(said.extras)
            if text is None and refusal is None and order[-1] == "m":
                order.pop()  # an empty last message (the storage form writes it there)
        elif self.said:  # several: one text, the items kept whole
            text = _paragraphs(s.text for s in self.said)
            refusal = _paragraphs(s.refusal for s in self.said)
            message_id = self.said[0].message_id
            extras["messages"] = [dict(s.item) for s in self.said]
        if order != sorted(order, key=_RANK.__getitem__):
            extras["order"] = "".join(order)
        ids: dict[str, Any] = {"message_id": message_id} if message_id is not None else {}
        return AiMessage(
            text,
            tuple(self.calls),
            refusal=refusal,
            provider_items=tuple(self.items),
            metadata={RESPONSES_METADATA_KEY: extras} if extras else {},
            **ids,
        )


def _assistant(item: Mapping[str, Any], where: str) -> _Said:
    said = _Said(item)
    content = item.get("content")
    if isinstance(content, str):
        said.text = content
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
        said.text = "".join(texts) if texts else None
        said.refusal = "".join(refusals) if refusals else None
        plain = [
            p
            for p in parts
            if p.get("type") == "output_text"
            and p.keys() == {"type", "text", "annotations"}
            and p.get("annotations") == []
        ]
        simple = [p for p in parts if p.get("type") == "refusal" and len(p) == 2]
        if len(texts) > 1 or len(refusals) > 1 or len(plain) + len(simple) != len(parts):
            said.extras["content"] = [dict(p) for p in parts]
    else:
        raise ResponsesFormatError(f"{where}: an assistant message needs 'content'")
    said.message_id = _wire.read_id(item, where, ResponsesFormatError).get("message_id")
    for key, value in item.items():
        if key not in ("type", "role", "id", "content") and not (
            key == "status" and value == "completed"
        ):
            said.extras[key] = value
    return said


def _function_call(reply: _Reply, item: Mapping[str, Any], where: str) -> None:
    call_id = _call_id(item, "function call", where)
    arguments = _wire.json_string_arguments(
        item.get("arguments"), f"function call {call_id!r}", where, ResponsesFormatError
    )
    reply.calls.append(ToolCall(call_id, _get(item, "name", str, where), arguments))
    kept = {k: v for k, v in item.items() if k not in ("type", "call_id", "name", "arguments")}
    if kept:
        reply.extras.setdefault("calls", {})[call_id] = kept


def _output(item: Mapping[str, Any], where: str) -> ToolMessage:
    call_id = _call_id(item, "function call output", where)
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
    ids = _wire.read_id(item, where, ResponsesFormatError)
    name = item.get("name")
    return ToolMessage(
        call_id,
        text,
        tool_name=name if isinstance(name, str) and name else None,
        metadata={RESPONSES_METADATA_KEY: extras} if extras else {},
        **ids,
    )


def _input_message(item: Mapping[str, Any], role: Any, where: str) -> Message:
    common = _wire.read_id(item, where, ResponsesFormatError)
    # The item's other keys ("type": "message", "status") come back with it.
    extras = {k: v for k, v in item.items() if k not in ("role", "content", "id")}
    content = item.get("content")
    if role in SYSTEM_ROLES:
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
        out.append(reply.message())
        starts.append(reply_start)
    return out, starts


def _take(out: list[Message], reply: _Reply | None, item: Any, where: str) -> _Reply | None:
    """Reads ``item``: appends what it ends to ``out`` and gives the reply being read."""
    if not isinstance(item, Mapping):
        raise ResponsesFormatError(f"{where} is not an object")
    kind, role = item.get("type"), item.get("role")
    letter: str | None
    if kind in (None, "message") and (role == "user" or role in SYSTEM_ROLES):
        letter = None
    elif kind in (None, "message") and role == "assistant":
        letter = "m"
    elif kind == "function_call":
        letter = "c"
    elif kind == "function_call_output":
        letter = None
    elif isinstance(kind, str) and kind != "message":
        letter = "p"
    elif role is None:
        raise ResponsesFormatError(f"{where} has no type or role")
    else:
        raise ResponsesFormatError(f"{where}: unknown role {role!r}")
    if reply is not None and letter is None:
        out.append(reply.message())
        reply = None
    if letter is None:
        if kind == "function_call_output":
            out.append(_output(item, where))
        else:
            out.append(_input_message(item, role, where))
        return None
    if reply is None:
        reply = _Reply(where)
    reply.order.append(letter)
    if letter == "m":
        reply.said.append(_assistant(item, where))
    elif letter == "c":
        _function_call(reply, item, where)
    else:
        reply.items.append(dict(item))
    return reply


def from_responses(items: Sequence[Mapping[str, Any]]) -> list[Message]:
    """Messages for Responses API input (or output) items.

    Consecutive assistant-side items (provider items, assistant messages, function calls, in
    any order: one model turn) make one `AiMessage`, its order kept when it is not the one
    `to_responses` writes (see the module); any other item type (reasoning, hosted-tool calls and
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
