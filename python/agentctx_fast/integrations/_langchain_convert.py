"""LangChain messages ↔ messages: `to_langchain` and `from_langchain` (see `.langchain`).

Content blocks are classified, never refused: text blocks are text (a user message's media
blocks its parts); an AI message's tool-call blocks (Anthropic ``tool_use``, Responses
``function_call``, v1 ``tool_call``) are covered by its tool calls; every other AI block
(``thinking``, ``redacted_thinking``, ``reasoning``, ``server_tool_call`` /
``server_tool_result``, hosted-tool items, generated images) is one of its
``provider_items``, so it travels with the message in every window and is counted. What the
message model has no field for — the content as LangChain had it (when it is not what
`to_langchain` would write), ``response_metadata``, other ``additional_kwargs``, usage
details, a tool message's ``artifact`` — is kept under ``metadata["langchain"]``
(`LANGCHAIN_METADATA_KEY`) so `to_langchain` gives the message back as it came. Kept content
stores each provider item and part once: its place holds a marker the items fill back in.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from typing import Any

from agentctx_fast import _wire
from agentctx_fast._extras import missing_dependency
from agentctx_fast._ids import check_participant_name
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
    Usage,
    UserMessage,
    not_a_message,
)
from agentctx_fast.errors import (
    AgentCtxError,
    ContentTooLargeError,
    InvalidArgumentError,
    InvalidMessageTypeError,
)

try:
    from langchain_core import messages as lc
    from langchain_core.messages.ai import UsageMetadata
    from langchain_core.messages.tool import invalid_tool_call, tool_call
except ImportError as error:  # pragma: no cover - exercised in a subprocess test
    raise missing_dependency("langchain", error) from error

LANGCHAIN_METADATA_KEY = "langchain"
"""The metadata key holding what a LangChain message carries beyond the message model."""

_DEVELOPER_KEY = "__openai_role__"  # where langchain-openai keeps the developer role
_MEDIA_BLOCKS = {ImagePart: "image", AudioPart: "audio", FilePart: "file"}
_MEDIA_PARTS = {kind: part for part, kind in _MEDIA_BLOCKS.items()}
# Where kept content held a provider item or a part (stored once, in its own field).
_ITEM_SLOT = {"agentctx": "provider_item"}
_PART_SLOT = {"agentctx": "part"}
# AI content blocks that carry a tool call (Anthropic, Responses, LangChain v1).
_CALL_BLOCKS = frozenset(
    ("tool_use", "function_call", "custom_tool_call", "tool_call", "invalid_tool_call")
)
_CALL_FRAGMENTS = frozenset(("tool_call_chunk",))  # streaming pieces of a call
_USAGE_KEYS = {"input_tokens", "output_tokens", "total_tokens"}
_NOT_AN_OBJECT = "arguments are not a JSON object"  # the error of an invalid call we write


# --- to LangChain -----------------------------------------------------------------------------


def _part_block(part: Part) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    block: dict[str, Any] = {"type": _MEDIA_BLOCKS[type(part)]}
    if part.data is not None:
        block["base64"] = base64.b64encode(part.data).decode("ascii")
    elif isinstance(part, FilePart) and ":" not in str(part.uri):
        block["file_id"] = part.uri  # no scheme: a provider's file id
    else:
        block["url"] = part.uri
    if part.mime_type is not None:
        block["mime_type"] = part.mime_type
    extras = {
        key: value
        for key, value in (
            ("filename", part.name),
            ("size_bytes", part.size_bytes),
            ("detail", getattr(part, "detail", None)),
        )
        if value is not None
    }
    if extras:
        block["extras"] = extras
    return block


def _object_args(arguments: str) -> dict[str, Any] | None:
    """The arguments as LangChain's ``args`` (a JSON object), or None."""
    try:
        args = json.loads(arguments) if arguments.strip() else {}
    except (ValueError, RecursionError):  # JSON nested too deeply is invalid too
        return None
    return args if isinstance(args, dict) else None


def _lc_tool_calls(message: AiMessage) -> tuple[list[Any], list[Any]]:
    kept = message.metadata.get(LANGCHAIN_METADATA_KEY)
    errors = kept.get("invalid_tool_calls") if isinstance(kept, dict) else None
    errors = errors if isinstance(errors, dict) else {}  # the invalid calls read, by id
    valid: list[Any] = []
    invalid: list[Any] = []
    for call in message.tool_calls:
        args = _object_args(call.arguments)
        if args is not None and call.id not in errors:
            valid.append(tool_call(name=call.name, args=args, id=call.id))
        else:  # LangChain keeps arguments that are not a JSON object as an invalid call
            invalid.append(
                invalid_tool_call(
                    name=call.name,
                    args=call.arguments,
                    id=call.id,
                    error=errors[call.id] if call.id in errors else _NOT_AN_OBJECT,
                )
            )
    return valid, invalid


