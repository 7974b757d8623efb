"""The values both cores take and return: window options, turn statuses, protocol violations
and the window itself.

This module imports no core at its top, so the Rust extension can import it (and capture
`TurnStatus`) while it is being imported itself: its one-time setup happens then, never later
inside a call where Python code could re-enter it.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal

from agentctx_fast.errors import InvalidArgumentError

if TYPE_CHECKING:
    from agentctx_fast.core.messages import Message
    from agentctx_fast.core.tokens import TokenEstimator

Compressor = Callable[[list["Message"]], list["Message"]]
ViolationKind = Literal["orphan_result", "duplicate_call_id", "missing_result"]


class TurnStatus(StrEnum):
    """Lifecycle of a turn."""

    RUNNING = "running"
    SUSPENDED = "suspended"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class ProtocolViolation:
    """One break of the tool-call protocol, reported on ``message_id``."""

    kind: ViolationKind
    message_id: str
    tool_call_id: str


def _limit(name: str, value: object) -> int:
    """``value`` as a plain int, or `InvalidArgumentError` unless it is an int >= 0."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"{name} must be an int >= 0, got {value!r}")
    plain = operator.index(value)  # an int subclass's own comparisons never run
    if plain < 0:
        raise InvalidArgumentError(f"{name} must be an int >= 0, got {value!r}")
    return plain


CurrentTurn = Literal["last", "none"]
CURRENT_TURNS = ("last", "none")


def _current_turn(value: object) -> CurrentTurn:
    """``value`` as one of `CURRENT_TURNS` (an exact str), or `InvalidArgumentError`."""
    plain = str.__str__(value) if isinstance(value, str) else None
    if plain == "last":
        return "last"
    if plain == "none":
        return "none"
    raise InvalidArgumentError(f"current_turn must be 'last' or 'none', got {value!r}")


@dataclass(frozen=True, slots=True)
class WindowOptions:
    """The window options of `build_window`, checked once: `build_window`, `Agent`, the
    integrations and the CLI take this value and its defaults, declared here only.

    ``current_turn="none"`` treats every turn as history (a finished conversation;
    no user message gives an empty window). ``current_turn_tool_results_kept=N`` sends the
    current turn's tool results but the newest N as placeholders when the window is over
    ``max_attached_tokens`` (see docs/windows.md).

    >>> WindowOptions(max_attached_turns=3).max_attached_messages
    100
    >>> WindowOptions(max_attached_turns=-1)
    Traceback (most recent call last):
    ...
    agentctx_fast.errors.InvalidArgumentError: max_attached_turns must be an int >= 0, got -1
    """

    max_attached_turns: int = 10
    max_attached_messages: int = 100
    compact_completed_tool_turns: bool = False
    compression_keep_recent_turns: int = 2
    context_compressor: Compressor | None = None
    max_attached_tokens: int | None = None
    token_estimator: TokenEstimator | None = None
    current_turn: CurrentTurn = "last"
    current_turn_tool_results_kept: int | None = None
    # The limits compiled into the backend core's immutable `CoreOptions`, which `window.py`
    # hands to the core; the compressor, the estimator and
    # `current_turn_tool_results_kept` are applied above the cores (window.py).
    _compiled: object = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        checked = {
            "max_attached_turns": _limit("max_attached_turns", self.max_attached_turns),
            "max_attached_messages": _limit("max_attached_messages", self.max_attached_messages),
            "compression_keep_recent_turns": _limit(
                "compression_keep_recent_turns", self.compression_keep_recent_turns
            ),
        }
        if self.max_attached_tokens is not None:
            checked["max_attached_tokens"] = _limit("max_attached_tokens", self.max_attached_tokens)
        if self.current_turn_tool_results_kept is not None:
            checked["current_turn_tool_results_kept"] = _limit(
                "current_turn_tool_results_kept", self.current_turn_tool_results_kept
            )
        for name, value in checked.items():
            object.__setattr__(self, name, value)
        current_turn = _current_turn(self.current_turn)
        object.__setattr__(self, "current_turn", current_turn)
        compact = self.compact_completed_tool_turns
        if compact is not True and compact is not False:
            raise InvalidArgumentError(
                f"compact_completed_tool_turns must be a bool, got {compact!r}"
            )
        if self.context_compressor is not None and not callable(self.context_compressor):
            raise InvalidArgumentError("context_compressor must be callable")
        estimator = self.token_estimator
        if estimator is not None and not callable(getattr(estimator, "estimate", None)):
            raise InvalidArgumentError("token_estimator must have an estimate(messages) method")
        # Imported here: a core imports this module while it is imported itself.
        from agentctx_fast.core._backend import core

        compiled = core.CoreOptions(
            self.max_attached_turns,
            self.max_attached_messages,
            compact,
            self.compression_keep_recent_turns,
            self.max_attached_tokens,
            current_turn,
        )
        object.__setattr__(self, "_compiled", compiled)

    @property
    def plain(self) -> bool:
        """True when a core can build the whole window: no compressor, the default estimator."""
        return (
            self.context_compressor is None
            and self.token_estimator is None
            and self.current_turn_tool_results_kept is None
        )


class ContextWindow:
    """The messages to send for one model call, and how they were chosen.

    Made by `build_window` (`new_window`). ``dropped_turns`` is counted on first access, from the
    part of the history the window did not read, so building a window stays flat in the
    history's length.
    """

    __slots__ = (
        "_dropped",
        "_unread",
        "attached_turns",
        "compacted_turns",
        "cut_by",
        "estimated_tokens",
        "messages",
        "repairs",
    )

    messages: list[Message]
    estimated_tokens: int
    attached_turns: int
    compacted_turns: int
    cut_by: str | None
    repairs: list[ProtocolViolation]
    # (history, history turns the window read, end of the unread prefix, core): what
    # `dropped_turns` counts from.
    _unread: tuple[Sequence[Message], int, int, Any]
    _dropped: int  # set on first access of dropped_turns

    @property
    def dropped_turns(self) -> int:
        """History turns left out of the window (by a limit or by repair)."""
        try:
            return self._dropped
        except AttributeError:
            pass
        history, seen_history_turns, unread_end, engine = self._unread
        unread = engine.count_turns(history, unread_end) if unread_end else 0
        self._dropped = seen_history_turns + unread - self.attached_turns
        return self._dropped

    def __repr__(self) -> str:
        return (
            f"ContextWindow({len(self.messages)} messages, {self.estimated_tokens} tokens, "
            f"attached_turns={self.attached_turns}, compacted_turns={self.compacted_turns}, "
            f"cut_by={self.cut_by!r}, repairs={len(self.repairs)})"
        )


def new_window(
    messages: list[Message],
    estimated_tokens: int,
    attached_turns: int,
    compacted_turns: int,
    cut_by: str | None,
    repairs: list[ProtocolViolation],
    unread: tuple[Sequence[Message], int, int, Any],
) -> ContextWindow:
    """A `ContextWindow` of these values (``unread``: what ``dropped_turns`` counts from)."""
    window = object.__new__(ContextWindow)
    window.messages, window.estimated_tokens, window.cut_by = messages, estimated_tokens, cut_by
    window.attached_turns, window.compacted_turns = attached_turns, compacted_turns
    window.repairs, window._unread = repairs, unread
    return window
