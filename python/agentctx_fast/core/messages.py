"""Immutable message value objects.

Every message has a stable ``message_id`` (a uuid4 hex string when not given), JSON-serialisable
``metadata``, a ``version`` for compare-and-set updates and an optional ``turn_id``.
``model_visible`` is a property of the class: UI messages are never sent to a model.

>>> UserMessage("where is my order?", message_id="u1").text
'where is my order?'
"""

from __future__ import annotations

import json
import math
import operator
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, SupportsIndex, TypeAlias

from agentctx_fast._ids import (
    MAX_VERSION,
    check_identifier,
    check_participant_name,
    require_str,
)
from agentctx_fast.errors import ContentTooLargeError, InvalidArgumentError, InvalidMessageTypeError

MAX_INLINE_BYTES = 256 * 1024
"""Largest inline payload a multimodal part may carry; bigger content must be a reference."""

# Kind codes shared with the Rust core (rust/turns.rs `Kind`).
KIND_SYSTEM, KIND_USER, KIND_AI, KIND_TOOL, KIND_ACTION, KIND_FORM = range(6)


IMAGE_DETAILS = ("auto", "low", "high", "original")
"""The ``detail`` levels an `ImagePart` may ask for (the OpenAI image ``detail`` values)."""
SYSTEM_ROLES = ("system", "developer")
"""The roles a `SystemMessage` may carry: ``developer`` is the newer models' ``system``."""


def not_a_message(value: object, at: str) -> InvalidMessageTypeError:
    """The error (to raise) for ``value``, named ``at``, where a `Message` belongs."""
    return InvalidMessageTypeError(f"{at} is not a Message: got {type(value).__name__}")


def new_message_id() -> str:
    """A fresh message id: a uuid4 as 32 hex characters."""
    return uuid.uuid4().hex


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A model's request to run tool ``name`` with ``arguments`` (a JSON string)."""

    id: str
    name: str
    arguments: str = "{}"

    def __post_init__(self) -> None:
        check_identifier(self.id, "ToolCall.id")
        check_identifier(self.name, "ToolCall.name")
        require_str(self.arguments, f"ToolCall {self.id!r} arguments")


@dataclass(frozen=True, slots=True)
class TextPart:
    """A text part of a multimodal user message."""

    text: str

    def __post_init__(self) -> None:
        require_str(self.text, "TextPart.text")


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage a model API reported for one call.

    Kept with the `AiMessage` it produced and stored with it; it is not part of the tool
    protocol or of token estimation.

    >>> Usage(120, 30, 150).total_tokens
    150
    """

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int

    def __post_init__(self) -> None:
        for name in ("prompt_tokens", "completion_tokens", "total_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidArgumentError(
                    f"Usage.{name} must be a non-negative int, got {value!r}"
                )


@dataclass(frozen=True, slots=True)
class _MediaPart:
    uri: str | None = None
    mime_type: str | None = None
    name: str | None = None
    size_bytes: int | None = None
    data: bytes | None = None

    def __post_init__(self) -> None:
        for name in ("uri", "mime_type", "name"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise InvalidMessageTypeError(
                    f"{type(self).__name__}.{name} must be a str or None, "
                    f"got {type(value).__name__}"
                )
        size = self.size_bytes
        if size is not None and (isinstance(size, bool) or not isinstance(size, int)):
            raise InvalidMessageTypeError(
                f"{type(self).__name__}.size_bytes must be an int or None, "
                f"got {type(size).__name__}"
            )
        if self.data is not None:
            if not isinstance(self.data, bytes):
                raise InvalidMessageTypeError(
                    f"{type(self).__name__}.data must be bytes, got {type(self.data).__name__}"
                )
            if len(self.data) > MAX_INLINE_BYTES:
                raise ContentTooLargeError(
                    f"{type(self).__name__} inline data is {len(self.data)} bytes, over the "
                    f"{MAX_INLINE_BYTES}-byte cap; store it and pass a uri instead"
                )
        elif self.uri is None:
            raise InvalidArgumentError(f"{type(self).__name__} needs a uri or inline data")


@dataclass(frozen=True, slots=True)
class ImagePart(_MediaPart):
    """An image, by reference (``uri``) or as small inline ``data``.

    ``detail`` is the resolution the model should read it at (one of `IMAGE_DETAILS`), or None
    for the provider's default.
    """

    detail: str | None = None

    def __post_init__(self) -> None:
        _MediaPart.__post_init__(self)
        if self.detail is not None and self.detail not in IMAGE_DETAILS:
            raise InvalidArgumentError(
                f"ImagePart.detail must be one of {', '.join(IMAGE_DETAILS)} or None, "
                f"got {self.detail!r}"
            )


@dataclass(frozen=True, slots=True)
class AudioPart(_MediaPart):
    """An audio clip, by reference or as small inline data."""


@dataclass(frozen=True, slots=True)
class FilePart(_MediaPart):
    """A file, by reference or as small inline data."""


Part: TypeAlias = TextPart | ImagePart | AudioPart | FilePart
_PART_TYPES = (TextPart, ImagePart, AudioPart, FilePart)


try:
    from agentctx_fast._native import MessageBase
except ImportError:  # a build without the extension: the pure-Python core keeps its own view

    class MessageBase:  # type: ignore[no-redef]
        """Stands in for the extension's native base of every message."""

        __slots__ = ()