def _ai_default_content(text: str | None, items: Sequence[dict[str, Any]]) -> Any:
    """The content `to_langchain` writes: the text, or the provider items then the text."""
    if not items:
        return text or ""
    blocks = [_wire.copy_json(item) for item in items]
    if text:
        blocks.append({"type": "text", "text": text})
    return blocks


def _to_langchain_one(message: Message) -> lc.BaseMessage | None:
    kwargs: dict[str, Any] = {"id": message.message_id}
    content: Any
    if isinstance(message, SystemMessage):
        extra = {_DEVELOPER_KEY: "developer"} if message.role == "developer" else {}
        make: Any = lc.SystemMessage
        content, kwargs["name"], kwargs["additional_kwargs"] = message.text, message.name, extra
    elif isinstance(message, UserMessage):
        content = message.content
        if not isinstance(content, str):
            content = [_part_block(part) for part in content]
        make, kwargs["name"] = lc.HumanMessage, message.name
    elif isinstance(message, AiMessage):
        valid, invalid = _lc_tool_calls(message)
        usage = message.usage
        make, content = lc.AIMessage, _ai_default_content(message.text, message.provider_items)
        kwargs.update(
            tool_calls=valid,
            invalid_tool_calls=invalid,
            name=message.name,
            additional_kwargs={"refusal": message.refusal} if message.refusal is not None else {},
            usage_metadata=None
            if usage is None
            else UsageMetadata(
                input_tokens=usage.prompt_tokens,
                output_tokens=usage.completion_tokens,
                total_tokens=usage.total_tokens,
            ),
        )
    elif isinstance(message, ToolMessage):
        make, content = lc.ToolMessage, message.text
        kwargs.update(
            tool_call_id=message.tool_call_id,
            name=message.tool_name,
            status="error" if message.is_error else "success",
        )
    else:
        return None  # UI messages have no model form
    kept = message.metadata.get(LANGCHAIN_METADATA_KEY)
    if isinstance(kept, dict):
        content = _restore(message, kept, kwargs, content)
    return make(content, **kwargs)  # type: ignore[no-any-return]


def _restore(message: Message, kept: dict[str, Any], kwargs: dict[str, Any], content: Any) -> Any:
    """Puts back what ``from_langchain`` kept; gives the content (kept content only while it
    still reads as the message's own fields, so an updated message is never contradicted)."""
    for key in ("additional_kwargs", "response_metadata", "artifact"):
        if key in kept:
            kwargs[key] = _wire.copy_json(kept[key])
    if "name" in kept and kwargs.get("name") is None:
        kwargs["name"] = kept["name"]
    usage = kept.get("usage_metadata")
    if isinstance(usage, dict) and kwargs.get("usage_metadata") == {
        k: usage.get(k) for k in _USAGE_KEYS
    }:
        kwargs["usage_metadata"] = _wire.copy_json(usage)
    layout = kept.get("content")
    if not isinstance(layout, list):
        return content
    restored = _filled(layout, message)
    try:
        return restored if restored is not None and _reads_as(restored, message) else content
    except AgentCtxError:
        return content


def _reads_as(content: list[Any], message: Message) -> bool:
    """Whether ``content`` reads back as the message's own fields."""
    if isinstance(message, AiMessage):
        calls = list(message.tool_calls)
        texts, _, items, _ = _ai_content(content, calls, "")
        text = _ai_text(texts, bool(calls), message.refusal)
        return (text, items, len(calls)) == (
            message.text,
            list(message.provider_items),
            len(message.tool_calls),
        )
    if isinstance(message, UserMessage):
        return _human_content(content, "")[0] == message.content
    return _joined_text(content, "") == getattr(message, "text", None)


