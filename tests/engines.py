"""The window on a given core (the Rust module or the reference), for tests and benchmarks
that compare the two in one process; `build_window` itself runs on the backend in use."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from agentctx_fast.core import window as window_module
from agentctx_fast.core.messages import Message
from agentctx_fast.core.window import ContextWindow, WindowOptions


def compiled(engine: Any, options: WindowOptions) -> Any:
    """``options``' limits in ``engine``'s form (its ``CoreOptions``)."""
    return engine.CoreOptions(
        options.max_attached_turns,
        options.max_attached_messages,
        options.compact_completed_tool_turns,
        options.compression_keep_recent_turns,
        options.max_attached_tokens,
        options.current_turn,
    )


def options_on(engine: Any, **named: Any) -> WindowOptions:
    """``WindowOptions(**named)`` compiled for ``engine`` instead of the backend in use."""
    options = WindowOptions(**named)
    object.__setattr__(options, "_compiled", compiled(engine, options))
    return options


def build_on(
    engine: Any,
    history: Sequence[Message],
    options: WindowOptions | None = None,
    *,
    system: Any = None,
    turn_statuses: Any = None,
    **named: Any,
) -> ContextWindow:
    """`build_window(history, options, system=..., turn_statuses=..., **named)` on ``engine``:
    the same checks and steps above the core (window.py's), the given core below."""
    if options is None:
        options = options_on(engine, **named)
    elif named or type(options._compiled) is not engine.CoreOptions:
        options = dataclasses.replace(window_module.options_with(options, named))
        object.__setattr__(options, "_compiled", compiled(engine, options))
    return window_module._build(engine, history, options, system, turn_statuses)
