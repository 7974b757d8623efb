"""The window options an integration is made with, checked once, and the turns a window of
them can reach: one rule for all the integrations."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from itertools import islice
from typing import Any

from agentctx_fast.errors import InvalidArgumentError
from agentctx_fast.window import WindowOptions

_FIELDS = frozenset(field.name for field in dataclasses.fields(WindowOptions) if field.init)


def checked_window_options(
    options: WindowOptions | None,
    named: Mapping[str, Any],
    *,
    also: frozenset[str] = frozenset(),
) -> WindowOptions:
    """``options`` (a `WindowOptions`) or the `WindowOptions` made of the keyword arguments
    ``named``, never both. A name that is neither an option nor in ``also`` (what the
    integration takes beside them, e.g. ``system``) is an `InvalidArgumentError` naming it,
    not the constructor's TypeError; the names in ``also`` are left out of the options."""
    if options is not None:
        if named:
            raise InvalidArgumentError("pass either options or window options, not both")
        if type(options) is not WindowOptions:
            raise InvalidArgumentError(
                f"options must be a WindowOptions, got {type(options).__name__}"
            )
        return options
    for name in named:
        if name not in _FIELDS and name not in also:
            raise InvalidArgumentError(
                f"unknown window option {name!r}; the options are "
                f"{', '.join(sorted(_FIELDS | also))}"
            )
    return WindowOptions(**{name: value for name, value in named.items() if name in _FIELDS})


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