def _filled(layout: list[Any], message: Message) -> list[Any] | None:
    """Kept content with its markers replaced by the message's provider items or parts;
    None when there are more markers than those."""
    if isinstance(message, AiMessage):
        fills: list[Any] = list(message.provider_items)
        slot = _ITEM_SLOT
    elif isinstance(message, UserMessage) and not isinstance(message.content, str):
        fills = [_part_block(part) for part in message.content]
        slot = _PART_SLOT
    else:
        fills, slot = [], _PART_SLOT
    out: list[Any] = []
    taken = 0
    for block in layout:
        if block == slot:
            if taken == len(fills):
                return None
            out.append(_wire.copy_json(fills[taken]))
            taken += 1
        else:
            out.append(_wire.copy_json(block))
    return out  # `_reads_as` checks that every item and part is in it


def to_langchain(messages: Sequence[Message]) -> list[lc.BaseMessage]:
    """LangChain messages for ``messages``; UI messages (never model input) are left out.

    A message read by `from_langchain` comes back as it was read (its content blocks,
    ``response_metadata``, ``additional_kwargs``; see `LANGCHAIN_METADATA_KEY`).
    """
    out: list[lc.BaseMessage] = []
    for index, message in enumerate(messages):
        if not isinstance(message, Message):
            raise not_a_message(message, f"messages[{index}]")
        converted = _to_langchain_one(message)
        if converted is not None:
            out.append(converted)
    return out


# --- from LangChain ---------------------------------------------------------------------------


def _block_part(block: Any, where: str) -> Part | None:
    """The part a user content block is, or None for a block no part carries (a video, a
    provider's own block form, inline data over the cap): that block is kept as it is."""
    if isinstance(block, str):
        return TextPart(block)
    if not isinstance(block, Mapping):
        raise InvalidArgumentError(f"{where}: a content block must be a str or an object")
    kind = block.get("type")
    if kind == "text" and isinstance(block.get("text"), str):
        return TextPart(block["text"])
    if kind == "image_url":  # the OpenAI-style block
        image = block.get("image_url")
        url = image.get("url") if isinstance(image, Mapping) else image
        if not isinstance(url, str):
            raise InvalidArgumentError(f"{where}: image_url block has no url")
        detail = image.get("detail") if isinstance(image, Mapping) else None
        return ImagePart(uri=url, detail=detail)
    media = _MEDIA_PARTS.get(str(kind))
    if media is None or not any(block.get(k) is not None for k in ("url", "file_id", "base64")):
        return None  # e.g. Anthropic's {"type": "image", "source": ...}: kept as it is
    extras = block.get("extras") or {}
    if not isinstance(extras, Mapping):
        raise InvalidArgumentError(f"{where}: 'extras' must be an object")
    fields: dict[str, Any] = {
        "mime_type": block.get("mime_type"),
        "name": extras.get("filename"),
        "size_bytes": extras.get("size_bytes"),
    }
    if media is ImagePart:
        fields["detail"] = extras.get("detail")
    if block.get("base64") is not None:
        fields["data"] = _wire.b64decode(
            str(block["base64"]), InvalidArgumentError, f"{where}: base64 data is not valid"
        )
    else:
        fields["uri"] = block.get("url") or block.get("file_id")
    try:
        part: Part = media(**fields)
    except ContentTooLargeError:
        return None  # inline data over the cap is no part; the block is kept as it is
    return part


def _human_content(content: Any, where: str) -> tuple[tuple[Part, ...], list[Any]]:
    """A user message's parts and its content with each part's block as a marker."""
    parts: list[Part] = []
    layout: list[Any] = []
    for i, block in enumerate(content):
        part = _block_part(block, f"{where} content[{i}]")
        if part is None:
            layout.append(block)
            continue
        parts.append(part)
        layout.append(_PART_SLOT if _part_block(part) == block else block)
    return tuple(parts), layout


def _joined_text(content: Any, where: str) -> str:
    """The text of a str or block content; blocks other than text are not text."""
    if isinstance(content, str):
        return content
    texts: list[str] = []
    for i, block in enumerate(content or ()):
        if isinstance(block, str):
            texts.append(block)
        elif not isinstance(block, Mapping):
            raise InvalidArgumentError(f"{where}: content[{i}] must be a str or an object")
        elif block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
    return "".join(texts)


def _call_of(block: Mapping[str, Any], call_id: str, where: str) -> ToolCall:
    """The tool call a content block makes (one ``tool_calls`` did not list)."""
    kind = block.get("type")
    if kind in ("function_call", "custom_tool_call"):
        arguments = block.get("arguments", block.get("input", ""))
    else:
        value = block.get("input" if kind == "tool_use" else "args", {})
        arguments = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    name = block.get("name")
    if not isinstance(name, str) or not isinstance(arguments, str):
        raise InvalidArgumentError(f"{where}: tool call block {call_id!r} is malformed")
    return ToolCall(call_id, name, arguments)


