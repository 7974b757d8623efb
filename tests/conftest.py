"""Shared test helpers: message builders for compact case specs, and the two cores."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from agentctx_fast import (
    AgentActionMessage,
    AgentFormMessage,
    AiMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    TurnStatus,
    UserMessage,
)
from agentctx_fast.core.window import ContextWindow, WindowOptions
from engines import compiled
from server_fixtures import *  # noqa: F403  (session servers)
from store_fixtures import *  # noqa: F403  (the parametrised store)
from store_fixtures import SERVER_KINDS

DATA = Path(__file__).parent / "data"
IN_CI = os.environ.get("CI", "").lower() == "true"

# The test command is deterministic: hypothesis draws the same examples on every run, so a
# landing never depends on luck. `HYPOTHESIS_PROFILE=deep` draws new random examples (and more of
# them where a test sets no count); what it finds becomes a fixed case.
settings.register_profile("fixed", derandomize=True, print_blob=True)
settings.register_profile("deep", derandomize=False, print_blob=True, max_examples=500)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fixed"))


def build_message(spec: dict[str, Any]) -> Message:
    """A message from a compact spec: ``{"t": kind, "id", "text", "calls", "call", "turn"}``."""
    common: dict[str, Any] = {"message_id": spec["id"], "turn_id": spec.get("turn")}
    kind = spec["t"]
    text = spec.get("text", f"text of {spec['id']}")
    if kind == "system":
        return SystemMessage(text, **common)
    if kind == "user":
        return UserMessage(text, **common)
    if kind == "ai":
        calls = tuple(
            ToolCall(c[0], c[1], c[2] if len(c) > 2 else "{}") for c in spec.get("calls", ())
        )
        return AiMessage(spec.get("text"), calls, **common)
    if kind == "tool":
        return ToolMessage(spec["call"], text, **common)
    if kind == "action":
        return AgentActionMessage(payload={"button": "ok"}, **common)
    if kind == "form":
        return AgentFormMessage(payload={"approve": True}, **common)
    raise ValueError(f"unknown spec kind {kind!r}")


def load_cases(name: str) -> list[dict[str, Any]]:
    with open(DATA / name, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def window_kwargs(options: dict[str, Any]) -> dict[str, Any]:
    kwargs = dict(options)
    if "turn_statuses" in kwargs:
        kwargs["turn_statuses"] = {k: TurnStatus(v) for k, v in kwargs["turn_statuses"].items()}
    return kwargs


_ids = itertools.count()


def unique_id(prefix: str = "m") -> str:
    """Ids unique across a test run, so token caches keyed by id never see two contents."""
    return f"{prefix}{next(_ids)}"


def native_or_skip() -> Any:
    from agentctx_fast.core import _backend

    if _backend.native is None:
        if IN_CI:
            pytest.fail("the Rust extension agentctx_fast._native is not built")
        pytest.skip("the Rust extension is not built")
    return _backend.native


_SERVER_FIXTURES = {
    "postgres_server",
    "redis_server",
    "redis_cluster",
    "server_store_kind",
    "own_server",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks tests that need a real server ``servers`` (``-m "not servers"`` leaves them out)."""
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if (
            _SERVER_FIXTURES & set(getattr(item, "fixturenames", ()))
            or params.get("store_kind") in SERVER_KINDS
        ):
            item.add_marker(pytest.mark.servers)


def select_args(engine: Any, history: list[Any], options: dict[str, Any]) -> tuple[Any, ...]:
    """The arguments of ``engine``'s ``select`` for a compact options dict (parity tests)."""
    system = options.get("system")
    return (
        history,
        SystemMessage(system, message_id="system") if system else None,
        system is None,
        compiled(
            engine,
            WindowOptions(
                **{
                    name: value
                    for name, value in options.items()
                    if name not in ("system", "turn_statuses")
                }
            ),
        ),
        None,
        options.get("turn_statuses"),
    )


class IntSubclass(int):
    """An int subclass, for arguments that must be exact ints."""


class StrSubclass(str):
    """A str subclass, for arguments that must be exact strs."""

    __slots__ = ()


class SystemSubclass(SystemMessage):
    """A subclass of the library's system message."""

    __slots__ = ()


def window_outcome(build: Any, *args: Any, **kwargs: Any) -> Any:
    """``build(*args, **kwargs)``'s window as comparable values (its messages and their
    classes, every field, its repr), or the error's class and message."""
    try:
        window = build(*args, **kwargs)
    except Exception as error:  # parity covers the class and the message
        return ("error", type(error), str(error))
    assert type(window) is ContextWindow
    return (
        window.messages,
        [type(m) for m in window.messages],
        window.estimated_tokens,
        window.attached_turns,
        window.compacted_turns,
        window.cut_by,
        window.repairs,
        window.dropped_turns,
        repr(window),
    )
