"""`AgentCtxMiddleware`: the window for LangChain v1 agents (``langchain.agents``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, cast

from agentctx_fast._extras import missing_dependency
from agentctx_fast.errors import InvalidArgumentError
from agentctx_fast.integrations.langchain import _checked_options, _window_of

try:
    from langchain.agents.middleware import AgentMiddleware, ModelRequest
except ImportError as error:
    raise missing_dependency("langchain", error) from error


class AgentCtxMiddleware(AgentMiddleware):
    """Sends every model call of a ``create_agent`` agent the window of the state's messages
    (`window_messages` with ``window_options``, checked here once) and never changes the
    graph's state: ``state["messages"]`` stays complete, checkpointed as it is.

    The agent's system prompt stays the request's system message; it is counted in a
    ``max_attached_tokens`` limit. ``system=`` is refused: give the instructions to
    ``create_agent(system_prompt=...)``.
    """

    def __init__(self, **window_options: Any) -> None:
        super().__init__()
        if "system" in window_options:
            raise InvalidArgumentError(
                "AgentCtxMiddleware keeps the agent's system prompt; give it to "
                "create_agent(system_prompt=...), not system="
            )
        self._options, _, self._turn_statuses = _checked_options(window_options)

    def _windowed(self, request: ModelRequest) -> ModelRequest:
        system = request.system_message
        window = _window_of(request.messages, self._options, system, self._turn_statuses)
        if system is not None and window and window[0] is system:
            window = window[1:]  # the request puts its system message first itself
        return request.override(messages=cast("list[Any]", window))

    def wrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], Any],
    ) -> Any:
        """Calls the model on the window."""
        return handler(self._windowed(request))

    async def awrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], Awaitable[Any]],
    ) -> Any:
        """Calls the model on the window."""
        return await handler(self._windowed(request))
