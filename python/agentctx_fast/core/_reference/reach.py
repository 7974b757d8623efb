"""How far back a window reaches (SPEC §5): where `window.select`'s backward scan stops
reading, proved from a tail of a history. A reader that pages a history from its newest message
back (the runner, a memory's window) stops once the tail it holds proves the reach, and builds
the window of the tail from there: the window the whole history gives.
The same algorithm, step for step, as `rust/reach.rs`.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentctx_fast.core._reference.protocol import Violation
from agentctx_fast.core._reference.turns import (
    History,
    has_tool_calls,
    turns_backward,
    visible_turn,
)
from agentctx_fast.core._reference.window import UNCHECKED, CoreOptions, turn_violations
from agentctx_fast.core.messages import KIND_AI
from agentctx_fast.errors import InvalidArgumentError


def window_reach(
    messages: Sequence[object], options: CoreOptions, has_current_turn: bool
) -> int | None:
    """The index in ``messages`` (the newest messages of a history) where the reach of the
    window of ``options`` (a `WindowOptions`' compiled form) starts, with ``has_current_turn``
    for its current turn, or None when the window may read further back than ``messages``
    holds.

    The window reads turns newest first, the current turn and then history turns, until a
    history turn is cut: the ``max_attached_turns + 1``-th, or the first whose view does not fit
    ``max_attached_messages`` beside the views before it. The reach is the start of the oldest
    turn the window may attach when the cut is by ``max_attached_turns`` (once ``messages``
    shows an older turn), and the start of the turn that does not fit when it is by
    ``max_attached_messages``. So a window of ``messages[reach:]`` attaches the same turns as the
    window of any history ``messages`` is the tail of, with any turn statuses and any token
    budget or estimator (a budget only cuts sooner); its ``cut_by`` is the same but for a cut by
    ``max_attached_turns``, which it does not see (a reader that needs it asks for one turn
    more). The views count the least the window may attach: the current turn's messages with
    orphan results left out and missing results closed, as the window keeps it; for a history
    turn the same, or 0 if the window leaves it out (a repeated call id), or at most 2 if it can
    be compacted (its recorded status, which ``messages`` does not hold, may say completed).

    A turn's view counts only once ``messages`` proves that the turn starts where it seems to
    (see `_starts_here`): the oldest turn of ``messages`` may begin earlier.
    """
    if type(options) is not CoreOptions:
        raise InvalidArgumentError(UNCHECKED)
    if has_current_turn is not True and has_current_turn is not False:
        raise InvalidArgumentError(
            f"window_reach has_current_turn must be a bool, got {has_current_turn!r}"
        )
    max_turns, max_messages, compact, keep_recent, _, _ = options
    has_current = has_current_turn
    history = History(messages)
    turns = turns_backward(history)
    total = 0  # the least number of messages of the views read
    attachable = history.len  # the start of the oldest turn the window may attach
    if has_current:
        # (The turn may begin earlier only if it is the oldest: then no history turn follows.)
        bounds = next(turns, None)
        if bounds is None:
            return None
        attachable = bounds[0]
        turn = visible_turn(history, *bounds)
        total = _view_len(len(turn), turn_violations(turn, is_current=True))
    seen = 0
    for start, end in turns:
        seen += 1
        if seen > max_turns:
            return attachable
        if not _starts_here(history, start):
            return None
        turn = visible_turn(history, start, end)
        violations = turn_violations(turn, is_current=False)
        left_out = any(v[0] == "duplicate_call_id" for _, _, v in violations)
        least = 0 if left_out else _view_len(len(turn), violations)
        last = turn[-1][2]
        if (
            compact
            and seen > keep_recent
            and has_tool_calls(turn)
            and last.kind == KIND_AI
            and last.final_text
        ):
            least = min(least, 2)
        if total + least > max_messages:
            return start
        total += least
        attachable = start
    return None


def _starts_here(history: History, start: int) -> bool:
    """Whether the turn whose user message is at ``start`` starts there in any history
    ``messages`` is the tail of: the model-visible message before it is in ``messages`` and
    does not continue it (SPEC §4: a user message continues the turn of the previous
    model-visible message when both carry the same turn id)."""
    turn_id = history.view(start).turn_id
    for index in range(start - 1, -1, -1):
        previous = history.view(index)
        if previous.visible:
            return turn_id is None or previous.turn_id != turn_id
    return False


def _view_len(length: int, violations: list[tuple[int, int, Violation]]) -> int:
    """Messages of the view of a turn of ``length`` model-visible messages that the window
    repairs: each orphan result left out, a synthetic result per missing one."""
    for _, _, (kind, _, _) in violations:
        if kind == "orphan_result":
            length -= 1
        elif kind == "missing_result":
            length += 1
    return length
