"""Chat models on the official ``openai`` SDK (extra ``openai``).

`OpenAIChatModel` wraps ``openai.OpenAI`` and `AsyncOpenAIChatModel` wraps ``openai.AsyncOpenAI``
(with ``stream``). Both send `to_openai` of the window and the agent's tools as function tools,
and map the reply to an `AiMessage` with its text, tool calls, refusal and `Usage`. Any
OpenAI-compatible server works through the client's ``base_url``. An API error raises
`ModelCallError` carrying the HTTP status; retries are the client's (``max_retries``).

The request and the reply mapping are plain functions shared by both models; each model is
only the driver that awaits (or not) the SDK call.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from agentctx_fast._extras import missing_dependency
from agentctx_fast.core.messages import AiMessage, Message, ToolCall, Usage
from agentctx_fast.errors import InvalidArgumentError, ModelCallError
from agentctx_fast.formats.openai import openai_tools, to_openai

if TYPE_CHECKING:  # the openai extra: typed for users, imported when a model is made
    import openai  # noqa: F401 (named, quoted, in the models' base classes)

__all__ = ["AsyncOpenAIChatModel", "OpenAIChatModel"]

_RESERVED = ("messages", "model", "tools", "stream")


def _require_openai() -> Any:
    try:
        import openai
    except ImportError as error:
        raise missing_dependency("openai", error) from error
    return openai


def _check_options(client: Any, model: object, request_options: Mapping[str, Any]) -> None:
    if not isinstance(model, str) or not model:
        raise InvalidArgumentError(f"model must be a non-empty str, got {model!r}")
    reserved = sorted(set(request_options) & set(_RESERVED))
    if reserved:
        raise InvalidArgumentError(
            f"request options {reserved} are set by the model itself; pass the others only"
        )
    try:
        create = client.chat.completions.create
    except AttributeError:
        raise InvalidArgumentError(
            f"client must be an openai client with chat.completions.create, got "
            f"{type(client).__name__}"
        ) from None
    try:
        parameters = inspect.signature(create).parameters
    except (TypeError, ValueError):
        return
    if any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        return
    unknown = sorted(set(request_options) - set(parameters))
    if unknown:
        raise InvalidArgumentError(
            f"request options {unknown} are not parameters of chat.completions.create; "
            "pass extra_body={...} for a server's own options"
        )


def _request(
    model: str, options: Mapping[str, Any], messages: Sequence[Message], tools: Sequence[Any]
) -> dict[str, Any]:
    request: dict[str, Any] = {"model": model, "messages": to_openai(messages), **options}
    if tools:
        request["tools"] = openai_tools(tools)
    return request


def _usage(raw: Any) -> Usage | None:
    if raw is None:
        return None
    try:
        return Usage(
            int(raw.prompt_tokens or 0),
            int(raw.completion_tokens or 0),
            int(raw.total_tokens or 0),
        )
    except (AttributeError, TypeError, ValueError, InvalidArgumentError):
        return None  # a compatible server's odd usage block must not lose the reply


def _tool_call(raw: Any) -> ToolCall:
    function = getattr(raw, "function", None)
    if getattr(raw, "type", "function") != "function" or function is None:
        raise ModelCallError(f"the model made a {raw.type!r} tool call; only function calls work")
    return ToolCall(raw.id, function.name, function.arguments or "{}")


def _ai_message(completion: Any) -> AiMessage:
    """The reply of a ``ChatCompletion`` as an `AiMessage`."""
    choices = getattr(completion, "choices", None)
    if not choices:
        raise ModelCallError("the model API answered without a choice")
    message = choices[0].message
    try:
        return AiMessage(
            message.content,
            tuple(_tool_call(call) for call in message.tool_calls or ()),
            refusal=getattr(message, "refusal", None),
            usage=_usage(getattr(completion, "usage", None)),
        )
    except ModelCallError:
        raise
    except Exception as error:  # a reply the message classes refuse (e.g. a NUL in an id)
        raise ModelCallError(f"the model API's reply cannot be used: {error}") from error


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class _StreamedReply:
    """Gathers a streamed reply from its chunks: text, refusal, tool-call pieces, usage."""

    text: list[str] = field(default_factory=list)
    refusal: list[str] = field(default_factory=list)
    calls: dict[int, _PartialCall] = field(default_factory=dict)
    usage: Usage | None = None

    def feed(self, chunk: Any) -> str | None:
        """Take one chunk; returns its text delta, if any."""
        if getattr(chunk, "usage", None) is not None:
            self.usage = _usage(chunk.usage)
        if not chunk.choices:
            return None
        delta = chunk.choices[0].delta
        if getattr(delta, "refusal", None):
            self.refusal.append(delta.refusal)
        for piece in getattr(delta, "tool_calls", None) or ():
            call = self.calls.setdefault(piece.index, _PartialCall())
            call.id = piece.id or call.id
            if piece.function is not None:
                call.name = piece.function.name or call.name
                if piece.function.arguments:
                    call.arguments.append(piece.function.arguments)
        if delta.content:
            self.text.append(delta.content)
            return str(delta.content)
        return None

    def finish(self) -> AiMessage:
        calls = [self.calls[index] for index in sorted(self.calls)]
        try:
            return AiMessage(
                "".join(self.text) if self.text else None,  # no text: a tool call or refusal
                tuple(ToolCall(c.id, c.name, "".join(c.arguments) or "{}") for c in calls),
                refusal="".join(self.refusal) if self.refusal else None,
                usage=self.usage,
            )
        except Exception as error:
            raise ModelCallError(f"the model API's streamed reply is unusable: {error}") from error


@contextmanager
def _api_errors() -> Iterator[None]:
    """Turns the SDK's errors into `ModelCallError` with the HTTP status when there is one."""
    openai = _require_openai()
    try:
        yield
    except openai.APIStatusError as error:
        raise ModelCallError(
            f"model API error {error.status_code}: {error.message}", error.status_code
        ) from error
    except openai.OpenAIError as error:  # connection failures, timeouts, bad responses
        raise ModelCallError(f"model API call failed: {error}") from error


