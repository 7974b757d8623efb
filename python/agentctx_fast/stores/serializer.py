"""`JsonAgentStoreSerializer`: messages and compression states as tagged UTF-8 JSON.

The type is a tag from a closed registry; an unknown tag is an error, never a class to load.
Every field is checked on the way in, so a corrupt or hostile record is a `SerializationError`
and never a half-built object.

>>> from agentctx_fast import UserMessage
>>> serializer = JsonAgentStoreSerializer()
>>> data = serializer.dumps(UserMessage("hi", message_id="u1"))
>>> data[:16]
b'{"type":"user","'
>>> serializer.loads(data).text
'hi'
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import math
import re
from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol, TypeVar, runtime_checkable

from agentctx_fast._backend import backend, native
from agentctx_fast._ids import MAX_VERSION, is_unicode_text
from agentctx_fast.coordinator import AgentContextCompressionState
from agentctx_fast.errors import AgentCtxError, SerializationError
from agentctx_fast.messages import (
    _PARTICIPANT_NAME,
    IMAGE_DETAILS,
    MAX_INLINE_BYTES,
    SYSTEM_ROLES,
    AgentActionMessage,
    AgentFormMessage,
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
    Usage,
    UserMessage,
)


@runtime_checkable
class AgentStoreSerializer(Protocol):
    """What a store needs: bytes for messages and compression states, and back."""

    def dumps(self, obj: object) -> bytes: ...

    def loads(self, data: bytes) -> Any: ...


class _Reader:
    """Typed access to one decoded JSON object; every mistake is a `SerializationError`."""

    __slots__ = ("_fields", "_tag", "_used")

    def __init__(self, fields: object, tag: str) -> None:
        if not isinstance(fields, dict):
            raise SerializationError(f"{tag}: expected a JSON object, got {type(fields).__name__}")
        self._fields: dict[str, Any] = fields
        self._tag = tag
        self._used = {"type"}

    def get(self, name: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
        self._used.add(name)
        if name not in self._fields:
            if default is ...:
                raise SerializationError(f"{self._tag}: missing field {name!r}")
            return default
        value = self._fields[name]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
            raise SerializationError(f"{self._tag}: field {name!r} has type {type(value).__name__}")
        return value

    def optional(self, name: str, kind: type) -> Any:
        return self.get(name, (kind, type(None)), None)

    def done(self) -> None:
        unknown = sorted(set(self._fields) - self._used)
        if unknown:
            raise SerializationError(f"{self._tag}: unknown field(s) {unknown}")


def _check_json_value(value: object, where: str) -> None:
    """Metadata and payloads must round-trip exactly: JSON types only, str keys, finite floats."""
    if value is None or isinstance(value, (str, bool, int)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise SerializationError(f"{where}: {value!r} is not valid JSON")
        return
    if isinstance(value, list):
        for item in value:
            _check_json_value(item, where)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise SerializationError(f"{where}: key {key!r} is not a str")
            _check_json_value(item, where)
        return
    raise SerializationError(f"{where}: {type(value).__name__} is not JSON-serialisable")


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):  # e.g. 1e400: `dumps` could not write it back
        raise ValueError(f"number {literal} is out of range")
    return value


# `json.loads(text, parse_constant=..., parse_float=...)` without a new decoder on every call.
_JSON = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite_float)

# Raw UTF-8 cannot hold a surrogate, so a lone one can only come from a \uD800-\uDFFF escape;
# records without such an escape (everything `dumps` writes) skip the walk below.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _check_no_lone_surrogate(value: object, where: str = "record") -> None:
    """`dumps` cannot write a lone surrogate (it is not Unicode text), so `loads` refuses it."""
    try:
        _walk_texts(value, where)
    except RecursionError as error:
        raise SerializationError("stored record is nested too deeply") from error


def _walk_texts(value: object, where: str) -> None:
    if isinstance(value, str):
        if not is_unicode_text(value):
            raise SerializationError(
                f"{where}: {value!r} holds a lone surrogate, not valid Unicode text"
            )
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _walk_texts(item, f"{where}[{index}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            _walk_texts(key, f"{where} key")
            _walk_texts(item, f"{where}.{key}")


_PART_TAGS: dict[type, str] = {ImagePart: "image", AudioPart: "audio", FilePart: "file"}
_PART_CLASSES = {tag: cls for cls, tag in _PART_TAGS.items()}


def _expect(value: object, kinds: tuple[type, ...], where: str) -> None:
    """What `_Reader.get` requires of a field, checked before writing it: `dumps` must never
    write a record that `loads` refuses (the message classes check these too)."""
    if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
        raise SerializationError(f"{where} has type {type(value).__name__}")


_OPTIONAL_STR = (str, type(None))


def _dump_part(part: Part, where: str) -> dict[str, Any]:
    if isinstance(part, TextPart):
        _expect(part.text, (str,), f"{where} text")
        return {"type": "text", "text": part.text}
    _expect(part.uri, _OPTIONAL_STR, f"{where} uri")
    _expect(part.mime_type, _OPTIONAL_STR, f"{where} mime_type")
    _expect(part.name, _OPTIONAL_STR, f"{where} name")
    _expect(part.size_bytes, (int, type(None)), f"{where} size_bytes")
    _expect(part.data, (bytes, type(None)), f"{where} data")
    out = {
        "type": _PART_TAGS[type(part)],
        "uri": part.uri,
        "mime_type": part.mime_type,
        "name": part.name,
        "size_bytes": part.size_bytes,
        "data": None if part.data is None else base64.b64encode(part.data).decode("ascii"),
    }
    # Written only when set, so records of parts without a detail keep their earlier form.
    if isinstance(part, ImagePart) and part.detail is not None:
        _expect(part.detail, (str,), f"{where} detail")
        out["detail"] = part.detail
    return out


def _load_part(fields: object, where: str) -> Part:
    if not isinstance(fields, dict):
        raise SerializationError(f"{where}: a content part must be a JSON object")
    tag = fields.get("type")
    reader = _Reader(fields, f"{where} part {tag!r}")
    if tag == "text":
        part: Part = TextPart(reader.get("text", str))
    elif isinstance(tag, str) and tag in _PART_CLASSES:
        data = reader.optional("data", str)
        try:
            raw = None if data is None else base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError) as error:
            raise SerializationError(f"{where}: part data is not base64") from error
        extra = {"detail": reader.optional("detail", str)} if tag == "image" else {}
        part = _PART_CLASSES[tag](
            uri=reader.optional("uri", str),
            mime_type=reader.optional("mime_type", str),
            name=reader.optional("name", str),
            size_bytes=reader.optional("size_bytes", int),
            data=raw,
            **extra,
        )
    else:
        raise SerializationError(f"{where}: unknown content part type {tag!r}")
    reader.done()
    return part


def _common(message: Message, tag: str) -> dict[str, Any]:
    _check_json_value(message.metadata, f"message {message.message_id!r} metadata")
    return {
        "type": tag,
        "message_id": message.message_id,
        "metadata": message.metadata,
        "version": message.version,
        "turn_id": message.turn_id,
    }


def _dump_message(message: Message) -> dict[str, Any]:
    tag = _MESSAGE_TAGS.get(type(message))
    if tag is None:
        raise SerializationError(f"no type tag for {type(message).__name__}")
    out = _common(message, tag)
    where = f"message {message.message_id!r}"
    if isinstance(message, (SystemMessage, AiMessage, ToolMessage)):
        out["text"] = message.text
    if isinstance(message, SystemMessage) and message.role != "system":
        _expect(message.role, (str,), f"{where} role")
        out["role"] = message.role
    if isinstance(message, (SystemMessage, UserMessage, AiMessage)):
        _dump_optional(out, "name", message.name, where)
    if isinstance(message, UserMessage):
        content = message.content
        out["content"] = (
            content
            if isinstance(content, str)
            else [_dump_part(p, f"{where} content[{i}]") for i, p in enumerate(content)]
        )
    elif isinstance(message, AiMessage):
        out["tool_calls"] = [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in message.tool_calls
        ]
        _dump_optional(out, "refusal", message.refusal, where)
        if message.usage is not None:
            usage = message.usage
            for name in ("prompt_tokens", "completion_tokens", "total_tokens"):
                _expect(getattr(usage, name), (int,), f"{where} usage.{name}")
            out["usage"] = {
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
                "total_tokens": usage.total_tokens,
            }
        if message.provider_items:  # written only when set, as the optional fields above
            items = list(message.provider_items)
            _check_json_value(items, f"{where} provider_items")
            out["provider_items"] = items
    elif isinstance(message, ToolMessage):
        _expect(message.is_error, (bool,), f"{where} is_error")
        out.update(
            tool_call_id=message.tool_call_id,
            tool_name=message.tool_name,
            is_error=message.is_error,
        )
    elif isinstance(message, (AgentActionMessage, AgentFormMessage)):
        _expect(message.payload, (dict, type(None)), f"{where} payload")
        _check_json_value(message.payload, f"{where} payload")
        out["payload"] = message.payload
        if isinstance(message, AgentFormMessage):
            _expect(message.status, _OPTIONAL_STR, f"{where} status")
            out["status"] = message.status
    return out


def _dump_optional(out: dict[str, Any], key: str, value: object, where: str) -> None:
    # Optional fields added after the first record format are written only when set, so
    # records without them keep their earlier form and every earlier record still loads.
    if value is not None:
        _expect(value, (str,), f"{where} {key}")
        out[key] = value


def _load_usage(fields: object) -> Usage:
    reader = _Reader(fields, "usage")
    usage = Usage(
        reader.get("prompt_tokens", int),
        reader.get("completion_tokens", int),
        reader.get("total_tokens", int),
    )
    reader.done()
    return usage


def _load_message(fields: object, where: str = "message") -> Message:
    if not isinstance(fields, dict):
        raise SerializationError(f"{where}: expected a JSON object")
    tag = fields.get("type")
    if not isinstance(tag, str) or tag not in _MESSAGE_LOADERS:
        raise SerializationError(f"{where}: unknown message type tag {tag!r}")
    reader = _Reader(fields, f"{where} {tag!r}")
    common = {
        "message_id": reader.get("message_id", str),
        "metadata": reader.get("metadata", dict),
        "version": reader.get("version", int),
        "turn_id": reader.optional("turn_id", str),
    }
    message = _MESSAGE_LOADERS[tag](reader, common)
    reader.done()
    return message


def _load_ai(reader: _Reader, common: dict[str, Any]) -> Message:
    calls = []
    for index, call in enumerate(reader.get("tool_calls", list)):
        call_reader = _Reader(call, f"tool_calls[{index}]")
        calls.append(
            ToolCall(
                call_reader.get("id", str),
                call_reader.get("name", str),
                call_reader.get("arguments", str),
            )
        )
        call_reader.done()
    usage = reader.optional("usage", dict)
    provider_items = reader.get("provider_items", list, [])
    return AiMessage(
        reader.optional("text", str),
        tuple(calls),
        refusal=reader.optional("refusal", str),
        name=reader.optional("name", str),
        usage=None if usage is None else _load_usage(usage),
        provider_items=tuple(provider_items),
        **common,
    )


def _load_user(reader: _Reader, common: dict[str, Any]) -> Message:
    content = reader.get("content", (str, list))
    if isinstance(content, list):
        content = tuple(_load_part(p, f"message {common['message_id']!r}") for p in content)
    return UserMessage(content, name=reader.optional("name", str), **common)


_MESSAGE_TAGS: dict[type, str] = {
    SystemMessage: "system",
    UserMessage: "user",
    AiMessage: "ai",
    ToolMessage: "tool",
    AgentActionMessage: "action",
    AgentFormMessage: "form",
}
_MESSAGE_LOADERS: dict[str, Callable[[_Reader, dict[str, Any]], Message]] = {
    "system": lambda r, c: SystemMessage(
        r.get("text", str), role=r.get("role", str, "system"), name=r.optional("name", str), **c
    ),
    "user": _load_user,
    "ai": _load_ai,
    "tool": lambda r, c: ToolMessage(
        r.get("tool_call_id", str),
        r.get("text", str),
        r.optional("tool_name", str),
        r.get("is_error", bool),
        **c,
    ),
    "action": lambda r, c: AgentActionMessage(r.optional("payload", dict), **c),
    "form": lambda r, c: AgentFormMessage(
        r.optional("payload", dict), r.optional("status", str), **c
    ),
}


# -- the fast path -------------------------------------------------------------------------------
# A well-formed record (everything `dumps` writes) is checked here once, field by field, with
# every rule `_load_message` and the message classes apply, and built from the checked values
# without running the classes' checks a second time. Anything this path is not sure of gives
# None, and the checked path above decodes the record again: it alone writes the error, so a bad
# record gets the same typed error whichever path saw it first. `_native.decode_message` is this
# function in Rust (with the JSON parse); both build the library class itself, every dataclass
# field set directly (``_core`` to None), never through its ``__init__``.

_T = TypeVar("_T")
_new = object.__new__
# Each field's slot descriptor setter (`object.__setattr__` would find the same descriptor by
# name on every call), by class, in `dataclasses.fields` order.
_SETTERS: dict[type, tuple[Callable[[object, object], None], ...]] = {
    cls: tuple(getattr(cls, f.name).__set__ for f in dataclasses.fields(cls))
    for cls in (*_MESSAGE_TAGS, ToolCall, Usage, TextPart, *_PART_CLASSES.values())
}
_COMMON_KEYS = frozenset(("type", "message_id", "metadata", "version", "turn_id"))
_FAST_KEYS = {
    "system": _COMMON_KEYS | {"text", "role", "name"},
    "user": _COMMON_KEYS | {"content", "name"},
    "ai": _COMMON_KEYS | {"text", "tool_calls", "refusal", "name", "usage"},
    "tool": _COMMON_KEYS | {"tool_call_id", "text", "tool_name", "is_error"},
    "action": _COMMON_KEYS | {"payload"},
    "form": _COMMON_KEYS | {"payload", "status"},
}
_MEDIA_KEYS = frozenset(("type", "uri", "mime_type", "name", "size_bytes", "data"))
_IMAGE_KEYS = _MEDIA_KEYS | {"detail"}
_TEXT_KEYS = frozenset(("type", "text"))
_CALL_KEYS = frozenset(("id", "name", "arguments"))
_USAGE_KEYS = frozenset(("prompt_tokens", "completion_tokens", "total_tokens"))


def _build(cls: type[_T], *values: object) -> _T:
    """An instance of the frozen dataclass ``cls`` holding ``values`` (every field, `_SETTERS`
    order), as its ``__init__`` would set them: the values are already checked."""
    obj = _new(cls)
    for setter, value in zip(_SETTERS[cls], values, strict=True):
        setter(obj, value)
    return obj


def _identifier(value: object) -> bool:
    # Lone surrogates were refused for the whole record before this path runs.
    return type(value) is str and "\x00" not in value


def _optional_str(value: object) -> bool:
    return value is None or type(value) is str


def _participant_name(value: object) -> bool:
    if value is None:
        return True
    return (
        type(value) is str
        and "\x00" not in value
        and _PARTICIPANT_NAME.fullmatch(value) is not None
    )


def _fast_message(fields: dict[str, Any]) -> Message | None:
    """The message ``fields`` (a parsed record, lone surrogates refused) holds, or None to
    leave it to the checked path."""
    tag = fields.get("type")
    if type(tag) is not str:
        return None
    keys = _FAST_KEYS.get(tag)
    if keys is None or not fields.keys() <= keys:
        return None
    message_id = fields.get("message_id")
    metadata = fields.get("metadata")
    version = fields.get("version")
    turn_id = fields.get("turn_id")
    if not (
        _identifier(message_id)
        and type(metadata) is dict
        and type(version) is int
        and 0 <= version <= MAX_VERSION
        and (turn_id is None or _identifier(turn_id))
    ):
        return None
    common = (message_id, metadata, version, turn_id, None)
    get = fields.get
    if tag == "ai":
        return _fast_ai(fields, common)
    if tag == "user":
        content = get("content")
        if type(content) is list:
            parts = tuple(map(_fast_part, content))
            if None in parts:
                return None
            content = parts
        elif type(content) is not str:
            return None
        name = get("name")
        return _build(UserMessage, *common, content, name) if _participant_name(name) else None
    if tag == "tool":
        call_id, text, tool_name, is_error = (
            get("tool_call_id"),
            get("text"),
            get("tool_name"),
            get("is_error"),
        )
        if not (
            _identifier(call_id)
            and type(text) is str
            and (tool_name is None or _identifier(tool_name))
            and type(is_error) is bool
        ):
            return None
        return _build(ToolMessage, *common, call_id, text, tool_name, is_error)
    if tag == "system":
        text, role, name = get("text"), get("role", "system"), get("name")
        if not (type(text) is str and type(role) is str and role in SYSTEM_ROLES):
            return None
        return _build(SystemMessage, *common, text, role, name) if _participant_name(name) else None
    payload = get("payload")
    if payload is not None and type(payload) is not dict:
        return None
    if tag == "action":
        return _build(AgentActionMessage, *common, payload)
    status = get("status")
    return _build(AgentFormMessage, *common, payload, status) if _optional_str(status) else None


def _fast_ai(fields: dict[str, Any], common: tuple[object, ...]) -> Message | None:
    get = fields.get
    calls = get("tool_calls")
    text, refusal, name, usage = get("text"), get("refusal"), get("name"), get("usage")
    if not (
        type(calls) is list
        and _optional_str(text)
        and _optional_str(refusal)
        and _participant_name(name)
    ):
        return None
    built = []
    for call in calls:
        if type(call) is not dict or call.keys() != _CALL_KEYS:
            return None
        call_id, call_name, arguments = call["id"], call["name"], call["arguments"]
        if not (_identifier(call_id) and _identifier(call_name) and type(arguments) is str):
            return None
        built.append(_build(ToolCall, call_id, call_name, arguments))
    if usage is not None:
        if type(usage) is not dict or usage.keys() != _USAGE_KEYS:
            return None
        counts = (usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"])
        if not all(type(count) is int and count >= 0 for count in counts):
            return None
        usage = _build(Usage, *counts)
    # Records with provider items are left to the checked path (their key is not in
    # `_FAST_KEYS`), which checks every item.
    return _build(AiMessage, *common, text, tuple(built), refusal, name, usage, ())


def _fast_part(fields: object) -> Part | None:
    if type(fields) is not dict:
        return None
    tag = fields.get("type")
    if tag == "text":
        text = fields.get("text")
        if fields.keys() <= _TEXT_KEYS and type(text) is str:
            return _build(TextPart, text)
        return None
    if tag not in ("image", "audio", "file") or not fields.keys() <= (
        _IMAGE_KEYS if tag == "image" else _MEDIA_KEYS
    ):
        return None
    get = fields.get
    uri, mime_type, name, size, data = (
        get("uri"),
        get("mime_type"),
        get("name"),
        get("size_bytes"),
        get("data"),
    )
    if not (
        _optional_str(uri)
        and _optional_str(mime_type)
        and _optional_str(name)
        and (size is None or type(size) is int)
    ):
        return None
    if data is not None:
        if type(data) is not str:
            return None
        try:
            data = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            return None
        if len(data) > MAX_INLINE_BYTES:
            return None
    elif uri is None:
        return None
    values = (uri, mime_type, name, size, data)
    if tag == "image":
        detail = get("detail")
        if detail is not None and (type(detail) is not str or detail not in IMAGE_DETAILS):
            return None
        return _build(ImagePart, *values, detail)
    return _build(_PART_CLASSES[tag], *values)


def _dump_state(state: AgentContextCompressionState) -> dict[str, Any]:
    return {
        "type": "compression_state",
        "conversation_id": state.conversation_id,
        "version": state.version,
        "compression_version": state.compression_version,
        "covered_until_message_id": state.covered_until_message_id,
        "summary": [_dump_message(m) for m in state.summary],
        "covered_tokens": state.covered_tokens,
        "covered_turns": state.covered_turns,
        "updated_at": None if state.updated_at is None else state.updated_at.isoformat(),
    }


def _load_state(fields: dict[str, Any]) -> AgentContextCompressionState:
    reader = _Reader(fields, "compression_state")
    updated_at = reader.optional("updated_at", str)
    try:
        when = None if updated_at is None else datetime.fromisoformat(updated_at)
    except ValueError as error:
        raise SerializationError(f"compression_state: bad updated_at {updated_at!r}") from error
    state = AgentContextCompressionState(
        conversation_id=reader.get("conversation_id", str),
        version=reader.get("version", int),
        compression_version=reader.get("compression_version", int),
        covered_until_message_id=reader.optional("covered_until_message_id", str),
        summary=tuple(
            _load_message(m, f"summary[{i}]") for i, m in enumerate(reader.get("summary", list))
        ),
        covered_tokens=reader.get("covered_tokens", int),
        covered_turns=reader.get("covered_turns", int),
        updated_at=when,
    )
    reader.done()
    return state


class JsonAgentStoreSerializer:
    """The default serializer: a UTF-8 JSON object with a top-level ``"type"`` tag."""

    def dumps(self, obj: object) -> bytes:
        """``obj`` (a message or a compression state) as bytes."""
        try:
            if isinstance(obj, Message):
                fields = _dump_message(obj)
            elif isinstance(obj, AgentContextCompressionState):
                fields = _dump_state(obj)
            else:
                raise SerializationError(f"cannot serialise {type(obj).__name__}")
            return json.dumps(
                fields, ensure_ascii=False, allow_nan=False, separators=(",", ":")
            ).encode("utf-8")
        except (ValueError, TypeError, UnicodeEncodeError) as error:
            raise SerializationError(f"cannot serialise {type(obj).__name__}: {error}") from error
        except RecursionError as error:  # cyclic or absurdly deep metadata
            raise SerializationError(
                f"cannot serialise {type(obj).__name__}: metadata is cyclic or nested too deeply"
            ) from error

    def loads(self, data: bytes) -> Message | AgentContextCompressionState:
        """The object ``data`` holds; `SerializationError` for anything but a valid record."""
        if isinstance(data, (bytearray, memoryview)):
            data = bytes(data)
        if not isinstance(data, bytes):
            raise SerializationError(f"expected bytes, got {type(data).__name__}")
        if _decode_message is not None:
            message = _decode_message(data)
            if message is not None:
                return message
        try:
            text = data.decode("utf-8")
            if text.startswith("\ufeff"):  # what `json.loads` says of it
                raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
            fields = _JSON.decode(text)
        except (UnicodeDecodeError, ValueError, RecursionError) as error:
            raise SerializationError(f"stored record is not valid UTF-8 JSON: {error}") from error
        if not isinstance(fields, dict):
            raise SerializationError("stored record is not a JSON object")
        if _SURROGATE_ESCAPE.search(text):
            _check_no_lone_surrogate(fields)
        try:
            if fields.get("type") == "compression_state":
                return _load_state(fields)
            message = _fast_message(fields)
            return _load_message(fields) if message is None else message
        except SerializationError:
            raise
        except AgentCtxError as error:  # a field value the message classes refuse
            raise SerializationError(f"stored record is invalid: {error}") from error


_decode_message: Callable[[bytes], Message | None] | None = (
    native.decode_message if backend == "rust" and native is not None else None
)
"""The Rust fast path (`_fast_message` with the JSON parse) when the Rust backend is in use."""


def load_message(serializer: AgentStoreSerializer, data: bytes) -> Message:
    """``serializer.loads`` for a record that must be a message."""
    obj = _loads(serializer, data)
    if not isinstance(obj, Message):
        raise SerializationError(f"expected a message record, got {type(obj).__name__}")
    return obj


def load_state(serializer: AgentStoreSerializer, data: bytes) -> AgentContextCompressionState:
    """``serializer.loads`` for a record that must be a compression state."""
    obj = _loads(serializer, data)
    if not isinstance(obj, AgentContextCompressionState):
        raise SerializationError(f"expected a compression state, got {type(obj).__name__}")
    return obj


def dump(serializer: AgentStoreSerializer, obj: object) -> bytes:
    """``serializer.dumps``, held to returning bytes and raising only `SerializationError`."""
    try:
        data = serializer.dumps(obj)
    except SerializationError:
        raise
    except Exception as error:
        raise SerializationError(f"serializer failed on {type(obj).__name__}: {error}") from error
    if not isinstance(data, bytes):
        raise SerializationError(f"serializer.dumps returned {type(data).__name__}, not bytes")
    return data


def _loads(serializer: AgentStoreSerializer, data: bytes) -> object:
    try:
        return serializer.loads(data)
    except SerializationError:
        raise
    except Exception as error:
        raise SerializationError(f"serializer failed to load a record: {error}") from error