def _ai_content(
    content: Any, calls: list[ToolCall], where: str
) -> tuple[list[str], list[str], list[Any], list[Any]]:
    """An AI message's texts, refusals, provider items and content with each item as a
    marker; a call block that ``calls`` lacks is appended to it."""
    if isinstance(content, str):
        return [content], [], [], []
    texts: list[str] = []
    refusals: list[str] = []
    items: list[Any] = []
    layout: list[Any] = []
    ids = {call.id for call in calls}
    for i, block in enumerate(content):
        kind = block.get("type") if isinstance(block, Mapping) else None
        if isinstance(block, str):
            texts.append(block)
        elif not isinstance(block, Mapping):
            raise InvalidArgumentError(f"{where}: content[{i}] must be a str or an object")
        elif kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "refusal" and isinstance(block.get("refusal"), str):
            refusals.append(block["refusal"])
        elif kind in _CALL_BLOCKS:
            call_id = block.get("call_id") or block.get("id")
            if kind != "invalid_tool_call" and isinstance(call_id, str) and call_id not in ids:
                calls.append(_call_of(block, call_id, f"{where} content[{i}]"))
                ids.add(call_id)
        elif kind not in _CALL_FRAGMENTS:
            items.append(block)  # reasoning, thinking, hosted tools, ...: kept opaque
            layout.append(_ITEM_SLOT)
            continue
        layout.append(block)
    return texts, refusals, items, layout


def _ai_text(texts: list[str], has_calls: bool, refusal: str | None) -> str | None:
    text = "".join(texts)
    if not text and (has_calls or refusal is not None):
        return None  # LangChain writes "" where a tool-call or refusal reply has no text
    return text


