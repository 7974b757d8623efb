"""How a core sees a message: its kind and the fields the rules need, read once through the
message's properties and kept on the message (the Rust core's `rust/read.rs` reads the
same properties in the same order and raises the same errors).

A message is what its class and properties say: its kind is the library class it derives from,
and ``model_visible``, ids, text and tool calls are read as attributes, so a subclass that
overrides one of them is read the same way by both cores. The view is computed on first read
and kept on the message (messages are immutable) in a slot no caller reaches by name (see
``messages._Kept``), as the Rust core keeps its own in the message's native base; so a message
changed behind the library's back with ``object.__setattr__`` keeps what was first read on both.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from agentctx_fast.core.messages import (
    _VIEW,
    KIND_ACTION,
    KIND_AI,
    KIND_FORM,
    KIND_SYSTEM,
    KIND_TOOL,
    KIND_USER,
    AgentActionMessage,
    AgentFormMessage,
    AiMessage,
    Message,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from agentctx_fast.errors import InvalidArgumentError, InvalidMessageTypeError

# Kind by library class, in the order a subclass is matched.
KINDS: tuple[tuple[type[Message], int], ...] = (
    (SystemMessage, KIND_SYSTEM),
    (UserMessage, KIND_USER),
    (AiMessage, KIND_AI),
    (ToolMessage, KIND_TOOL),
    (AgentActionMessage, KIND_ACTION),
    (AgentFormMessage, KIND_FORM),
)
MESSAGE_OVERHEAD = 4
TOOL_CALL_OVERHEAD = 3
MEDIA_PART_TOKENS = 85

_kept_get: Callable[[object], object] = _VIEW.__get__
_kept_set: Callable[[object, object], None] = _VIEW.__set__
# A type's own name (`PyType_GetName`), which a metaclass cannot override.
_type_name: Callable[[type], str] = type.__dict__["__name__"].__get__


def type_name(value: object) -> str:
    """The name of ``value``'s class, as error messages give it."""
    return _type_name(type(value))


class MessageView:
    """What the rules need of one message; see the module docstring."""

    __slots__ = (
        "call_ids",
        "call_names",
        "final_text",
        "kind",
        "message_id",
        "tokens",
        "tool_call_id",
        "turn_id",
        "visible",
    )

    def __init__(self, kind: int, visible: bool, message_id: str, turn_id: str | None) -> None:
        self.kind = kind
        self.visible = visible
        self.message_id = message_id
        self.turn_id = turn_id
        self.call_ids: tuple[str, ...] = ()
        self.call_names: tuple[str, ...] = ()
        self.tool_call_id = ""
        self.final_text = False
        self.tokens = -1  # heuristic tokens, counted on first need


def is_str(value: object) -> bool:
    """True for a str or a str subclass, by its real class (as `PyUnicode_Check`)."""
    return issubclass(type(value), str)


def _str(value: object, where: str, field: str) -> str:
    """``value`` as an exact str (a str subclass's own methods never run)."""
    if not is_str(value):
        raise InvalidMessageTypeError(f"{where}.{field} must be a str, got {type_name(value)}")
    return str.__str__(value)


def _optional_str(value: object, where: str, field: str) -> str | None:
    return None if value is None else _str(value, where, field)


def _identifier(value: object, where: str, field: str) -> str:
    """An id: a str of valid Unicode (ids are compared exactly, as dict keys)."""
    text = _str(value, where, field)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidArgumentError(f"{where}.{field} holds a lone surrogate") from None
    return text


def _optional_identifier(value: object, where: str) -> str | None:
    return None if value is None else _identifier(value, where, "turn_id")


def kind_of(message: object, where: str) -> int:
    """The message's kind code, or `InvalidMessageTypeError` naming ``where``."""
    cls = type(message)
    if not issubclass(cls, Message):
        raise InvalidMessageTypeError(f"{where} is not a Message: got {_type_name(cls)}")
    for base, kind in KINDS:
        if issubclass(cls, base):
            return kind
    raise InvalidMessageTypeError(f"{where} is a {_type_name(cls)}, which is no message kind")


_EXACT_KINDS: dict[type, int] = {cls: kind for cls, kind in KINDS}


