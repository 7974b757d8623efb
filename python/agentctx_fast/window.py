"""The model window: what one model call sees of a stored conversation."""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from agentctx_fast._backend import core, native
from agentctx_fast._core_types import (
    AgentContextCompressor,
    ContextWindow,
    CurrentTurn,
    ProtocolViolation,
    WindowOptions,
    new_window,
)
from agentctx_fast.errors import (
    AgentCtxError,
    CompressionError,
    CompressorOutputError,
    InvalidArgumentError,
    InvalidMessageTypeError,
)
from agentctx_fast.messages import AiMessage, Message, SystemMessage, ToolMessage, UserMessage
from agentctx_fast.protocol import validate_tool_protocol
from agentctx_fast.tokens import TokenEstimator
from agentctx_fast.turns import TurnStatus

__all__ = [
    "AgentContextCompressor",
    "ContextWindow",
    "WindowOptions",
    "build_window",
    "build_window_on",
    "build_window_with",
    "validate_compressor_output",
]

MAX_TOKENS = 2**63 - 1
"""The largest count a token estimator may return (both cores sum counts exactly)."""

DEFAULT_OPTIONS = WindowOptions()
_window = core.window
# Options made from plain arguments (exact ints and bools, no compressor or estimator), kept
# so a service calling `build_window` with the same limits checks them once.
_PLAIN_OPTIONS: dict[tuple[int, int, bool, int, int | None, str], WindowOptions] = {}
_last_plain: tuple[tuple[object, ...], WindowOptions] = (
    (10, 100, False, 2, None, "last"),
    DEFAULT_OPTIONS,
)


def _plain_options(
    max_attached_turns: object,
    max_attached_messages: object,
    compact_completed_tool_turns: object,
    compression_keep_recent_turns: object,
    max_attached_tokens: object,
    current_turn: object,
) -> WindowOptions | None:
    """The options of plain arguments (exact ints >= 0, a bool and an exact `current_turn`
    str), made once per distinct limits; None for any other argument (the caller checks it
    in full)."""
    global _last_plain
    if not (
        type(max_attached_turns) is int
        and type(max_attached_messages) is int
        and type(compression_keep_recent_turns) is int
        and (max_attached_tokens is None or type(max_attached_tokens) is int)
        and (compact_completed_tool_turns is True or compact_completed_tool_turns is False)
        and type(current_turn) is str
    ):
        return None
    key = (
        max_attached_turns,
        max_attached_messages,
        compact_completed_tool_turns,
        compression_keep_recent_turns,
        max_attached_tokens,
        current_turn,
    )
    options = _PLAIN_OPTIONS.get(key)
    if options is None:
        options = WindowOptions(
            *key[:4], None, max_attached_tokens, current_turn=current_turn  # type: ignore[arg-type]
        )
        if len(_PLAIN_OPTIONS) < 256:
            _PLAIN_OPTIONS[key] = options
    _last_plain = (key, options)
    return options


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
    current_turn: CurrentTurn = "last",
    current_turn_tool_results_kept: int | None = None,
) -> ContextWindow:
    """Build the window for one model call; ``messages`` (oldest first) is never modified.

    >>> from agentctx_fast import UserMessage, AiMessage
    >>> history = [UserMessage("hi", message_id="u1"), AiMessage("hello", message_id="a1"),
    ...            UserMessage("order ORD-1?", message_id="u2")]
    >>> w = build_window(history, system="Be brief.", max_attached_turns=0)
    >>> [m.message_id for m in w.messages], w.cut_by
    (['system', 'u2'], 'max_attached_turns')
    """
    options: WindowOptions | None = None
    if (
        context_compressor is None
        and token_estimator is None
        and current_turn_tool_results_kept is None
    ):
        # A service passes the same limit objects every call: the last plain ones are reused
        # when every argument is the very same object (no hashing, no type checks).
        seen, options = _last_plain
        if not (
            max_attached_turns is seen[0]
            and max_attached_messages is seen[1]
            and compact_completed_tool_turns is seen[2]
            and compression_keep_recent_turns is seen[3]
            and max_attached_tokens is seen[4]
            and current_turn is seen[5]
        ):
            options = _plain_options(
                max_attached_turns,
                max_attached_messages,
                compact_completed_tool_turns,
                compression_keep_recent_turns,
                max_attached_tokens,
                current_turn,
            )
        # The common call goes straight to the core; `_build` checks the rest the same way.
        if options is not None and (turn_statuses is None or type(turn_statuses) is dict):
            if system is None or type(system) is SystemMessage:
                return _window(messages, system, options._limits, turn_statuses)  # type: ignore[no-any-return]
            if type(system) is str:
                return _window(  # type: ignore[no-any-return]
                    messages, _system_message(system), options._limits, turn_statuses
                )
    if options is None:
        options = WindowOptions(
            max_attached_turns,
            max_attached_messages,
            compact_completed_tool_turns,
            compression_keep_recent_turns,
            context_compressor,
            max_attached_tokens,
            token_estimator,
            current_turn,
            current_turn_tool_results_kept,
        )
    return _build(core, messages, options, system, turn_statuses)


