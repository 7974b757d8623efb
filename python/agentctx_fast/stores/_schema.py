"""The stored record format, declared once: per type tag, the class and its fields.

The encoder (`_encode`), the Python decoder (`_decode`) and the native decoder's setup
(`_native.set_record_schema`) all read these tables; none of them lists a field itself.
A field's JSON key is the name of the dataclass field it fills; fields are listed in the order
`dumps` writes them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from agentctx_fast.compression.coordinator import CompressionState
from agentctx_fast.core.messages import (
    AgentActionMessage,
    AgentFormMessage,
    AiMessage,
    AudioPart,
    FilePart,
    ImagePart,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    Usage,
    UserMessage,
)


class Kind:
    """The kinds of value a field holds. What each allows beyond its JSON type is the rule of
    the class it fills (checked by the class on the checked path, by the fast paths themselves).
    """

    TEXT = "text"  # a str
    ID = "id"  # an identifier: a str without NUL
    NAME = "name"  # a participant name (`agentctx_fast._ids.PARTICIPANT_NAME`)
    ROLE = "role"  # one of messages.SYSTEM_ROLES
    DETAIL = "detail"  # one of messages.IMAGE_DETAILS
    VERSION = "version"  # an int from 0 to 2**63 - 1
    COUNT = "count"  # an int >= 0
    INT = "int"  # any int
    BOOL = "bool"
    OBJECT = "object"  # a JSON object
    CONTENT = "content"  # a str, or a list of part records (`PART_RECORDS`)
    CALLS = "calls"  # a list of `CALL_RECORD` records
    USAGE = "usage"  # a `USAGE_RECORD` record
    DATA = "data"  # bytes, written as base64 text
    ITEMS = "items"  # a list of JSON objects (the fast paths leave these to the checked path)
    MESSAGES = "messages"  # a list of message records
    DATETIME = "datetime"  # an ISO 8601 date and time


AS_IS = (
    Kind.TEXT,
    Kind.ID,
    Kind.NAME,
    Kind.ROLE,
    Kind.DETAIL,
    Kind.VERSION,
    Kind.COUNT,
    Kind.INT,
    Kind.BOOL,
)
"""The kinds whose JSON value is the object's value, with nothing inside to walk."""

JSON_TYPES: dict[str, type | tuple[type, ...]] = {
    Kind.TEXT: str,
    Kind.ID: str,
    Kind.NAME: str,
    Kind.ROLE: str,
    Kind.DETAIL: str,
    Kind.VERSION: int,
    Kind.COUNT: int,
    Kind.INT: int,
    Kind.BOOL: bool,
    Kind.OBJECT: dict,
    Kind.CONTENT: (str, list),
    Kind.CALLS: list,
    Kind.USAGE: dict,
    Kind.DATA: str,
    Kind.ITEMS: list,
    Kind.MESSAGES: list,
    Kind.DATETIME: str,
}
"""The JSON type of each kind, as `json.loads` gives it."""


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: object = _Required()
"""The default of a field the record must hold."""


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a record."""

    key: str
    kind: str
    default: object = REQUIRED
    """What an absent key reads as (`REQUIRED`: the key must be there)."""
    nullable: bool = False
    """Whether ``null`` reads as None."""
    sparse: bool = False
    """Written only when it differs from ``default`` (fields added after the first format:
    records without them keep their earlier form)."""

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


def _optional(key: str, kind: str, *, sparse: bool = False) -> Field:
    """A field that may be absent or null, both read as None."""
    return Field(key, kind, None, nullable=True, sparse=sparse)


@dataclass(frozen=True, slots=True, eq=False)  # compared and hashed by identity
class Record:
    """One record type: its ``"type"`` tag (None for records nested without one), the class it
    decodes to and its fields."""

    tag: str | None
    cls: type
    fields: tuple[Field, ...]
    needs_one_of: tuple[str, ...] = ()
    """Keys of which at least one must hold a value (not absent, not null)."""

    @property
    def unstored(self) -> tuple[tuple[str, object], ...]:
        """The class's fields a record does not hold, with the value a decoded object gets."""
        keys = {field.key for field in self.fields}
        out = []
        for field in dataclasses.fields(self.cls):
            if field.name in keys:
                continue
            if field.init or field.default is dataclasses.MISSING:
                raise TypeError(f"{self.cls.__name__}.{field.name} is not in its record")
            out.append((field.name, field.default))
        return tuple(out)


