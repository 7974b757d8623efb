"""`ChatMemory.delete_message` on every store, blocking and async (SPEC §21, §23): a
compare-and-set removal that keeps pages, counts and indexes right, is fenced like an update,
finds its own effect when a client library re-sends it, and leaves no orphan in a window."""

from __future__ import annotations

import hashlib
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from agentctx_fast import (
    AgentActionMessage,
    AiMessage,
    InvalidArgumentError,
    LeaseLostError,
    Message,
    MessageNotFoundError,
    ToolCall,
    ToolMessage,
    UserMessage,
    VersionConflictError,
    WindowOptions,
    validate_tool_protocol,
)
from agentctx_fast.core._reference import api as reference
from agentctx_fast.memory import ChatMemory, InMemoryChatMemory
from agentctx_fast.stores.turn_store import Fence
from conftest import native_or_skip
from engines import build_on
from faults import FaultProxy
from server_fixtures import require_module
from servers import RedisServer
from store_fixtures import (
    every_store_kind,  # noqa: F401  (store_kind: every store)
    new_conversation_id,
)


@pytest.fixture
def memory(store: Any) -> ChatMemory:
    chat_memory: ChatMemory = store.chat_memory(new_conversation_id())
    return chat_memory


def timeline(n: int) -> list[Message]:
    """``n`` messages; every third one is a UI message."""
    out: list[Message] = []
    for i in range(n):
        if i % 3 == 2:
            out.append(AgentActionMessage(payload={"i": i}, message_id=f"m{i}"))
        elif i % 3 == 0:
            out.append(UserMessage(f"question {i}", message_id=f"m{i}"))
        else:
            out.append(AiMessage(f"answer {i}", message_id=f"m{i}"))
    return out


def ids(messages: list[Message]) -> list[str]:
    return [m.message_id for m in messages]


def assert_reads(memory: ChatMemory, expected: list[Message]) -> None:
    """Every read agrees with ``expected``: pages, the count, lookups by id, visible pages."""
    assert ids(memory.get_messages()) == ids(expected)
    assert memory.message_count() == len(expected)
    for count, offset in [(1, 0), (2, 1), (3, 2), (4, 0), (2, len(expected) - 1)]:
        end = max(len(expected) - offset, 0)
        page = expected[max(end - count, 0) : end]
        assert ids(memory.get_messages(count, offset=offset)) == ids(page)
    for message in expected:
        assert memory.get_message(message.message_id) == message
    visible = [m for m in expected if m.model_visible]
    assert ids(memory.get_model_messages()) == ids(visible)
    assert ids(memory.get_model_messages(2)) == ids(visible[-2:])