class _Kept(MessageBase):
    """Where the pure-Python core keeps its view of a message (``core/_reference/read.py``).
    The Rust core keeps its own in the native `MessageBase`, out of any caller's reach; so that
    no caller can make the two cores see a message differently, the reference's slot is out of
    reach too: its descriptor is taken here and its name removed from the class."""

    __slots__ = ("_view",)

    def __reduce_ex__(self, protocol: SupportsIndex) -> str | tuple[Any, ...]:
        # A message's state is its fields (the frozen dataclass's `__getstate__`); protocols 0
        # and 1 would look for it in the native base instead.
        return object.__reduce_ex__(self, max(2, operator.index(protocol)))


_VIEW = _Kept.__dict__["_view"]
delattr(_Kept, "_view")


@dataclass(frozen=True, slots=True, eq=True)
class Message(_Kept):
    """Base of every message. Use a concrete subclass."""

    message_id: str = field(default_factory=new_message_id, kw_only=True)
    metadata: dict[str, Any] = field(default_factory=dict, kw_only=True, compare=True)
    version: int = field(default=0, kw_only=True)
    turn_id: str | None = field(default=None, kw_only=True)
    model_visible: ClassVar[bool] = True
    _kind: ClassVar[int] = -1

    def __post_init__(self) -> None:
        check_identifier(self.message_id, "message_id")
        if not isinstance(self.metadata, dict):
            raise InvalidMessageTypeError(
                f"message {self.message_id!r}: metadata must be a dict, "
                f"got {type(self.metadata).__name__}"
            )
        version = self.version
        if (
            isinstance(version, bool)
            or not isinstance(version, int)
            or version < 0
            or version > MAX_VERSION
        ):
            raise InvalidArgumentError(
                f"message {self.message_id!r}: version must be an int from 0 to 2**63 - 1, "
                f"got {version!r}"
            )
        if self.turn_id is not None:
            check_identifier(self.turn_id, f"message {self.message_id!r} turn_id")

    __hash__ = None  # type: ignore[assignment]  # metadata is a dict

    def with_version(self, version: int) -> Message:
        """A copy of this message carrying ``version``."""
        from dataclasses import replace

        return replace(self, version=version)


@dataclass(frozen=True, slots=True, eq=True)
class SystemMessage(Message):
    """The agent's instructions. ``role`` is ``"system"`` or ``"developer"`` (the role newer
    OpenAI models read instructions under); ``name`` an optional participant name."""

    text: str = ""
    role: str = field(default="system", kw_only=True)
    name: str | None = field(default=None, kw_only=True)
    _kind: ClassVar[int] = KIND_SYSTEM

    def __post_init__(self) -> None:
        Message.__post_init__(self)
        require_str(self.text, f"message {self.message_id!r} text")
        if self.role not in SYSTEM_ROLES:
            raise InvalidArgumentError(
                f"message {self.message_id!r}: role must be 'system' or 'developer', "
                f"got {self.role!r}"
            )
        check_participant_name(self.name, self.message_id)


