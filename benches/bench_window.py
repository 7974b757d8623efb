"""Window building: Rust core vs the pure-Python reference vs peers, side by side.

Run: ``pytest benches --benchmark-enable --benchmark-group-by=param:size`` (off in the test run).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import pytest

from agentctx_fast import Message, UserMessage, build_window
from agentctx_fast._backend import native
from agentctx_fast.core._backend import core
from agentctx_fast.core._reference import api as reference
from engines import build_on, options_on
from workload import conversation

SIZES = [1_000, 10_000, 100_000]
ENGINES = {"rust": native, "python": reference}
OPTIONS = {
    "default": {},
    "compact+tokens8000": {"compact_completed_tool_turns": True, "max_attached_tokens": 8000},
}


def _history(size: int) -> list[Message]:
    return list(conversation(size))


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("options", list(OPTIONS))
@pytest.mark.parametrize("engine", list(ENGINES))
def test_build_window(benchmark: Any, engine: str, options: str, size: int) -> None:
    module = ENGINES[engine]
    if module is None:
        pytest.skip("extension not built")
    # The Rust row is the public entry as a caller reaches it (the backend in use is Rust).
    history = _history(size)
    kwargs = OPTIONS[options]
    if module is core:
        build = partial(build_window, **kwargs)
    else:  # the other core, with options made once as a service's are
        build = partial(build_on, module, options=options_on(module, **kwargs))
    build(history)  # warm the caches a long-running service has
    window = benchmark(lambda: build(history))
    assert isinstance(window.messages[-1], Message)


def minimal_scan(
    messages: list[Message], max_turns: int = 10, max_messages: int = 100
) -> list[Message]:
    """The floor: a backward scan applying only the turn and message caps."""
    users = 0
    start = len(messages)
    for index in range(len(messages) - 1, -1, -1):
        if len(messages) - index > max_messages:
            break
        if isinstance(messages[index], UserMessage):
            users += 1
            start = index
            if users > max_turns:
                break
    return messages[start:]


@pytest.mark.parametrize("size", SIZES)
def test_floor_minimal_scan(benchmark: Any, size: int) -> None:
    history = _history(size)
    assert benchmark(lambda: minimal_scan(history))


@pytest.mark.parametrize("size", SIZES)
def test_floor_list_slice(benchmark: Any, size: int) -> None:
    history = _history(size)
    cut = len(history) - len(minimal_scan(history))
    assert benchmark(lambda: history[cut:])


def _langchain(counter: str) -> Callable[[list[Any]], Any]:
    from langchain_core.messages import trim_messages
    from langchain_core.messages.utils import count_tokens_approximately

    token_counter: Any = len if counter == "len" else count_tokens_approximately
    max_tokens = 100 if counter == "len" else 8000

    def trim(messages: list[Any]) -> Any:
        return trim_messages(
            messages,
            strategy="last",
            start_on="human",
            include_system=True,
            token_counter=token_counter,
            max_tokens=max_tokens,
        )

    return trim


def _langchain_history(size: int) -> list[Any]:
    from langchain_core.messages import convert_to_messages

    from agentctx_fast import to_openai

    entries = to_openai(conversation(size))
    for entry in entries:
        entry.pop("id", None)
        # The wire format leaves out the content of an AI message that only calls tools;
        # LangChain's converter requires the key (None reads as "").
        entry.setdefault("content", None)
    return list(convert_to_messages(entries))


@pytest.mark.parametrize("size", [1_000, 10_000])
@pytest.mark.parametrize("counter", ["len", "approx"])
def test_peer_langchain_trim_messages(benchmark: Any, counter: str, size: int) -> None:
    history = _langchain_history(size)
    trim = _langchain(counter)
    # Its first call imports what it needs (about half a second); timing rounds are sized
    # from the first call measured, so without this the row would get a few dozen rounds.
    trim(history)
    assert benchmark(lambda: trim(history))