def build_window_with(
    messages: Sequence[Message],
    options: WindowOptions,
    *,
    system: SystemMessage | str | None = None,
    turn_statuses: Mapping[str, TurnStatus] | None = None,
) -> ContextWindow:
    """`build_window` with options checked once, e.g. an `Agent`'s ``window_options``.

    >>> from agentctx_fast import UserMessage
    >>> options = WindowOptions(max_attached_turns=0)
    >>> build_window_with([UserMessage("hi", message_id="u1")], options).attached_turns
    0
    """
    if type(options) is not WindowOptions:
        raise InvalidArgumentError(f"options must be a WindowOptions, got {type(options).__name__}")
    return _build(core, messages, options, system, turn_statuses)


def build_window_on(
    engine: Any,
    messages: Sequence[Message],
    *,
    system: SystemMessage | str | None = None,
    turn_statuses: Mapping[str, TurnStatus] | None = None,
    **options: Any,
) -> ContextWindow:
    """`build_window` on a given core (the Rust module or the reference); for tests and
    benchmarks that compare the two in one process."""
    return _build(engine, messages, WindowOptions(**options), system, turn_statuses)


def _build(
    engine: Any,
    messages: Sequence[Message],
    options: WindowOptions,
    system: SystemMessage | str | None,
    turn_statuses: Mapping[str, TurnStatus] | None,
) -> ContextWindow:
    if turn_statuses is not None and not isinstance(turn_statuses, Mapping):
        raise InvalidArgumentError(
            f"turn_statuses must be a mapping of turn_id to TurnStatus, "
            f"got {type(turn_statuses).__name__}"
        )
    if isinstance(system, str):
        system = _system_message(str.__str__(system))
    elif system is not None and not isinstance(system, SystemMessage):
        raise InvalidMessageTypeError(
            f"system must be a SystemMessage, a str or None, got {type(system).__name__}"
        )
    estimator = options.token_estimator
    count = None if estimator is None else _checked(estimator)
    if options.context_compressor is None and estimator is None:
        whole: ContextWindow = engine.window(messages, system, options._limits, turn_statuses)
        return _results_left_out(engine, whole, options, count)
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
    ) = engine.select(messages, system, system is None, options._limits, count, turn_statuses)
    compressor = options.context_compressor
    if compressor is not None and older_count:
        start = 1 if has_system else 0
        replacement = _compress(compressor, window[start : start + older_count])
        window = [*window[:start], *replacement, *window[start + older_count :]]
        if count is None:
            tokens += sum(engine.message_tokens(replacement)) - older_tokens
        else:
            tokens += count(replacement) - older_tokens
    built = new_window(
        window,
        tokens,
        attached_turns,
        compacted_turns,
        cut_by,
        [ProtocolViolation(*v) for v in repairs],
        (messages, seen_history_turns, unread_end, engine),
    )
    return _results_left_out(engine, built, options, count)


