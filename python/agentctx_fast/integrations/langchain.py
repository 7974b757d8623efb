"""LangChain interoperability (extra ``langchain``).

- `to_langchain` / `from_langchain` convert messages both ways, keeping ids (``message_id`` ↔
  ``id``), tool-call arguments (JSON string ↔ dict), tool error status, names, refusals,
  usage and multimodal parts.
- `LangChainChatModel` wraps any ``BaseChatModel`` as a `ChatModel` (``chat``), and
  `AsyncLangChainChatModel` as an `AsyncChatModel` with ``stream``; both bind the agent's
  tools with the model's ``bind_tools``.
- `window_messages` is the model window over LangChain messages, for users of ``trim_messages``:
  it returns the caller's own message objects (and converts only what the window adds).

>>> from langchain_core.messages import AIMessage, HumanMessage
>>> history = [HumanMessage("hi", id="u1"), AIMessage("hello", id="a1"),
...            HumanMessage("again", id="u2")]
>>> [m.id for m in window_messages(history, system="Be brief.", max_attached_turns=0)]
['system', 'u2']
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from agentctx_fast._extras import missing_dependency
from agentctx_fast.errors import (
    AgentCtxError,
    InvalidArgumentError,
    InvalidMessageTypeError,
    ModelCallError,
)
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
    Usage,
    UserMessage,
)
from agentctx_fast.openai import openai_tools
from agentctx_fast.window import build_window

try:
    from langchain_core import messages as lc
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages.ai import UsageMetadata
    from langchain_core.messages.tool import invalid_tool_call, tool_call
except ImportError as error:  # pragma: no cover - exercised in a subprocess test
    raise missing_dependency("langchain", error) from error

__all__ = [
    "AsyncLangChainChatModel",
    "LangChainChatModel",
    "from_langchain",
    "to_langchain",
    "window_messages",
]

_DEVELOPER_KEY = "__openai_role__"  # where langchain-openai keeps the developer role
_MEDIA_BLOCKS = {ImagePart: "image", AudioPart: "audio", FilePart: "file"}


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


def _lc_tool_calls(message: AiMessage) -> tuple[list[Any], list[Any]]:
    valid: list[Any] = []
    invalid: list[Any] = []
    for call in message.tool_calls:
        try:
            args = json.loads(call.arguments) if call.arguments.strip() else {}
        except (ValueError, RecursionError):  # JSON nested too deeply is invalid too
            args = None
        if isinstance(args, dict):
            valid.append(tool_call(name=call.name, args=args, id=call.id))
        else:  # LangChain keeps arguments that are not a JSON object as an invalid call
            invalid.append(
                invalid_tool_call(
                    name=call.name,
                    args=call.arguments,
                    id=call.id,
                    error="arguments are not a JSON object",
                )
            )
    return valid, invalid


def _to_langchain_one(message: Message) -> lc.BaseMessage | None:
    common: dict[str, Any] = {"id": message.message_id}
    if isinstance(message, SystemMessage):
        extra = {_DEVELOPER_KEY: "developer"} if message.role == "developer" else {}
        return lc.SystemMessage(message.text, name=message.name, additional_kwargs=extra, **common)
    if isinstance(message, UserMessage):
        content: Any = message.content
        if not isinstance(content, str):
            content = [_part_block(part) for part in content]
        return lc.HumanMessage(content, name=message.name, **common)
    if isinstance(message, AiMessage):
        valid, invalid = _lc_tool_calls(message)
        usage = message.usage
        return lc.AIMessage(
            message.text or "",
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
            **common,
        )
    if isinstance(message, ToolMessage):
        return lc.ToolMessage(
            message.text,
            tool_call_id=message.tool_call_id,
            name=message.tool_name,
            status="error" if message.is_error else "success",
            **common,
        )
    return None  # UI messages have no model form


def to_langchain(messages: Sequence[Message]) -> list[lc.BaseMessage]:
    """LangChain messages for ``messages``; UI messages (never model input) are left out."""
    out: list[lc.BaseMessage] = []
    for index, message in enumerate(messages):
        if not isinstance(message, Message):
            raise InvalidMessageTypeError(
                f"messages[{index}] is not a Message: got {type(message).__name__}"
            )
        converted = _to_langchain_one(message)
        if converted is not None:
            out.append(converted)
    return out


# --- from LangChain ---------------------------------------------------------------------------


def _decode(data: Any, where: str) -> bytes:
    try:
        return base64.b64decode(str(data), validate=True)
    except (binascii.Error, ValueError):
        raise InvalidArgumentError(f"{where}: base64 data is not valid") from None


def _block_part(block: Any, where: str) -> Part:
    if isinstance(block, str):
        return TextPart(block)
    if not isinstance(block, Mapping):
        raise InvalidArgumentError(f"{where}: a content block must be a str or an object")
    kind = block.get("type")
    if kind == "text":
        return TextPart(str(block.get("text", "")))
    if kind == "image_url":  # the OpenAI-style block
        image = block.get("image_url")
        url = image.get("url") if isinstance(image, Mapping) else image
        if not isinstance(url, str):
            raise InvalidArgumentError(f"{where}: image_url block has no url")
        detail = image.get("detail") if isinstance(image, Mapping) else None
        return ImagePart(uri=url, detail=detail)
    part_class = {"image": ImagePart, "audio": AudioPart, "file": FilePart}.get(str(kind))
    if part_class is None:
        raise InvalidArgumentError(f"{where}: content block type {kind!r} cannot be carried")
    media: type[ImagePart | AudioPart | FilePart] = part_class
    extras = block.get("extras") or {}
    fields: dict[str, Any] = {
        "mime_type": block.get("mime_type"),
        "name": extras.get("filename"),
        "size_bytes": extras.get("size_bytes"),
    }
    if media is ImagePart:
        fields["detail"] = extras.get("detail")
    if block.get("base64") is not None:
        fields["data"] = _decode(block["base64"], where)
    else:
        fields["uri"] = block.get("url") or block.get("file_id")
    return media(**fields)


def _text_of(content: Any, where: str, *, skip: tuple[str, ...] = ()) -> str:
    """The text of a content that may be a str or blocks; other blocks are refused."""
    if isinstance(content, str):
        return content
    texts: list[str] = []
    for i, block in enumerate(content or ()):
        kind = block.get("type") if isinstance(block, Mapping) else "text"
        if kind in skip:
            continue
        part = _block_part(block, f"{where} content[{i}]")
        if not isinstance(part, TextPart):
            raise InvalidArgumentError(f"{where}: content[{i}] is not text; it cannot be carried")
        texts.append(part.text)
    return "".join(texts)


def _ai_from_langchain(message: lc.AIMessage, ids: dict[str, Any], where: str) -> AiMessage:
    calls = [
        ToolCall(str(c.get("id") or ""), c["name"], json.dumps(c["args"], ensure_ascii=False))
        for c in message.tool_calls
    ]
    calls += [
        ToolCall(str(c.get("id") or ""), str(c.get("name") or ""), c.get("args") or "")
        for c in message.invalid_tool_calls
    ]
    if any(not call.id for call in calls):
        raise InvalidArgumentError(f"{where}: a tool call has no id")
    refusal = message.additional_kwargs.get("refusal")
    content = message.content
    if refusal is None and isinstance(content, list):
        refusals = [b.get("refusal", "") for b in content if isinstance(b, Mapping)
                    and b.get("type") == "refusal"]
        refusal = "".join(refusals) if refusals else None
    # Reasoning and the tool-call blocks that repeat .tool_calls are not text.
    skip = ("refusal", "reasoning", "tool_call", "tool_call_chunk", "invalid_tool_call")
    text: str | None = _text_of(content, where, skip=skip)
    if not text and (calls or refusal is not None):
        text = None  # LangChain writes "" where a tool-call or refusal reply has no text
    usage = message.usage_metadata
    return AiMessage(
        text,
        tuple(calls),
        refusal=refusal,
        name=message.name,
        usage=None
        if usage is None
        else Usage(usage["input_tokens"], usage["output_tokens"], usage["total_tokens"]),
        **ids,
    )


def _from_langchain_one(message: Any, where: str) -> Message:
    if not isinstance(message, lc.BaseMessage):
        raise InvalidMessageTypeError(
            f"{where} is not a LangChain message: got {type(message).__name__}"
        )
    ids: dict[str, Any] = {"message_id": message.id} if message.id else {}
    if isinstance(message, lc.HumanMessage):
        content = message.content
        if isinstance(content, str):
            return UserMessage(content, name=message.name, **ids)
        parts = tuple(
            _block_part(block, f"{where} content[{i}]") for i, block in enumerate(content)
        )
        return UserMessage(parts, name=message.name, **ids)
    if isinstance(message, lc.AIMessage):
        return _ai_from_langchain(message, ids, where)
    if isinstance(message, lc.ToolMessage):
        return ToolMessage(
            message.tool_call_id,
            _text_of(message.content, where),
            tool_name=message.name,
            is_error=message.status == "error",
            **ids,
        )
    if isinstance(message, lc.SystemMessage):
        role = message.additional_kwargs.get(_DEVELOPER_KEY, "system")
        return SystemMessage(_text_of(message.content, where), role=role, name=message.name, **ids)
    if isinstance(message, lc.ChatMessage):  # a message with a free-form role
        role = message.role.lower()
        if role in ("user", "human"):
            return UserMessage(_text_of(message.content, where), **ids)
        if role in ("assistant", "ai"):
            return AiMessage(_text_of(message.content, where), **ids)
        if role in ("system", "developer"):
            return SystemMessage(_text_of(message.content, where), role=role, **ids)
    raise InvalidArgumentError(f"{where}: a {type(message).__name__} cannot be carried")


def from_langchain(messages: Sequence[Any]) -> list[Message]:
    """Messages for LangChain ``messages``; a message's ``id`` becomes its ``message_id``.

    A message with no ``id`` gets a fresh one. What a message cannot carry (a function or
    removal message, an image in a tool result) raises `InvalidArgumentError` naming its index.
    """
    out: list[Message] = []
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        try:
            out.append(_from_langchain_one(message, where))
        except (InvalidArgumentError, InvalidMessageTypeError) as error:
            if str(error).startswith(where):
                raise
            raise type(error)(f"{where}: {error}") from None
        except (KeyError, TypeError, ValueError) as error:
            raise InvalidArgumentError(f"{where}: malformed LangChain message: {error}") from None
    return out


def window_messages(messages: Sequence[Any], **window_options: Any) -> list[lc.BaseMessage]:
    """The model window (`build_window` with ``window_options``) over LangChain messages.

    Messages of the window that came from ``messages`` are the caller's own objects; the system
    message made from a ``system=`` string and repairs (a synthetic error result for a call
    left without one) are converted with `to_langchain`.
    """
    converted = from_langchain(messages)
    originals = {id(ours): theirs for ours, theirs in zip(converted, messages, strict=True)}
    window = build_window(converted, **window_options)
    out: list[lc.BaseMessage] = []
    for message in window.messages:
        original = originals.get(id(message))
        if original is None:
            out.extend(to_langchain([message]))
        else:
            out.append(original)
    return out


# --- chat models ------------------------------------------------------------------------------


def _check_model(chat_model: Any) -> None:
    if not isinstance(chat_model, BaseChatModel):
        raise InvalidArgumentError(
            f"chat_model must be a LangChain BaseChatModel, got {type(chat_model).__name__}"
        )


def _bound(chat_model: BaseChatModel, tools: Sequence[Any]) -> Any:
    if not tools:
        return chat_model
    try:
        return chat_model.bind_tools([dict(tool) for tool in openai_tools(tools)])
    except NotImplementedError:
        raise InvalidArgumentError(
            f"{type(chat_model).__name__} cannot bind tools (no bind_tools), and the agent has "
            f"{len(tools)}"
        ) from None


def _model_error(error: Exception) -> ModelCallError:
    status = getattr(error, "status_code", None)
    return ModelCallError(
        f"LangChain chat model failed: {type(error).__name__}: {error}",
        status if isinstance(status, int) and not isinstance(status, bool) else None,
    )


def _reply(result: Any) -> AiMessage:
    if not isinstance(result, lc.AIMessage):
        raise ModelCallError(f"the chat model returned a {type(result).__name__}, not an AIMessage")
    try:
        return _ai_from_langchain(result, {"message_id": result.id} if result.id else {}, "reply")
    except AgentCtxError as error:
        raise ModelCallError(f"the chat model's reply cannot be used: {error}") from error


def _chunk_text(chunk: Any) -> str:
    # Not ``chunk.text``: a method in langchain-core 0.3, a property-like accessor in 1.x.
    content = getattr(chunk, "content", "")
    if isinstance(content, str):
        return content
    return "".join(
        str(block.get("text", "")) if isinstance(block, Mapping) else str(block)
        for block in content
        if isinstance(block, str) or (isinstance(block, Mapping) and block.get("type") == "text")
    )


def _model_name(chat_model: BaseChatModel) -> str | None:
    # Chat models name their model ``model_name`` (ChatOpenAI) or ``model`` (most others).
    for attribute in ("model_name", "model"):
        name = getattr(chat_model, attribute, None)
        if isinstance(name, str) and name:
            return name
    return None


class LangChainChatModel:
    """A `ChatModel` over any LangChain ``BaseChatModel``, with the agent's tools bound."""

    def __init__(self, chat_model: BaseChatModel) -> None:
        _check_model(chat_model)
        self.chat_model = chat_model

    @property
    def model_name(self) -> str | None:
        """The wrapped model's name, if it has one."""
        return _model_name(self.chat_model)

    def chat(self, messages: Sequence[Message], tools: Sequence[Any]) -> AiMessage:
        """``invoke`` the model on the window; its errors become `ModelCallError`."""
        runnable = _bound(self.chat_model, tools)
        try:
            result = runnable.invoke(to_langchain(messages))
        except Exception as error:
            raise _model_error(error) from error
        return _reply(result)


