"""LangChain and LangGraph interoperability (extra ``langchain``).

- `to_langchain` / `from_langchain` convert messages both ways, keeping ids (``message_id`` ↔
  ``id``), tool-call arguments (JSON string ↔ dict), tool error status, names, refusals,
  usage and multimodal parts. Provider content blocks (Anthropic ``thinking`` / ``tool_use``,
  Responses ``reasoning`` / ``function_call``, LangChain v1 ``reasoning``,
  ``server_tool_call``, images in tool results) are classified and carried, never refused:
  a message read by `from_langchain` comes back from `to_langchain` as it was.
- `window_messages` is the model window over LangChain messages, for users of ``trim_messages``:
  it returns the caller's own message objects (and converts only what the window adds).
- `AgentCtxMiddleware` (a LangChain v1 agent middleware for ``create_agent``) and
  `agentctx_pre_model_hook` (for LangGraph's ``create_react_agent``) send the model the window
  of the graph's messages and never change the graph's state.
- `AgentCtxChatMessageHistory` is a ``BaseChatMessageHistory`` on any store.
- `LangChainChatModel` wraps any ``BaseChatModel`` as a `ChatModel` (``chat``), and
  `AsyncLangChainChatModel` as an `AsyncChatModel` with ``stream``; both bind the agent's
  tools with the model's ``bind_tools``.

>>> from langchain_core.messages import AIMessage, HumanMessage
>>> history = [HumanMessage("hi", id="u1"), AIMessage("hello", id="a1"),
...            HumanMessage("again", id="u2")]
>>> [m.id for m in window_messages(history, system="Be brief.", max_attached_turns=0)]
['system', 'u2']
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agentctx_fast._extras import missing_dependency, stand_in
from agentctx_fast.core.messages import AiMessage, Message, SystemMessage
from agentctx_fast.core.window import WindowOptions, build_window
from agentctx_fast.errors import (
    AgentCtxError,
    InvalidArgumentError,
    MissingDependencyError,
    ModelCallError,
)
from agentctx_fast.formats.openai import openai_tools
from agentctx_fast.integrations._options import checked_window_options

try:
    from langchain_core import messages as lc
    from langchain_core.language_models import BaseChatModel
except ImportError as error:  # pragma: no cover - exercised in a subprocess test
    raise missing_dependency("langchain", error) from error

from agentctx_fast.integrations._langchain_convert import (
    LANGCHAIN_METADATA_KEY,
    _ai_from_langchain,
    convert,
    from_langchain,
    to_langchain,
)
from agentctx_fast.integrations._langchain_history import AgentCtxChatMessageHistory

if TYPE_CHECKING:
    from agentctx_fast.integrations._langchain_agents import AgentCtxMiddleware

__all__ = [
    "LANGCHAIN_METADATA_KEY",
    "AgentCtxChatMessageHistory",
    "AgentCtxMiddleware",
    "AsyncLangChainChatModel",
    "LangChainChatModel",
    "agentctx_pre_model_hook",
    "from_langchain",
    "to_langchain",
    "window_messages",
]


def __getattr__(name: str) -> Any:
    if name != "AgentCtxMiddleware":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return _middleware()


@functools.cache
def _middleware() -> Any:
    """The middleware class, or a stand-in naming the extra when langchain (v1 agents) is
    not installed: langchain-core alone runs everything else here."""
    try:
        module = importlib.import_module("agentctx_fast.integrations._langchain_agents")
    except MissingDependencyError as error:
        return stand_in("AgentCtxMiddleware", error)
    return module.AgentCtxMiddleware


# --- windows ----------------------------------------------------------------------------------


def _checked_options(named: Mapping[str, Any]) -> tuple[WindowOptions, Any, Any]:
    """``(options, system, turn_statuses)`` of `build_window` keyword arguments, checked once
    (an unknown name is an `InvalidArgumentError` naming it)."""
    options = checked_window_options(None, named, also=frozenset(("system", "turn_statuses")))
    return options, named.get("system"), named.get("turn_statuses")


def _window_of(
    messages: Sequence[Any], options: WindowOptions, system: Any, turn_statuses: Any
) -> list[lc.BaseMessage]:
    """The window of LangChain ``messages``: the caller's own objects (``system`` too, when
    it is a LangChain message), what the window adds converted."""
    converted = convert(messages, False)
    originals = {id(ours): theirs for ours, theirs in zip(converted, messages, strict=True)}
    if isinstance(system, lc.BaseMessage):
        (ours,) = convert([system], False)
        if not isinstance(ours, SystemMessage):
            raise InvalidArgumentError(
                f"system must be a system message, got a {type(system).__name__}"
            )
        originals[id(ours)] = system
        system = ours
    window = build_window(converted, options, system=system, turn_statuses=turn_statuses)
    out: list[lc.BaseMessage] = []
    for message in window.messages:
        original = originals.get(id(message))
        if original is None:
            out.extend(to_langchain([message]))
        else:
            out.append(original)
    return out


def window_messages(messages: Sequence[Any], **window_options: Any) -> list[lc.BaseMessage]:
    """The model window (`build_window` with ``window_options``) over LangChain messages.

    Messages of the window that came from ``messages`` are the caller's own objects, and so
    is ``system`` when it is a LangChain ``SystemMessage``; a system message made from a
    ``system=`` string and repairs (a synthetic error result for a call left without one) are
    converted with `to_langchain`.
    """
    options, system, turn_statuses = _checked_options(window_options)
    return _window_of(messages, options, system, turn_statuses)


def agentctx_pre_model_hook(
    **window_options: Any,
) -> Callable[[Any], dict[str, list[lc.BaseMessage]]]:
    """A ``pre_model_hook`` for LangGraph's ``create_react_agent``: the model reads the window
    of the state's messages (`window_messages` with ``window_options``), returned as
    ``llm_input_messages`` so the graph's ``messages`` stay complete.

    The agent's ``prompt`` is put before the window by ``create_react_agent`` and is not
    counted in a token limit; give the instructions as ``system=`` here instead to have them
    counted. The options are checked here, once.
    """
    options, system, turn_statuses = _checked_options(window_options)

    def agentctx_window(state: Any) -> dict[str, list[lc.BaseMessage]]:
        messages = (
            state.get("messages")
            if isinstance(state, Mapping)
            else getattr(state, "messages", None)
        )
        if not isinstance(messages, Sequence):
            raise InvalidArgumentError("the graph state has no 'messages' list")
        return {"llm_input_messages": _window_of(messages, options, system, turn_statuses)}

    return agentctx_window


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
        ids = {"message_id": result.id} if result.id else {}
        return _ai_from_langchain(result, ids, "reply", True)
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


class _LangChainModel:
    """What both models hold: the wrapped ``BaseChatModel`` (checked when the model is made)."""

    def __init__(self, chat_model: BaseChatModel) -> None:
        _check_model(chat_model)
        self.chat_model = chat_model

    @property
    def model_name(self) -> str | None:
        """The wrapped model's name, if it has one."""
        # Chat models name their model ``model_name`` (ChatOpenAI) or ``model`` (most others).
        for attribute in ("model_name", "model"):
            name = getattr(self.chat_model, attribute, None)
            if isinstance(name, str) and name:
                return name
        return None


class LangChainChatModel(_LangChainModel):
    """A `ChatModel` over any LangChain ``BaseChatModel``, with the agent's tools bound."""

    def chat(self, messages: Sequence[Message], tools: Sequence[Any]) -> AiMessage:
        """``invoke`` the model on the window; its errors become `ModelCallError`."""
        runnable = _bound(self.chat_model, tools)
        try:
            result = runnable.invoke(to_langchain(messages))
        except Exception as error:
            raise _model_error(error) from error
        return _reply(result)


class AsyncLangChainChatModel(_LangChainModel):
    """An `AsyncChatModel` with ``stream`` over any LangChain ``BaseChatModel``."""

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