def _kept(message: object) -> MessageView | None:
    """The view kept on ``message``, or None (never set: a new message, a copy, a pickle)."""
    try:
        kept = _kept_get(message)
    except AttributeError:
        return None
    return kept if type(kept) is MessageView else None


def view(message: object, where: str) -> MessageView:
    """The message's view, read on first use and kept on it. The first view kept stays (one
    kept by a property's nested call while this one was read wins); one of another kind (the
    message's class was reassigned) is not used, and a fresh one is read and not kept. The Rust
    core keeps its cores the same way (`rust/py/message.rs::core_of`)."""
    kind = _EXACT_KINDS.get(type(message))
    if kind is None:
        kind = kind_of(message, where)
    kept = _kept(message)
    if kept is not None and kept.kind == kind:
        return kept
    result = MessageView(
        kind,
        bool(message.model_visible),  # type: ignore[attr-defined]
        _identifier(message.message_id, where, "message_id"),  # type: ignore[attr-defined]
        _optional_identifier(message.turn_id, where),  # type: ignore[attr-defined]
    )
    if kind == KIND_AI:
        text = _optional_str(message.text, where, "text")  # type: ignore[attr-defined]
        ids: list[str] = []
        names: list[str] = []
        for index, call in enumerate(message.tool_calls):  # type: ignore[attr-defined]
            at = f"{where}.tool_calls[{index}]"
            if not issubclass(type(call), ToolCall):
                raise InvalidMessageTypeError(f"{at} is not a ToolCall: got {type_name(call)}")
            ids.append(_identifier(call.id, at, "id"))
            names.append(_identifier(call.name, at, "name"))
        result.call_ids, result.call_names = tuple(ids), tuple(names)
        result.final_text = text is not None and len(text) > 0 and not ids
    elif kind == KIND_TOOL:
        result.tool_call_id = _identifier(message.tool_call_id, where, "tool_call_id")  # type: ignore[attr-defined]
    first = _kept(message)
    if first is None:
        _kept_set(message, result)
        return result
    return first if first.kind == kind else result


def read(messages: Sequence[object], index: int) -> tuple[object, MessageView]:
    """``messages[index]`` and its view."""
    message = messages[index]
    return message, view(message, f"messages[{index}]")


def tokens(
    message: object, message_view: MessageView, where: str, count: Callable[[str], int]
) -> int:
    """Heuristic tokens of a message (overhead, texts, tool-call names and arguments), counted
    once per message and kept on its view."""
    if message_view.tokens >= 0:
        return message_view.tokens
    counted = count_message(message, message_view.kind, where, count)
    message_view.tokens = counted
    return counted


def count_message(message: Any, kind: int, where: str, count: Callable[[str], int]) -> int:
    """The heuristic formula of one message, read from its properties (an AI message's
    provider items last, only when it has any)."""
    if kind == KIND_USER:
        content = message.content
        if is_str(content):
            return MESSAGE_OVERHEAD + count(str.__str__(content))
        total = MESSAGE_OVERHEAD
        for index, part in enumerate(content):
            if issubclass(type(part), TextPart):
                total += count(_str(part.text, f"{where}.content[{index}]", "text"))
            else:
                total += MEDIA_PART_TOKENS
        return total
    if kind == KIND_AI:
        text = _optional_str(message.text, where, "text")
        total = MESSAGE_OVERHEAD + (count(text) if text is not None else 0)
        for index, call in enumerate(message.tool_calls):
            at = f"{where}.tool_calls[{index}]"
            if not issubclass(type(call), ToolCall):
                raise InvalidMessageTypeError(f"{at} is not a ToolCall: got {type_name(call)}")
            total += (
                TOOL_CALL_OVERHEAD
                + count(_str(call.name, at, "name"))
                + count(_str(call.arguments, at, "arguments"))
            )
        if message.provider_items:  # counted from their JSON text (AiMessage.provider_text)
            total += count(_str(message.provider_text, where, "provider_text"))
        return total
    if kind in (KIND_TOOL, KIND_SYSTEM):
        return MESSAGE_OVERHEAD + count(_str(message.text, where, "text"))
    return 0  # UI messages are never sent