_Client = TypeVar("_Client")


class _OpenAIModel(Generic[_Client]):
    """What both models hold: the SDK client, the model called and the options of every
    request (checked once, when the model is made)."""

    def __init__(self, client: _Client, model: str, /, **request_options: Any) -> None:
        _require_openai()
        _check_options(client, model, request_options)
        self.client = client
        self.model = model
        self.request_options = dict(request_options)

    @property
    def model_name(self) -> str:
        """The model called; an `Agent` counts its windows with this model's tokens."""
        return self.model


class OpenAIChatModel(_OpenAIModel["openai.OpenAI"]):
    """A `ChatModel` over an ``openai.OpenAI`` client.

    ``request_options`` (e.g. ``temperature=0``, ``tool_choice="auto"``) go into every request.

    >>> import openai  # doctest: +SKIP
    >>> model = OpenAIChatModel(openai.OpenAI(), "gpt-4o-mini", temperature=0)  # doctest: +SKIP
    """

    def chat(self, messages: Sequence[Message], tools: Sequence[Any]) -> AiMessage:
        """One Chat Completions call with the window ``messages`` and the agent's ``tools``."""
        request = _request(self.model, self.request_options, messages, tools)
        with _api_errors():
            completion = self.client.chat.completions.create(**request)
        return _ai_message(completion)


class AsyncOpenAIChatModel(_OpenAIModel["openai.AsyncOpenAI"]):
    """An `AsyncChatModel` (and streaming model) over an ``openai.AsyncOpenAI`` client."""

    async def chat(self, messages: Sequence[Message], tools: Sequence[Any]) -> AiMessage:
        """One Chat Completions call with the window ``messages`` and the agent's ``tools``."""
        request = _request(self.model, self.request_options, messages, tools)
        with _api_errors():
            completion = await self.client.chat.completions.create(**request)
        return _ai_message(completion)

    async def stream(
        self, messages: Sequence[Message], tools: Sequence[Any]
    ) -> AsyncIterator[str | AiMessage]:
        """Text deltas as the model writes them, then the finished `AiMessage`.

        Usage is asked for (``stream_options={"include_usage": True}``) unless the request
        options say otherwise.
        """
        request = _request(self.model, self.request_options, messages, tools)
        request["stream"] = True
        request.setdefault("stream_options", {"include_usage": True})
        reply = _StreamedReply()
        with _api_errors():
            chunks = await self.client.chat.completions.create(**request)
            try:
                async for chunk in chunks:
                    delta = reply.feed(chunk)
                    if delta:
                        yield delta
            finally:
                await chunks.close()
        yield reply.finish()