_COMMON = (
    Field("message_id", Kind.ID),
    Field("metadata", Kind.OBJECT),
    Field("version", Kind.VERSION),
    _optional("turn_id", Kind.ID),
)

MESSAGE_RECORDS: tuple[Record, ...] = (
    Record(
        "system",
        SystemMessage,
        (
            *_COMMON,
            Field("text", Kind.TEXT),
            Field("role", Kind.ROLE, "system", sparse=True),
            _optional("name", Kind.NAME, sparse=True),
        ),
    ),
    Record(
        "user",
        UserMessage,
        (*_COMMON, _optional("name", Kind.NAME, sparse=True), Field("content", Kind.CONTENT)),
    ),
    Record(
        "ai",
        AiMessage,
        (
            *_COMMON,
            _optional("text", Kind.TEXT),
            _optional("name", Kind.NAME, sparse=True),
            Field("tool_calls", Kind.CALLS),
            _optional("refusal", Kind.TEXT, sparse=True),
            _optional("usage", Kind.USAGE, sparse=True),
            Field("provider_items", Kind.ITEMS, (), sparse=True),
        ),
    ),
    Record(
        "tool",
        ToolMessage,
        (
            *_COMMON,
            Field("text", Kind.TEXT),
            Field("tool_call_id", Kind.ID),
            _optional("tool_name", Kind.ID),
            Field("is_error", Kind.BOOL),
        ),
    ),
    Record("action", AgentActionMessage, (*_COMMON, _optional("payload", Kind.OBJECT))),
    Record(
        "form",
        AgentFormMessage,
        (*_COMMON, _optional("payload", Kind.OBJECT), _optional("status", Kind.TEXT)),
    ),
)
"""The message records."""

_MEDIA = (
    _optional("uri", Kind.TEXT),
    _optional("mime_type", Kind.TEXT),
    _optional("name", Kind.TEXT),
    _optional("size_bytes", Kind.INT),
    _optional("data", Kind.DATA),
)
PART_RECORDS: tuple[Record, ...] = (
    Record("text", TextPart, (Field("text", Kind.TEXT),)),
    Record(
        "image",
        ImagePart,
        (*_MEDIA, _optional("detail", Kind.DETAIL, sparse=True)),
        ("uri", "data"),
    ),
    Record("audio", AudioPart, _MEDIA, ("uri", "data")),
    Record("file", FilePart, _MEDIA, ("uri", "data")),
)
"""The content parts of a user message."""

CALL_RECORD = Record(
    None, ToolCall, (Field("id", Kind.ID), Field("name", Kind.ID), Field("arguments", Kind.TEXT))
)
USAGE_RECORD = Record(
    None,
    Usage,
    (
        Field("prompt_tokens", Kind.COUNT),
        Field("completion_tokens", Kind.COUNT),
        Field("total_tokens", Kind.COUNT),
    ),
)

STATE_RECORD = Record(
    "compression_state",
    CompressionState,
    (
        Field("conversation_id", Kind.ID),
        Field("version", Kind.VERSION),
        Field("compression_version", Kind.INT),
        _optional("covered_until_message_id", Kind.ID),
        Field("summary", Kind.MESSAGES),
        Field("covered_tokens", Kind.INT),
        Field("covered_turns", Kind.INT),
        _optional("updated_at", Kind.DATETIME),
    ),
)
"""A coordinator's compression state."""

BY_TAG: dict[str, Record] = {record.tag: record for record in MESSAGE_RECORDS if record.tag}
PART_BY_TAG: dict[str, Record] = {record.tag: record for record in PART_RECORDS if record.tag}
BY_CLASS: dict[type, Record] = {
    record.cls: record
    for record in (*MESSAGE_RECORDS, *PART_RECORDS, CALL_RECORD, USAGE_RECORD, STATE_RECORD)
}

# Every class field is in its record or has a default a decoded object gets: checked on import.
UNSTORED: dict[type, tuple[tuple[str, object], ...]] = {
    cls: record.unstored for cls, record in BY_CLASS.items()
}
