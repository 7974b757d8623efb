"""The blocking and awaitable adapters of the store protocols (chat memory, turn store,
compression-state store) are tables of `agentctx_fast._blocking.blocking` / `awaitable` entries:
every method of the protocol is in the table (a method left out would fall back to the
protocol's stub or default instead of reaching the wrapped object), and each shows the
protocol's own signature to `inspect` (``help()``, signature-reading tools), as to type
checkers."""

from __future__ import annotations

import asyncio
import inspect

import pytest

from agentctx_fast.compression.coordinator import (
    AsyncCompressionStateStore,
    AwaitableCompressionStateStore,
    BlockingCompressionStateStore,
    CompressionStateStore,
)
from agentctx_fast.core.messages import UserMessage
from agentctx_fast.memory import (
    AsyncChatMemory,
    AwaitableChatMemory,
    BlockingChatMemory,
    ChatMemory,
    InMemoryChatMemory,
)
from agentctx_fast.stores.turn_store import (
    AgentTurnStore,
    AsyncAgentTurnStore,
    AwaitableAgentTurnStore,
    BlockingAgentTurnStore,
)

# (adapter, the protocol it implements, the protocol of what it wraps, methods it may leave
# to the protocol's default because they are built on the others)
ADAPTERS = [
    (BlockingChatMemory, ChatMemory, AsyncChatMemory, {"add_message", "window", "fenced"}),
    (AwaitableChatMemory, AsyncChatMemory, ChatMemory, {"add_message", "window", "fenced"}),
    (BlockingAgentTurnStore, AgentTurnStore, AsyncAgentTurnStore, set()),
    (AwaitableAgentTurnStore, AsyncAgentTurnStore, AgentTurnStore, set()),
    (
        BlockingCompressionStateStore,
        CompressionStateStore,
        AsyncCompressionStateStore,
        set(),
    ),
    (
        AwaitableCompressionStateStore,
        AsyncCompressionStateStore,
        CompressionStateStore,
        set(),
    ),
]


def _methods(protocol: type) -> set[str]:
    return {
        name
        for name, value in vars(protocol).items()
        if not name.startswith("_") and inspect.isfunction(value)
    }


@pytest.mark.parametrize(
    "adapter, protocol, wrapped, defaults", ADAPTERS, ids=[row[0].__name__ for row in ADAPTERS]
)
def test_every_protocol_method_is_delegated_with_its_signature(
    adapter: type, protocol: type, wrapped: type, defaults: set[str]
) -> None:
    delegated = _methods(protocol) - defaults
    assert delegated and delegated <= set(vars(adapter)), delegated - set(vars(adapter))
    for name in delegated:
        assert inspect.signature(getattr(adapter, name)) == inspect.signature(
            getattr(wrapped, name)
        ), name
        assert inspect.iscoroutinefunction(getattr(adapter, name)) == (
            inspect.iscoroutinefunction(getattr(protocol, name))
        ), name


def test_a_round_trip_through_both_adapters_reaches_the_memory() -> None:
    memory = InMemoryChatMemory()
    both = BlockingChatMemory(AwaitableChatMemory(memory))
    assert both.add_messages_if_absent([UserMessage("hi", message_id="u1")]) == [True]
    assert both.get_messages(1, offset=0) == memory.get_messages()
    assert both.message_count() == 1
    assert asyncio.run(AwaitableChatMemory(memory).get_message("u1")) == memory.get_message("u1")
