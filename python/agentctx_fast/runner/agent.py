"""`Agent` (a model, its instructions, tools and window options) and `AgentTurn`."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields

from agentctx_fast.compression.coordinator import CompressionTrigger
from agentctx_fast.core.messages import AiMessage, Message
from agentctx_fast.core.tokens import TokenEstimator, encoding_for_model, estimator_for_model
from agentctx_fast.core.turns import TurnStatus
from agentctx_fast.core.window import Compressor, WindowOptions
from agentctx_fast.errors import InvalidArgumentError
from agentctx_fast.models.protocol import AsyncChatModel, ChatModel
from agentctx_fast.runner.tools import Tool
from agentctx_fast.stores.turn_store import PendingApproval

COMPRESSION_ERROR_POLICIES = ("fail", "uncompressed")
_DEFAULTS = WindowOptions()  # the window options' defaults, declared by WindowOptions only
# The window options an agent passes on as they are (its windows always have a current turn;
# its estimator defaults to its model's).
_WINDOW_OPTIONS = tuple(
    option.name
    for option in fields(WindowOptions)
    if option.init and option.name not in ("current_turn", "token_estimator")
)


@dataclass(frozen=True, slots=True)
class Agent:
    """A model, its instructions and tools, and the window options for every model call.

    ``chat_model`` is a `ChatModel` or an `AsyncChatModel`: `AsyncAgentRunner` runs both,
    `AgentRunner` only the blocking one (it refuses the other before writing anything).

    With a ``compression_trigger`` (and a ``context_compressor``) the runner keeps the older
    history's summary in the store's compression state, compressing only when the trigger
    fires. ``on_compression_error="uncompressed"`` lets a model call go ahead
    without compression when the compressor fails; ``"fail"`` ends the turn `FAILED`.

    Without a ``token_estimator``, a ``chat_model`` that names its model (``model_name``, as the
    client adapters do) has its windows counted exactly, with `estimator_for_model`:
    token budgets are budgets for that model. Any other model is counted by the heuristic.

    ``tool_error_formatter(error)`` makes the text the model sees when a tool raises (default:
    ``"tool NAME failed: CLASS: MESSAGE"``): a service redacts there what an exception's message
    may hold (a password, a host name). The exception itself is logged, not sent.
    ``current_turn_tool_results_kept`` (with ``max_attached_tokens``) bounds a long tool loop
    within one turn: over the budget, the turn's older tool results are sent as placeholders
    (see `WindowOptions`). The runner's window always has a current turn (the running one),
    so an agent has no ``current_turn`` option.
    """

    name: str
    chat_model: ChatModel | AsyncChatModel
    instructions: str | None = None
    tools: Sequence[Tool] = ()
    max_attached_turns: int = _DEFAULTS.max_attached_turns
    max_attached_messages: int = _DEFAULTS.max_attached_messages
    compact_completed_tool_turns: bool = _DEFAULTS.compact_completed_tool_turns
    compression_keep_recent_turns: int = _DEFAULTS.compression_keep_recent_turns
    context_compressor: Compressor | None = _DEFAULTS.context_compressor
    max_attached_tokens: int | None = _DEFAULTS.max_attached_tokens
    token_estimator: TokenEstimator | None = _DEFAULTS.token_estimator
    max_steps: int = 16
    compression_trigger: CompressionTrigger | None = None
    on_compression_error: str = "fail"
    tool_error_formatter: Callable[[Exception], str] | None = None
    current_turn_tool_results_kept: int | None = _DEFAULTS.current_turn_tool_results_kept
    _tools_by_name: Mapping[str, Tool] = field(default_factory=dict, init=False, repr=False)
    _window_options: WindowOptions = field(default=_DEFAULTS, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InvalidArgumentError(f"agent name must be a non-empty str, got {self.name!r}")
        if not callable(getattr(self.chat_model, "chat", None)):
            raise InvalidArgumentError(f"agent {self.name!r}: chat_model needs a chat() method")
        if self.instructions is not None and not isinstance(self.instructions, str):
            raise InvalidArgumentError(f"agent {self.name!r}: instructions must be a str or None")
        tools = tuple(self.tools)
        for tool in tools:
            if not isinstance(tool, Tool):
                raise InvalidArgumentError(
                    f"agent {self.name!r}: tools must be Tool objects, got {type(tool).__name__}"
                )
        by_name = {tool.name: tool for tool in tools}
        if len(by_name) != len(tools):
            raise InvalidArgumentError(f"agent {self.name!r}: two tools share a name")
        object.__setattr__(self, "tools", tools)
        object.__setattr__(self, "_tools_by_name", by_name)
        options = WindowOptions(
            **{name: getattr(self, name) for name in _WINDOW_OPTIONS},
            token_estimator=(
                _model_estimator(self.chat_model)
                if self.token_estimator is None
                else self.token_estimator
            ),
        )
        object.__setattr__(self, "_window_options", options)
        if self.compression_trigger is not None:
            if not callable(self.compression_trigger):
                raise InvalidArgumentError("compression_trigger must be callable")
            if self.context_compressor is None:
                raise InvalidArgumentError(
                    "compression_trigger needs a context_compressor to run when it fires"
                )
        if self.on_compression_error not in COMPRESSION_ERROR_POLICIES:
            raise InvalidArgumentError(
                f"on_compression_error must be 'fail' or 'uncompressed', "
                f"got {self.on_compression_error!r}"
            )
        formatter = self.tool_error_formatter
        if formatter is not None and not callable(formatter):
            raise InvalidArgumentError(
                f"agent {self.name!r}: tool_error_formatter must be callable"
            )
        steps = self.max_steps
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise InvalidArgumentError(f"max_steps must be an int >= 1, got {steps!r}")

    @property
    def window_options(self) -> WindowOptions:
        """The agent's window options, checked once (see `build_window`)."""
        return self._window_options

    def tool(self, name: str) -> Tool | None:
        """The tool called ``name``, or None."""
        return self._tools_by_name.get(name)


def _model_estimator(chat_model: object) -> TokenEstimator | None:
    """The exact estimator of the model ``chat_model`` names, or None (the core's heuristic)
    when it names none or a model of an unknown vocabulary."""
    name = getattr(chat_model, "model_name", None)
    if not isinstance(name, str) or encoding_for_model(name) is None:
        return None
    return _estimator_of(str.__str__(name))


@functools.lru_cache(maxsize=64)
def _estimator_of(model_name: str) -> TokenEstimator:
    # One estimator (and its per-message cache) per model, shared by the agents of that model.
    return estimator_for_model(model_name)


@dataclass(frozen=True, slots=True)
class AgentTurn:
    """What one turn did: its messages (UI forms included), final answer or error.

    ``exception``: for a turn that failed in this call on an exception (a model's, a
    compressor's), that exception, e.g. a `ModelCallError` with its ``status_code``; it is not
    stored (``error`` is the stored text), so a turn read back has none.
    """

    turn_id: str
    conversation_id: str | None
    status: TurnStatus
    messages: tuple[Message, ...] = ()
    final_message: AiMessage | None = None
    error: str | None = None
    pending_approvals: tuple[PendingApproval, ...] = ()
    step_count: int = 0
    exception: BaseException | None = field(default=None, compare=False, repr=False)