class AsyncLangChainChatModel:
    """An `AsyncChatModel` with ``stream`` over any LangChain ``BaseChatModel``."""

    def __init__(self, chat_model: BaseChatModel) -> None:
        _check_model(chat_model)
        self.chat_model = chat_model

    @property
    def model_name(self) -> str | None:
        """The wrapped model's name, if it has one."""
        return _model_name(self.chat_model)

    async def chat(self, messages: Sequence[Message], tools: Sequence[Any]) -> AiMessage:
        """``ainvoke`` the model on the window; its errors become `ModelCallError`."""
        runnable = _bound(self.chat_model, tools)
        try:
            result = await runnable.ainvoke(to_langchain(messages))
        except Exception as error:
            raise _model_error(error) from error
        return _reply(result)

    async def stream(
        self, messages: Sequence[Message], tools: Sequence[Any]
    ) -> AsyncIterator[str | AiMessage]:
        """Text deltas from ``astream``, then the finished `AiMessage` (the chunks' sum)."""
        runnable = _bound(self.chat_model, tools)
        total: Any = None
        try:
            async for chunk in runnable.astream(to_langchain(messages)):
                total = chunk if total is None else total + chunk
                delta = _chunk_text(chunk)
                if delta:
                    yield delta
        except Exception as error:
            raise _model_error(error) from error
        yield _reply(total)  # an AIMessageChunk is an AIMessage