@dataclass(frozen=True, slots=True, eq=True)
class UserMessage(Message):
    """A user's message: plain text, or a tuple of multimodal parts; ``name`` an optional
    participant name (to tell several users apart)."""

    content: str | tuple[Part, ...] = ""
    name: str | None = field(default=None, kw_only=True)
    _kind: ClassVar[int] = KIND_USER

    def __post_init__(self) -> None:
        Message.__post_init__(self)
        check_participant_name(self.name, self.message_id)
        if isinstance(self.content, list):
            object.__setattr__(self, "content", tuple(self.content))
        if isinstance(self.content, tuple):
            for index, part in enumerate(self.content):
                if not isinstance(part, _PART_TYPES):
                    raise InvalidMessageTypeError(
                        f"message {self.message_id!r}: content[{index}] is not a part, "
                        f"got {type(part).__name__}"
                    )
        else:
            require_str(self.content, f"message {self.message_id!r} content")

    @property
    def text(self) -> str:
        """The text of the message; for multimodal content, the text parts joined by newlines."""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(part.text for part in self.content if isinstance(part, TextPart))


@dataclass(frozen=True, slots=True, eq=True)
class AiMessage(Message):
    """A model reply: text, tool calls, or both.

    ``refusal`` is the model's refusal message when it declined to answer, ``name`` an optional
    participant name, and ``usage`` the token `Usage` the API reported for the call that
    produced it (stored with the message; not part of the tool protocol or token estimates).

    ``provider_items`` are the provider's own model-visible parts of this reply, kept opaque
    and in order (Responses ``reasoning`` items with their encrypted content, Anthropic
    ``thinking`` / ``redacted_thinking`` blocks, hosted-tool calls and results): the provider
    needs them back with the reply, so they travel with it in every window, are stored with it
    and are counted from their JSON text (`provider_text`). Each is a JSON object (a mapping
    with str keys and JSON values), kept as a deep copy of plain dicts and lists.
    """

    text: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    refusal: str | None = field(default=None, kw_only=True)
    name: str | None = field(default=None, kw_only=True)
    usage: Usage | None = field(default=None, kw_only=True)
    provider_items: tuple[dict[str, Any], ...] = field(default=(), kw_only=True)
    _kind: ClassVar[int] = KIND_AI

    def __post_init__(self) -> None:
        Message.__post_init__(self)
        if self.provider_items:
            object.__setattr__(
                self, "provider_items", _provider_items(self.provider_items, self.message_id)
            )
        elif not isinstance(self.provider_items, (tuple, list)):
            raise InvalidMessageTypeError(
                f"message {self.message_id!r}: provider_items must be a tuple of JSON objects, "
                f"got {type(self.provider_items).__name__}"
            )
        else:
            object.__setattr__(self, "provider_items", ())
        if self.refusal is not None:
            require_str(self.refusal, f"message {self.message_id!r} refusal")
        check_participant_name(self.name, self.message_id)
        if self.usage is not None and not isinstance(self.usage, Usage):
            raise InvalidMessageTypeError(
                f"message {self.message_id!r}: usage must be a Usage or None, "
                f"got {type(self.usage).__name__}"
            )
        if self.text is not None:
            require_str(self.text, f"message {self.message_id!r} text")
        if isinstance(self.tool_calls, list):
            object.__setattr__(self, "tool_calls", tuple(self.tool_calls))
        if not isinstance(self.tool_calls, tuple):
            raise InvalidMessageTypeError(
                f"message {self.message_id!r}: tool_calls must be a tuple of ToolCall"
            )
        for index, call in enumerate(self.tool_calls):
            if not isinstance(call, ToolCall):
                raise InvalidMessageTypeError(
                    f"message {self.message_id!r}: tool_calls[{index}] is not a ToolCall, "
                    f"got {type(call).__name__}"
                )

    @property
    def has_final_text(self) -> bool:
        """True for a final answer: non-empty text and no tool calls."""
        return bool(self.text) and not self.tool_calls

    @property
    def provider_text(self) -> str:
        """The provider items as compact JSON (``""`` without any): what every estimator counts
        for them, as the model reads them back at about their text size."""
        if not self.provider_items:
            return ""
        return json.dumps(list(self.provider_items), ensure_ascii=False, separators=(",", ":"))