# Positions deleted one after another: the middle, the newest, the oldest, a UI message, the
# newest visible one followed by UI messages.
@pytest.mark.parametrize("order", [[4, 9, 0], [9, 8, 7], [2, 5, 0, 3], [7, 4, 1, 0]])
def test_delete_keeps_pages_counts_and_lookups_right(memory: ChatMemory, order: list[int]) -> None:
    messages = timeline(10)
    memory.add_messages_if_absent(messages)
    left = list(messages)
    for position in order:
        gone = messages[position]
        memory.delete_message(gone.message_id, gone.version)
        left.remove(gone)
        assert memory.get_message(gone.message_id) is None
        assert_reads(memory, left)
    # appends and updates after a delete land where they should
    extra = UserMessage("later", message_id="late")
    assert memory.add_message_if_absent(extra)
    left.append(extra)
    target = left[len(left) // 2]
    updated = memory.update_message(replace(target, metadata={"edited": True}), target.version)
    left[left.index(target)] = updated
    assert_reads(memory, left)
    assert memory.get_messages()[len(left) // 2].metadata == {"edited": True}


def test_delete_is_compare_and_set(memory: ChatMemory) -> None:
    messages = timeline(4)
    memory.add_messages_if_absent(messages)
    target = memory.update_message(replace(messages[1], text="edited"), 0)
    with pytest.raises(VersionConflictError, match="'m1' is at version 1, not 0"):
        memory.delete_message("m1", 0)
    assert memory.get_messages() == [messages[0], target, *messages[2:]]
    memory.delete_message("m1", 1)
    with pytest.raises(MessageNotFoundError, match="'m1'"):
        memory.delete_message("m1", 1)  # another caller's delete of the same message
    with pytest.raises(MessageNotFoundError, match="'nope'"):
        memory.delete_message("nope", 0)
    assert ids(memory.get_messages()) == ["m0", "m2", "m3"]


@pytest.mark.parametrize(
    ("message_id", "version", "error"),
    [("", 0, None), ("m0", -1, InvalidArgumentError), ("m0", True, InvalidArgumentError),
     ("a\x00b", 0, InvalidArgumentError), ("x" * 513, 0, InvalidArgumentError),
     (7, 0, TypeError)],
)  # fmt: skip
def test_delete_refuses_bad_arguments(
    memory: ChatMemory, message_id: Any, version: Any, error: type[Exception] | None
) -> None:
    memory.add_messages_if_absent(timeline(3))
    if error is None:  # an empty id is a valid id no message has
        with pytest.raises(MessageNotFoundError):
            memory.delete_message(message_id, version)
    else:
        with pytest.raises(error):
            memory.delete_message(message_id, version)
    assert memory.message_count() == 3


def test_a_deleted_id_can_be_stored_again(memory: ChatMemory) -> None:
    memory.add_messages_if_absent(timeline(3))
    memory.delete_message("m1", 0)
    again = AiMessage("again", message_id="m1")
    assert memory.add_message_if_absent(again)
    assert ids(memory.get_messages()) == ["m0", "m2", "m1"]
    memory.delete_message("m1", 0)
    assert ids(memory.get_messages()) == ["m0", "m2"]


def test_two_callers_popping_the_same_newest_message_one_wins(memory: ChatMemory) -> None:
    memory.add_messages_if_absent(timeline(3))
    newest_a = memory.get_messages(1)[0]
    newest_b = memory.get_messages(1)[0]
    memory.delete_message(newest_a.message_id, newest_a.version)
    with pytest.raises(MessageNotFoundError):
        memory.delete_message(newest_b.message_id, newest_b.version)
    assert ids(memory.get_messages()) == ["m0", "m1"]


def pop_item(memory: ChatMemory) -> Message | None:
    """The OpenAI Agents SDK's ``Session.pop_item`` on a chat memory: delete the newest
    message read, read again if another caller changed or took it first."""
    while True:
        newest = memory.get_messages(1)
        if not newest:
            return None
        try:
            memory.delete_message(newest[0].message_id, newest[0].version)
        except (MessageNotFoundError, VersionConflictError):
            continue
        return newest[0]


def test_threads_popping_the_newest_item_pop_each_once(memory: ChatMemory) -> None:
    messages = [UserMessage(f"item {i}", message_id=f"i{i}") for i in range(24)]
    memory.add_messages_if_absent(messages)
    popped: list[list[str]] = [[], []]
    start = threading.Barrier(2)

    def popper(mine: list[str]) -> None:
        start.wait()
        while (item := pop_item(memory)) is not None:
            mine.append(item.message_id)

    threads = [threading.Thread(target=popper, args=(mine,)) for mine in popped]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    everything = popped[0] + popped[1]
    assert sorted(everything) == sorted(ids(messages))  # each item popped exactly once
    for mine in popped:  # each thread pops newest first
        assert mine == sorted(mine, key=lambda i: -int(i[1:]))
    assert memory.message_count() == 0


def test_a_fenced_delete_needs_the_lease(store: Any) -> None:
    turns = store.turn_store()
    cid = new_conversation_id()
    memory = store.chat_memory(cid)
    memory.add_messages_if_absent(timeline(4))
    assert turns.acquire_conversation(cid, "t1", "owner-a", 1.0, now=100.0) is None
    held = memory.fenced(Fence("t1", "owner-a"))
    held.delete_message("m3", 0)
    assert turns.acquire_conversation(cid, "t2", "owner-b", 1.0, now=102.0) == "t1"
    with pytest.raises(LeaseLostError):
        held.delete_message("m1", 0)
    assert ids(memory.get_messages()) == ["m0", "m1", "m2"]
    taken = memory.fenced(Fence("t2", "owner-b"))
    with pytest.raises(VersionConflictError):
        taken.delete_message("m1", 5)
    with pytest.raises(MessageNotFoundError):
        taken.delete_message("m3", 0)
    taken.delete_message("m1", 0)
    assert ids(memory.get_messages()) == ["m0", "m2"]


def test_the_default_of_a_custom_memory_says_it_cannot_delete() -> None:
    from agentctx_fast.memory import AwaitableChatMemory, BlockingChatMemory

    class Custom(ChatMemory):
        add_message_if_absent = get_messages = get_message = update_message = None  # type: ignore[assignment]
        message_count = clear = None  # type: ignore[assignment]

    with pytest.raises(NotImplementedError, match="Custom cannot delete"):
        Custom().delete_message("m0", 0)
    # the wrappers pass a delete through
    inner = InMemoryChatMemory()
    inner.add_messages_if_absent(timeline(2))
    BlockingChatMemory(AwaitableChatMemory(inner)).delete_message("m1", 0)
    assert ids(inner.get_messages()) == ["m0"]


# A conversation with a tool call and its result: deleting either leaves no orphan.
def _tool_turns() -> list[Message]:
    call = ToolCall("call_1", "lookup_order", '{"order_id": "ORD-1"}')
    return [
        UserMessage("where is ORD-1?", message_id="u1", turn_id="T1"),
        AiMessage(None, (call,), message_id="a1", turn_id="T1"),
        ToolMessage("call_1", '{"status": "shipped"}', tool_name="lookup_order",
                    message_id="r1", turn_id="T1"),
        AiMessage("It shipped.", message_id="f1", turn_id="T1"),
        UserMessage("thanks", message_id="u2", turn_id="T2"),
    ]  # fmt: skip


@pytest.mark.parametrize("core", ["rust", "python"])
@pytest.mark.parametrize("deleted", ["a1", "r1"])
def test_deleting_a_call_or_its_result_leaves_no_orphan_in_the_window(
    memory: ChatMemory, core: str, deleted: str
) -> None:
    engine = native_or_skip() if core == "rust" else reference
    memory.add_messages_if_absent(_tool_turns())
    memory.delete_message(deleted, 0)
    stored = memory.get_messages()
    assert validate_tool_protocol(stored) != []  # the stored history has the orphan
    window = build_on(engine, stored, system="Be brief.")
    assert validate_tool_protocol(window.messages) == []
    assert window.repairs  # the window's repairs took care of it
    assert memory.window(WindowOptions(), "Be brief.").messages == window.messages


redis = require_module("redis")


def _sha(lua: str) -> bytes:
    return hashlib.sha1(lua.encode("utf-8"), usedforsecurity=False).hexdigest().encode()


@pytest.fixture
def retrying_redis(redis_server: RedisServer) -> Iterator[tuple[Any, FaultProxy]]:
    from agentctx_fast.stores.redis import RedisAgentStore

    with FaultProxy(redis_server.port) as proxy:
        client = redis.Redis(host="127.0.0.1", port=proxy.port)  # redis-py retries by default
        store = RedisAgentStore(client)
        try:
            yield store, proxy
        finally:
            store.close()
            client.close()


@pytest.mark.parametrize("fenced", [False, True])
def test_a_delete_whose_redis_reply_was_lost_is_sent_again_and_succeeds(
    retrying_redis: tuple[Any, FaultProxy], fenced: bool
) -> None:
    from agentctx_fast.stores import redis as redis_store

    store, proxy = retrying_redis
    cid = f"conv-{uuid.uuid4().hex}"
    memory = store.chat_memory(cid)
    memory.add_messages_if_absent(timeline(4))
    if fenced:
        turns = store.turn_store()
        assert turns.acquire_conversation(cid, "t1", "owner-a", 30.0, time.time()) is None
        memory = memory.fenced(Fence("t1", "owner-a"))
    memory.delete_message("m3", 0)  # loads the script on the server
    proxy.drop_reply(_sha(redis_store._DELETE[1 if fenced else 0]))
    memory.delete_message("m1", 0)  # applied, its reply lost, sent again: finds its own effect
    assert proxy.fired == 1
    assert ids(memory.get_messages()) == ["m0", "m2"]
    with pytest.raises(MessageNotFoundError):  # another call does not pass for the re-send
        memory.delete_message("m1", 0)


def test_the_note_a_redis_delete_leaves_expires_with_the_conversation(
    redis_server: RedisServer,
) -> None:
    from agentctx_fast.stores.redis import RedisAgentStore, conversation_key

    store = RedisAgentStore(redis_server.url, ttl_seconds=100)
    try:
        cid = f"conv-{uuid.uuid4().hex}"
        memory = store.chat_memory(cid)
        memory.add_messages_if_absent(timeline(3))
        memory.delete_message("m1", 0)
        note = conversation_key(store.key_prefix, "deleted", cid)
        assert 0 < store.client.pttl(note) <= 100_000
        assert store.delete_conversation(cid)
        assert not store.client.exists(note)
        assert store.list_conversations(prefix=cid) == []
    finally:
        store.close()
