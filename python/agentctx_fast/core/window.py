"""The model window: what one model call sees of a stored conversation."""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from agentctx_fast.core._backend import core
from agentctx_fast.core.messages import AiMessage, Message, SystemMessage, ToolMessage, UserMessage
from agentctx_fast.core.protocol import validate_tool_protocol
from agentctx_fast.core.tokens import TokenEstimator
from agentctx_fast.core.turns import TurnStatus
from agentctx_fast.core.types import (
    Compressor,
    ContextWindow,
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

__all__ = [
    "Compressor",
    "ContextWindow",
    "WindowOptions",
    "build_window",
    "run_compressor",
    "validate_compressor_output",
    "window_reach",
]

MAX_TOKENS = 2**63 - 1
"""The largest count a token estimator may return (both cores sum counts exactly)."""

DEFAULT_OPTIONS = WindowOptions()
_OPTION_NAMES = frozenset(field.name for field in dataclasses.fields(WindowOptions) if field.init)
# The defaults with plain overrides (exact ints, bools, strs or None), made once per distinct
# set: a service passing the same keywords every call checks them once, as with options.
_OVERRIDDEN: dict[tuple[object, ...], WindowOptions] = {}
_PLAIN = frozenset((int, bool, str, type(None)))


def build_window(
    history: Sequence[Message],
    options: WindowOptions | None = None,
    *,
    system: SystemMessage | str | None = None,
    turn_statuses: Mapping[str, TurnStatus] | None = None,
    **overrides: Any,
) -> ContextWindow:
    """Build the window for one model call; ``history`` (oldest first) is never modified.

    ``options`` is a `WindowOptions` (None: the defaults); each keyword in ``overrides`` names
    one of its fields and replaces that value, e.g. ``build_window(history, max_attached_turns=3)``.

    >>> from agentctx_fast import UserMessage, AiMessage
    >>> history = [UserMessage("hi", message_id="u1"), AiMessage("hello", message_id="a1"),
    ...            UserMessage("order ORD-1?", message_id="u2")]
    >>> w = build_window(history, system="Be brief.", max_attached_turns=0)
    >>> [m.message_id for m in w.messages], w.cut_by
    (['system', 'u2'], 'max_attached_turns')
    >>> w = build_window(history, WindowOptions(max_attached_turns=0))
    >>> [m.message_id for m in w.messages]
    ['u2']
    """
    if overrides:
        options = options_with(options, overrides)
    elif options is None:
        options = DEFAULT_OPTIONS
    elif type(options) is not WindowOptions:
        raise InvalidArgumentError(f"options must be a WindowOptions, got {type(options).__name__}")
    return _build(core, history, options, system, turn_statuses)


def window_reach(
    messages: Sequence[Message], options: WindowOptions, *, has_current_turn: bool = True
) -> int | None:
    """Where a window of ``options`` over a whole conversation starts reading, proved from
    ``messages``, the conversation's newest messages (oldest first): the index in ``messages``
    of the user message starting the oldest turn the window can attach, or None when
    ``messages`` do not reach back far enough to tell (read older ones and ask again).

    So a reader going back page by page from the newest message needs only
    ``messages[reach:]``: its window attaches the turns the whole conversation's does (only a
    cut by ``max_attached_turns`` is not seen in its ``cut_by``: ask with one turn more for
    that). ``has_current_turn=False`` says the newest turn of ``messages`` is a history turn
    (the current turn is not stored yet, or ``options.current_turn`` is "none").
    """
    if type(options) is not WindowOptions:
        raise InvalidArgumentError(f"options must be a WindowOptions, got {type(options).__name__}")
    reach: int | None = core.window_reach(messages, options._compiled, has_current_turn)
    return reach


def options_with(options: WindowOptions | None, overrides: Mapping[str, Any]) -> WindowOptions:
    """``options`` (None: the defaults) with ``overrides`` (field names of `WindowOptions`)
    replacing its values: `build_window`'s and the integrations' one rule. An unknown name,
    a bad value or ``options`` not a `WindowOptions` is an `InvalidArgumentError`."""
    if not _OPTION_NAMES.issuperset(overrides):
        name = next(name for name in overrides if name not in _OPTION_NAMES)
        raise InvalidArgumentError(
            f"unknown window option {name!r}; the options are {', '.join(sorted(_OPTION_NAMES))}"
        )
    if options is not None:
        if type(options) is not WindowOptions:
            raise InvalidArgumentError(
                f"options must be a WindowOptions, got {type(options).__name__}"
            )
        return dataclasses.replace(options, **overrides) if overrides else options
    # The key holds the values' types: True and 1 are equal keys, but only one is a limit.
    kinds = tuple(map(type, overrides.values()))
    plain = _PLAIN.issuperset(kinds)
    key = (*overrides.items(), kinds)
    made = _OVERRIDDEN.get(key) if plain else None
    if made is None:
        made = WindowOptions(**overrides)
        if plain and len(_OVERRIDDEN) < 256:
            _OVERRIDDEN[key] = made
    return made


def _build(
    engine: Any,
    messages: Sequence[Message],
    options: WindowOptions,
    system: SystemMessage | str | None,
    turn_statuses: Mapping[str, TurnStatus] | None,
) -> ContextWindow:
    """The window on ``engine`` (the backend's core; tests pass the other one), with the
    options compiled for it."""
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
    ) = engine.select(messages, system, system is None, options._compiled, count, turn_statuses)
    compressor = options.context_compressor
    if compressor is not None and older_count:
        start = 1 if has_system else 0
        replacement = run_compressor(compressor, window[start : start + older_count])
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
        [ProtocolViolation(*v) for v in repairs] if repairs else [],
        (messages, seen_history_turns, unread_end, engine),
    )
    if options.current_turn_tool_results_kept is None:
        return built
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


def run_compressor(compressor: Compressor, older: list[Message]) -> list[Message]:
    """``compressor(older)`` as `build_window` runs it: whatever the compressor raises
    becomes a `CompressionError` (one it raises itself is kept), and its output must pass
    `validate_compressor_output`. The compression coordinator and the runner run compressors
    through it too, so a compressor fails the same way wherever it runs."""
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