def _provider_items(items: object, message_id: str) -> tuple[dict[str, Any], ...]:
    """``items`` as a tuple of plain JSON objects (deep copies), or a typed error naming the
    bad item: a store must give back exactly what it was given."""
    if not isinstance(items, (tuple, list)):
        raise InvalidMessageTypeError(
            f"message {message_id!r}: provider_items must be a tuple of JSON objects, "
            f"got {type(items).__name__}"
        )
    out = []
    for index, item in enumerate(items):
        where = f"message {message_id!r}: provider_items[{index}]"
        if not isinstance(item, Mapping):
            raise InvalidMessageTypeError(
                f"{where} must be a JSON object, got {type(item).__name__}"
            )
        out.append(_json_copy(item, where, 0))
    return tuple(out)


_MAX_DEPTH = 64


def _json_copy(value: Any, where: str, depth: int) -> Any:
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidArgumentError(f"{where}: {value!r} is not valid JSON")
        return value
    if depth >= _MAX_DEPTH:
        raise InvalidArgumentError(f"{where} is nested deeper than {_MAX_DEPTH} levels")
    if isinstance(value, Mapping):
        copied = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidArgumentError(f"{where}: key {key!r} is not a str")
            copied[key] = _json_copy(item, where, depth + 1)
        return copied
    if isinstance(value, (list, tuple)):
        return [_json_copy(item, where, depth + 1) for item in value]
    raise InvalidMessageTypeError(f"{where} holds a {type(value).__name__}, which is not JSON")


@dataclass(frozen=True, slots=True, eq=True)
class ToolMessage(Message):
    """The result of the tool call ``tool_call_id``."""

    tool_call_id: str = ""
    text: str = ""
    tool_name: str | None = None
    is_error: bool = False
    _kind: ClassVar[int] = KIND_TOOL

    def __post_init__(self) -> None:
        Message.__post_init__(self)
        check_identifier(self.tool_call_id, f"message {self.message_id!r} tool_call_id")
        if self.tool_name is not None:
            check_identifier(self.tool_name, f"message {self.message_id!r} tool_name")
        require_str(self.text, f"message {self.message_id!r} text")
        if self.is_error is not True and self.is_error is not False:
            raise InvalidMessageTypeError(
                f"message {self.message_id!r}: is_error must be a bool, "
                f"got {type(self.is_error).__name__}"
            )


@dataclass(frozen=True, slots=True, eq=True)
class AgentActionMessage(Message):
    """A UI action (e.g. a button the page shows). Never sent to a model."""

    payload: dict[str, Any] | None = None
    model_visible: ClassVar[bool] = False
    _kind: ClassVar[int] = KIND_ACTION

    def __post_init__(self) -> None:
        Message.__post_init__(self)
        _check_payload(self)


@dataclass(frozen=True, slots=True, eq=True)
class AgentFormMessage(Message):
    """A UI form, e.g. an approval request. Never sent to a model."""

    payload: dict[str, Any] | None = None
    status: str | None = None
    model_visible: ClassVar[bool] = False
    _kind: ClassVar[int] = KIND_FORM

    def __post_init__(self) -> None:
        Message.__post_init__(self)
        _check_payload(self)
        if self.status is not None and not isinstance(self.status, str):
            raise InvalidMessageTypeError(
                f"message {self.message_id!r}: status must be a str or None, "
                f"got {type(self.status).__name__}"
            )


def _check_payload(message: AgentActionMessage | AgentFormMessage) -> None:
    # Only the type: whether the values are JSON is checked when a store serialises it.
    if message.payload is not None and not isinstance(message.payload, dict):
        raise InvalidMessageTypeError(
            f"message {message.message_id!r}: payload must be a dict or None, "
            f"got {type(message.payload).__name__}"
        )


MESSAGE_TYPES: tuple[type[Message], ...] = (
    SystemMessage,
    UserMessage,
    AiMessage,
    ToolMessage,
    AgentActionMessage,
    AgentFormMessage,
)
