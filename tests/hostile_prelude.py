"""Helpers for the hostile-caller scenarios (`test_hostile_callers.py`), imported by each
scenario's subprocess. Nothing here imports agentctx_fast at import time: some scenarios set
traps before the library is imported."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any


def describe_message(message: Any) -> list[Any]:
    """A message as plain data: class, id, and the fields a window depends on."""
    fields: list[Any] = [type(message).__name__, message.message_id]
    for name in ("text", "content", "tool_call_id", "tool_name", "is_error", "turn_id"):
        try:
            value = object.__getattribute__(message, name)
        except AttributeError:
            continue
        fields.append([name, value if isinstance(value, (str, bool, type(None))) else repr(value)])
    calls = getattr(message, "tool_calls", None)
    if isinstance(calls, tuple):
        fields.append([[c.id, c.name] for c in calls])
    return fields


def describe(value: Any) -> Any:
    """A window, a list of violations or any plain result, as plain data."""
    if type(value).__name__ == "ContextWindow":
        return {
            "class": f"{type(value).__module__}.{type(value).__qualname__}",
            "messages": [describe_message(m) for m in value.messages],
            "estimated_tokens": value.estimated_tokens,
            "attached_turns": value.attached_turns,
            "compacted_turns": value.compacted_turns,
            "dropped_turns": value.dropped_turns,
            "cut_by": value.cut_by,
            "repairs": [[r.kind, r.message_id, r.tool_call_id] for r in value.repairs],
        }
    if isinstance(value, (list, tuple)):
        return [describe(v) for v in value]
    if hasattr(value, "tolist"):
        return value.tolist()
    if type(value).__name__ == "ProtocolViolation":
        return [value.kind, value.message_id, value.tool_call_id]
    if type(value).__name__ == "TurnSegments":
        return [value.starts.tolist(), value.ends.tolist(), value.completed.tolist()]
    return value if isinstance(value, (str, int, bool, type(None))) else repr(value)


def outcome(fn: Callable[[], Any]) -> Any:
    """``fn()`` as plain data, or the error's class and message."""
    try:
        value = fn()
    except Exception as error:
        return {"error": type(error).__name__, "message": str(error)}
    return describe(value)


def show(label: str, fn: Callable[[], Any]) -> None:
    """Prints one labelled outcome line."""
    print(label, json.dumps(outcome(fn), ensure_ascii=True, sort_keys=True))