def _results_left_out(
    engine: Any,
    window: ContextWindow,
    options: WindowOptions,
    count: Callable[[Sequence[Message]], int] | None,
) -> ContextWindow:
    """``window`` with the current turn's older tool results left out, when
    ``current_turn_tool_results_kept`` is set and the window is over ``max_attached_tokens``.

    Over the budget, the window holds no history turn (a history turn is attached only if it
    fits), so it is the system message (if any) and the current turn. Every tool result of
    the current turn but the newest ``kept`` becomes a placeholder `ToolMessage` with the same
    ``message_id`` and ``tool_call_id`` (so each call keeps its result); the tokens are those
    of the window sent. One implementation for both cores, so both give the same window.
    """
    kept = options.current_turn_tool_results_kept
    budget = options.max_attached_tokens
    if kept is None or budget is None or window.estimated_tokens <= budget:
        return window
    if options.current_turn != "last":
        return window  # every turn is history: the limits have left turns out instead
    messages = window.messages
    results = _results(messages)
    replaced = results[: max(len(results) - kept, 0)]
    if not replaced:
        return window
    originals = [message for _, message, _ in replaced]
    placeholders = [_placeholder(message, tool) for _, message, tool in replaced]
    if count is None:
        tokens = sum(engine.message_tokens(placeholders)) - sum(engine.message_tokens(originals))
    else:
        tokens = count(placeholders) - count(originals)
    new_messages = list(messages)
    for (index, _, _), placeholder in zip(replaced, placeholders, strict=True):
        new_messages[index] = placeholder
    return new_window(
        new_messages,
        window.estimated_tokens + tokens,
        window.attached_turns,
        window.compacted_turns,
        window.cut_by,
        window.repairs,
        window._unread,
    )


RESULT_LEFT_OUT = (
    "[tool result left out of this window: call {call_id}, tool {tool}, {size} characters]"
)
"""The text of a placeholder for a tool result left out."""


def _is_synthetic(message: ToolMessage) -> bool:
    """A result the window made to close a call left without one."""
    return message.message_id == f"{message.tool_call_id}:missing" and message.is_error


def _results(messages: Sequence[Message]) -> list[tuple[int, ToolMessage, str]]:
    """The window's tool results (synthetic ones aside) with their places and the name of the
    call each answers: the latest call of its id before it (models reuse ids per step)."""
    names: dict[str, str] = {}
    results: list[tuple[int, ToolMessage, str]] = []
    for index, message in enumerate(messages):
        if isinstance(message, AiMessage):
            names.update((call.id, call.name) for call in message.tool_calls)
        elif isinstance(message, ToolMessage) and not _is_synthetic(message):
            tool = message.tool_name or names.get(message.tool_call_id, "unknown")
            results.append((index, message, tool))
    return results


def _placeholder(result: ToolMessage, tool: str) -> ToolMessage:
    """The placeholder standing for ``result`` in the window (the stored one is untouched)."""
    return ToolMessage(
        result.tool_call_id,
        RESULT_LEFT_OUT.format(call_id=result.tool_call_id, tool=tool, size=len(result.text)),
        tool_name=result.tool_name,
        is_error=result.is_error,
        message_id=result.message_id,
        metadata=result.metadata,
        version=result.version,
        turn_id=result.turn_id,
    )


@lru_cache(maxsize=64)
def _system_message(text: str) -> SystemMessage:
    # Agents pass the same instructions every call; one message object keeps its cached core.
    return SystemMessage(text, message_id="system")


def _checked(estimator: TokenEstimator) -> Callable[[Sequence[Message]], int]:
    def estimate(messages: Sequence[Message]) -> int:
        tokens = estimator.estimate(messages)
        if isinstance(tokens, bool) or not isinstance(tokens, int):
            raise InvalidArgumentError(
                f"token_estimator.estimate must return an int from 0 to 2**63 - 1, got {tokens!r}"
            )
        plain = operator.index(tokens)  # an int subclass's own arithmetic never runs
        if plain < 0 or plain > MAX_TOKENS:
            raise InvalidArgumentError(
                f"token_estimator.estimate must return an int from 0 to 2**63 - 1, got {tokens!r}"
            )
        return plain

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


_python_build_window = build_window
"""`build_window` in Python: the Python backend's entry, and the native entry's for every call
off its plain path (so errors are this function's, with its own argument checks)."""

if native is not None:
    native.register_build_window(_python_build_window, _system_message)
    if core is native:
        # The plain call (see `_plain_options`) is built without Python code; the native
        # function has this signature and docstring (tests/test_window_entry.py checks both).
        build_window = native.build_window


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
