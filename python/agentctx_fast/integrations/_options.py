"""The window options an integration is made with, checked once: one rule for all of them."""

from __future__ import annotations

from collections.abc import Mapping
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
