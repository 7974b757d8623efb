"""The window options an integration is made with, checked once, and the turns a window of
them can reach: one rule for all the integrations."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from itertools import islice
from typing import Any

from agentctx_fast.core.window import WindowOptions, options_with
from agentctx_fast.errors import InvalidArgumentError


def checked_window_options(
    options: WindowOptions | None,
    named: Mapping[str, Any],
    *,
    also: frozenset[str] = frozenset(),
) -> WindowOptions:
    """``options`` (a `WindowOptions`) or the `WindowOptions` made of the keyword arguments
    ``named``, never both; the names in ``also`` (what the integration takes beside them, e.g.
    ``system``) are left out. Any other name that is not an option is an
    `InvalidArgumentError` naming it (`options_with`, as `build_window`'s overrides)."""
    if options is not None and named:
        raise InvalidArgumentError("pass either options or window options, not both")
    return options_with(options, {name: v for name, v in named.items() if name not in also})


def turns_reach(starts: Iterable[int], options: WindowOptions) -> int:
    """Where the turns a window of ``options`` can attach begin, given where turns start, newest
    first: the start of the ``max_attached_turns``-th history turn back (of the current turn's
    too with ``current_turn="last"``), or 0 when there are not that many. An integration reads
    only its items from there on (and those before the first turn, where the leading system
    prompt is), as the runner reads only a store's tail: the window never attaches a turn
    before it. (`window_reach` proves a tighter reach from messages; a framework's items are
    not messages until they are read, and reading them is what this saves.)"""
    turns = options.max_attached_turns + (options.current_turn == "last")
    return next(islice(starts, turns - 1, None), 0) if turns else 0
