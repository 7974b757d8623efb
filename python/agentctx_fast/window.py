"""The model window (SPEC §5): what one model call sees of a stored conversation."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache, partial
from typing import Any

from agentctx_fast._backend import core, native
from agentctx_fast.errors import (
    AgentCtxError,
    CompressionError,
    CompressorOutputError,
    InvalidArgumentError,
    InvalidMessageTypeError,
)
from agentctx_fast.messages import Message, SystemMessage, UserMessage
from agentctx_fast.protocol import ProtocolViolation, validate_tool_protocol
from agentctx_fast.tokens import DEFAULT_ESTIMATOR, HeuristicTokenEstimator, TokenEstimator
from agentctx_fast.turns import TurnStatus

AgentContextCompressor = Callable[[list[Message]], list[Message]]

# Read once: an enum member lookup costs as much as a tenth of a whole window.
_COMPLETED = TurnStatus.COMPLETED


class ContextWindow:
    """The messages to send for one model call, and how they were chosen.

    ``dropped_turns`` is counted on first access, from the part of the history the window did
    not read, so building a window stays flat in the history's length.
    """

    __slots__ = (
        "_dropped",
        "_engine",
        "_history",
        "_seen_history_turns",
        "_unread_end",
        "attached_turns",
        "compacted_turns",
        "cut_by",
        "estimated_tokens",
        "messages",
        "repairs",
    )

    def __init__(
        self,
        messages: list[Message],
        estimated_tokens: int,
        attached_turns: int,
        compacted_turns: int,
        cut_by: str | None,
        repairs: list[ProtocolViolation],
        history: Sequence[Message],
        seen_history_turns: int,
        unread_end: int,
        engine: Any = None,
    ) -> None:
        self.messages = messages
        self.estimated_tokens = estimated_tokens
        self.attached_turns = attached_turns
        self.compacted_turns = compacted_turns
        self.cut_by = cut_by
        self.repairs = repairs
        self._history = history
        self._seen_history_turns = seen_history_turns
        self._unread_end = unread_end
        self._dropped: int | None = None
        self._engine = core if engine is None else engine

    @property
    def dropped_turns(self) -> int:
        """History turns left out of the window (by a limit or by repair)."""
        if self._dropped is None:
            unread = (
                self._engine.count_turns(self._history, self._unread_end) if self._unread_end else 0
            )
            self._dropped = self._seen_history_turns + unread - self.attached_turns
        return self._dropped

    def __repr__(self) -> str:
        return (
            f"ContextWindow({len(self.messages)} messages, {self.estimated_tokens} tokens, "
            f"attached_turns={self.attached_turns}, compacted_turns={self.compacted_turns}, "
            f"cut_by={self.cut_by!r}, repairs={len(self.repairs)})"
        )


def _limit(name: str, value: object, *, optional: bool = False) -> None:
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgumentError(f"{name} must be an int >= 0, got {value!r}")


def build_window(
    messages: Sequence[Message],
    *,
    system: SystemMessage | str | None = None,
    max_attached_turns: int = 10,
    max_attached_messages: int = 100,
    compact_completed_tool_turns: bool = False,
    compression_keep_recent_turns: int = 2,
    context_compressor: AgentContextCompressor | None = None,
    max_attached_tokens: int | None = None,
    token_estimator: TokenEstimator | None = None,
    turn_statuses: Mapping[str, TurnStatus] | None = None,
) -> ContextWindow:
    """Build the window for one model call; ``messages`` (oldest first) is never modified.

    >>> from agentctx_fast import UserMessage, AiMessage
    >>> history = [UserMessage("hi", message_id="u1"), AiMessage("hello", message_id="a1"),
    ...            UserMessage("order ORD-1?", message_id="u2")]
    >>> w = build_window(history, system="Be brief.", max_attached_turns=0)
    >>> [m.message_id for m in w.messages], w.cut_by
    (['system', 'u2'], 'max_attached_turns')
    """
    return _build(
        messages,
        system,
        max_attached_turns,
        max_attached_messages,
        compact_completed_tool_turns,
        compression_keep_recent_turns,
        context_compressor,
        max_attached_tokens,
        token_estimator,
        turn_statuses,
    )


def build_window_on(
    engine: Any,
    messages: Sequence[Message],
    *,
    system: SystemMessage | str | None = None,
    max_attached_turns: int = 10,
    max_attached_messages: int = 100,
    compact_completed_tool_turns: bool = False,
    compression_keep_recent_turns: int = 2,
    context_compressor: AgentContextCompressor | None = None,
    max_attached_tokens: int | None = None,
    token_estimator: TokenEstimator | None = None,
    turn_statuses: Mapping[str, TurnStatus] | None = None,
) -> ContextWindow:
    """`build_window` on a given core (the Rust module or the reference); for benchmarks."""
    return builder(engine)(
        messages,
        system,
        max_attached_turns,
        max_attached_messages,
        compact_completed_tool_turns,
        compression_keep_recent_turns,
        context_compressor,
        max_attached_tokens,
        token_estimator,
        turn_statuses,
    )


def builder(engine: Any) -> Callable[..., ContextWindow]:
    """`build_window` on ``engine``, taking its arguments by position (in signature order).

    The Rust module builds the common window (plain int limits, no compressor, the default
    estimator) without any Python code and sends every other call to `_build_checked`.
    """
    if engine is native and native is not None:
        return native.build_window  # type: ignore[no-any-return]
    return partial(_build_checked, engine)


def _build_checked(
    engine: Any,
    messages: Sequence[Message],
    system: SystemMessage | str | None,
    max_attached_turns: int,
    max_attached_messages: int,
    compact_completed_tool_turns: bool,
    compression_keep_recent_turns: int,
    context_compressor: AgentContextCompressor | None,
    max_attached_tokens: int | None,
    token_estimator: TokenEstimator | None,
    turn_statuses: Mapping[str, TurnStatus] | None,
) -> ContextWindow:
    """Every option checked, then the window from ``engine.select``."""
    # One cheap test for the common case; the named checks only when something is off.
    if (
        type(max_attached_turns) is not int
        or type(max_attached_messages) is not int
        or type(compression_keep_recent_turns) is not int
        or max_attached_turns < 0
        or max_attached_messages < 0
        or compression_keep_recent_turns < 0
        or max_attached_tokens is not None
    ):
        _limit("max_attached_turns", max_attached_turns)
        _limit("max_attached_messages", max_attached_messages)
        _limit("compression_keep_recent_turns", compression_keep_recent_turns)
        _limit("max_attached_tokens", max_attached_tokens, optional=True)
    if not isinstance(compact_completed_tool_turns, bool):
        raise InvalidArgumentError(
            f"compact_completed_tool_turns must be a bool, got {compact_completed_tool_turns!r}"
        )
    if context_compressor is not None and not callable(context_compressor):
        raise InvalidArgumentError("context_compressor must be callable")
    if turn_statuses is not None and not isinstance(turn_statuses, Mapping):
        raise InvalidArgumentError(
            f"turn_statuses must be a mapping of turn_id to TurnStatus, "
            f"got {type(turn_statuses).__name__}"
        )
    if isinstance(system, str):
        system = _system_message(system)
    elif system is not None and not isinstance(system, SystemMessage):
        raise InvalidMessageTypeError(
            f"system must be a SystemMessage, a str or None, got {type(system).__name__}"
        )
    estimator = DEFAULT_ESTIMATOR if token_estimator is None else token_estimator
    if token_estimator is not None and not callable(getattr(token_estimator, "estimate", None)):
        raise InvalidArgumentError("token_estimator must have an estimate(messages) method")
    native_heuristic = engine is native and type(estimator) is HeuristicTokenEstimator
    (
        window,
        has_system,
        older_count,
        older_tokens,
        tokens,
        attached_turns,
        compacted_turns,
        cut_by,
        repairs,
        seen_history_turns,
        unread_end,
    ) = engine.select(
        messages,
        system,
        system is None,
        max_attached_turns,
        max_attached_messages,
        compact_completed_tool_turns,
        compression_keep_recent_turns,
        max_attached_tokens,
        None if native_heuristic else _checked(estimator),
        turn_statuses,
        _COMPLETED,
    )
    if context_compressor is not None and older_count:
        start = 1 if has_system else 0
        replacement = _compress(context_compressor, window[start : start + older_count])
        window = [*window[:start], *replacement, *window[start + older_count :]]
        if native_heuristic:
            tokens += int(engine.message_tokens(replacement).sum()) - older_tokens
        else:
            tokens += _checked(estimator)(replacement) - older_tokens
    return ContextWindow(
        window,
        tokens,
        attached_turns,
        compacted_turns,
        cut_by,
        [ProtocolViolation(*v) for v in repairs] if repairs else [],
        messages,
        seen_history_turns,
        unread_end,
        engine,
    )


@lru_cache(maxsize=64)
def _system_message(text: str) -> SystemMessage:
    # Agents pass the same instructions every call; one message object keeps its cached core.
    return SystemMessage(text, message_id="system")


def _checked(estimator: TokenEstimator) -> Callable[[Sequence[Message]], int]:
    def estimate(messages: Sequence[Message]) -> int:
        tokens = estimator.estimate(messages)
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
            raise InvalidArgumentError(
                f"token_estimator.estimate must return an int >= 0, got {tokens!r}"
            )
        return tokens

    return estimate


def _compress(compressor: AgentContextCompressor, older: list[Message]) -> list[Message]:
    try:
        output = compressor(list(older))
    except AgentCtxError as error:
        if isinstance(error, CompressionError):
            raise
        raise CompressionError(f"context compressor failed: {error}") from error
    except Exception as error:
        raise CompressionError(
            f"context compressor failed: {type(error).__name__}: {error}"
        ) from error
    return validate_compressor_output(output)


def validate_compressor_output(output: object) -> list[Message]:
    """The compressor's output as a list, or `CompressorOutputError` saying what is wrong.

    It must be a list of model-visible messages starting with a UserMessage, with every tool
    call paired inside its turn. An empty list (nothing kept of the older history) is allowed.
    """
    if not isinstance(output, (list, tuple)):
        raise CompressorOutputError(
            f"context compressor must return a list of messages, got {type(output).__name__}"
        )
    for index, message in enumerate(output):
        if not isinstance(message, Message):
            raise CompressorOutputError(
                f"context compressor output[{index}] is not a Message: {type(message).__name__}"
            )
        if not message.model_visible:
            raise CompressorOutputError(
                f"context compressor output holds UI message {message.message_id!r}"
            )
    if output and not isinstance(output[0], UserMessage):
        raise CompressorOutputError(
            f"context compressor output must start with a UserMessage, got "
            f"{type(output[0]).__name__} {output[0].message_id!r}"
        )
    violations = validate_tool_protocol(list(output))
    if violations:
        first = violations[0]
        raise CompressorOutputError(
            f"context compressor output breaks the tool protocol: {first.kind} at message "
            f"{first.message_id!r} (tool_call_id {first.tool_call_id!r})"
        )
    return list(output)


# The entry `build_window` calls, bound to the selected core once.
_build = builder(core)