def _json(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return False
    return True


def _keep(
    message: lc.BaseMessage,
    kept: dict[str, Any],
    default_kwargs: dict[str, Any],
) -> dict[str, Any]:
    """``metadata`` holding ``kept`` plus the fields that differ from what `to_langchain`
    writes; values that are not JSON (a parsed pydantic object) cannot be stored and are
    left out."""
    if message.additional_kwargs != default_kwargs:
        extra = {k: v for k, v in message.additional_kwargs.items() if _json(v)}
        if extra != default_kwargs:
            kept["additional_kwargs"] = extra
    if message.response_metadata:
        metadata = {k: v for k, v in message.response_metadata.items() if _json(v)}
        if metadata:
            kept["response_metadata"] = metadata
    kept = {k: v for k, v in kept.items() if _json(v)}
    return {LANGCHAIN_METADATA_KEY: _wire.copy_json(kept)} if kept else {}


def _checked_name(message: lc.BaseMessage, kept: dict[str, Any]) -> str | None:
    """The message's name, or None with the name kept when it is no valid participant name
    (an agent's display name with spaces)."""
    name = message.name
    if name is None:
        return None
    try:
        check_participant_name(name, str(message.id))
    except AgentCtxError:
        kept["name"] = name
        return None
    return name


def _ai_from_langchain(
    message: lc.AIMessage, ids: dict[str, Any], where: str, keep: bool
) -> AiMessage:
    calls = [
        ToolCall(str(c.get("id") or ""), c["name"], json.dumps(c["args"], ensure_ascii=False))
        for c in message.tool_calls
    ]
    invalid = [
        ToolCall(str(c.get("id") or ""), str(c.get("name") or ""), c.get("args") or "")
        for c in message.invalid_tool_calls
    ]
    calls += invalid
    if any(not call.id for call in calls):
        raise InvalidArgumentError(f"{where}: a tool call has no id")
    texts, refusals, items, layout = _ai_content(message.content, calls, where)
    refusal = message.additional_kwargs.get("refusal")
    if refusal is None and refusals:
        refusal = "".join(refusals)
    text = _ai_text(texts, bool(calls), refusal)
    usage = message.usage_metadata
    kept: dict[str, Any] = {}
    name = _checked_name(message, kept)
    metadata: dict[str, Any] = {}
    if keep:
        if message.content != _ai_default_content(text, items):
            kept["content"] = layout
        if usage is not None and set(usage) != _USAGE_KEYS:
            kept["usage_metadata"] = dict(usage)
        # An invalid call `to_langchain` would not write back as it is: its error, by id.
        errors = {
            call.id: c.get("error")
            for call, c in zip(invalid, message.invalid_tool_calls, strict=True)
            if c.get("error") != _NOT_AN_OBJECT or _object_args(call.arguments) is not None
        }
        if errors:
            kept["invalid_tool_calls"] = errors
        defaults = {"refusal": refusal} if refusal is not None else {}
        metadata = _keep(message, kept, defaults)
    return AiMessage(
        text,
        tuple(calls),
        refusal=refusal,
        name=name,
        usage=None
        if usage is None
        else Usage(usage["input_tokens"], usage["output_tokens"], usage["total_tokens"]),
        provider_items=tuple(items),
        metadata=metadata,
        **ids,
    )


def _from_langchain_one(message: Any, where: str, keep: bool) -> Message:
    if not isinstance(message, lc.BaseMessage):
        raise InvalidMessageTypeError(
            f"{where} is not a LangChain message: got {type(message).__name__}"
        )
    ids: dict[str, Any] = {"message_id": message.id} if message.id else {}
    if isinstance(message, lc.AIMessage):
        return _ai_from_langchain(message, ids, where, keep)
    content = message.content
    kept: dict[str, Any] = {}
    if isinstance(message, lc.HumanMessage):
        name = _checked_name(message, kept)
        if isinstance(content, str):
            user = UserMessage(content, name=name, **ids)
        else:
            parts, layout = _human_content(content, where)
            if keep and content != [_part_block(part) for part in parts]:
                kept["content"] = layout
            user = UserMessage(parts, name=name, **ids)
        if not keep:
            return user
        return _with_metadata(user, _keep(message, kept, {}))
    text = _joined_text(content, where)
    if keep and not isinstance(content, str):
        kept["content"] = content
    if isinstance(message, lc.ToolMessage):
        if keep and message.artifact is not None:
            kept["artifact"] = message.artifact
        tool = ToolMessage(
            message.tool_call_id,
            text,
            tool_name=message.name,
            is_error=message.status == "error",
            **ids,
        )
        return _with_metadata(tool, _keep(message, kept, {})) if keep else tool
    if isinstance(message, lc.SystemMessage):
        role = message.additional_kwargs.get(_DEVELOPER_KEY, "system")
        name = _checked_name(message, kept)
        system = SystemMessage(text, role=role, name=name, **ids)
        defaults = {_DEVELOPER_KEY: "developer"} if role == "developer" else {}
        return _with_metadata(system, _keep(message, kept, defaults)) if keep else system
    if isinstance(message, lc.ChatMessage):  # a message with a free-form role
        role = message.role.lower()
        if role in ("user", "human"):
            return UserMessage(text, **ids)
        if role in ("assistant", "ai"):
            return AiMessage(text, **ids)
        if role in SYSTEM_ROLES:
            return SystemMessage(text, role=role, **ids)
    raise InvalidArgumentError(f"{where}: a {type(message).__name__} cannot be carried")


def _with_metadata(message: Message, metadata: dict[str, Any]) -> Message:
    if not metadata:
        return message
    from dataclasses import replace

    return replace(message, metadata=metadata)


def convert(messages: Sequence[Any], keep: bool) -> list[Message]:
    """`from_langchain`; ``keep=False`` leaves out what only a way back needs (the window
    hands back the caller's own objects)."""
    if isinstance(messages, str | bytes | lc.BaseMessage) or not isinstance(messages, Sequence):
        raise InvalidArgumentError(
            f"messages must be a list of LangChain messages, got {type(messages).__name__}"
        )
    out: list[Message] = []
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        try:
            out.append(_from_langchain_one(message, where, keep))
        except (InvalidArgumentError, InvalidMessageTypeError) as error:
            if str(error).startswith(where):
                raise
            raise type(error)(f"{where}: {error}") from None
        except (KeyError, TypeError, ValueError) as error:
            raise InvalidArgumentError(f"{where}: malformed LangChain message: {error}") from None
    return out


def from_langchain(messages: Sequence[Any]) -> list[Message]:
    """Messages for LangChain ``messages``; a message's ``id`` becomes its ``message_id``.

    A message with no ``id`` gets a fresh one. Content blocks are classified, never refused
    (see the module); what a message cannot be (a function or removal message, a block that
    is neither a string nor an object) raises `InvalidArgumentError` naming its index.
    """
    return convert(messages, True)
