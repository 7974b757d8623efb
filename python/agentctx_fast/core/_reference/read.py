"""How a core sees a message: its kind and the fields the rules need, read once through the
message's properties and kept on the message (the Rust core's `rust/py/message.rs` reads the
same properties in the same order and raises the same errors).

A message is what its class and properties say: its kind is the library class it derives from,
and ``model_visible``, ids, text and tool calls are read as attributes, so a subclass that
overrides one of them is read the same way by both cores. The view is computed on first read
and kept in the message's ``_core`` slot (messages are immutable); both cores keep their own
view there, so a message changed behind the library's back with ``object.__setattr__`` keeps
what was first read on both.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from agentctx_fast.core.messages import (
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

# Each kind's `_core` slot as its library class defines it, read and written whatever a
# subclass defines, by kind code.
_SLOTS = tuple(cls.__dict__["_core"] for cls, _ in sorted(KINDS, key=lambda entry: entry[1]))
_slot_get: tuple[Callable[[object], object], ...] = tuple(slot.__get__ for slot in _SLOTS)
_slot_set: tuple[Callable[[object, object], None], ...] = tuple(slot.__set__ for slot in _SLOTS)
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

    # Copies of a message share the view (same fields); pickles drop it.
    def __reduce__(self) -> tuple[type[dict[str, Any]], tuple[()]]:
        return (dict, ())

    def __copy__(self) -> MessageView:
        return self

    def __deepcopy__(self, memo: object) -> MessageView:
        return self


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


def view(message: object, where: str) -> MessageView:
    """The message's view, read on first use and kept on the message. A message of a library
    class has it as its ``_core`` attribute (a view of another kind found there, or an error
    reading it, is passed over); any other (a subclass, which may define ``_core`` itself) is
    read through the library class's slot. The Rust core reads its own cores the same way."""
    exact = _EXACT_KINDS.get(type(message))
    if exact is not None:
        try:
            kept = message._core  # type: ignore[attr-defined]
        except Exception:  # a property put on the class in place of the slot may raise
            kept = None
        if type(kept) is MessageView and kept.kind == exact:
            return kept
    kind = kind_of(message, where)
    try:
        cached = _slot_get[kind](message)
    except AttributeError:  # never set: a subclass's __init__ kept it from the slot
        cached = None
    if type(cached) is MessageView:
        return cached
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
    _slot_set[kind](message, result)
    return result


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
