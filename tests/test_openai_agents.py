"""The OpenAI Agents SDK integration (SPEC §23): `AgentCtxSession` on every store, blocking and
asyncio, and `AgentCtxInputFilter` in real ``Runner.run`` calls with a scripted model.

Every store kind runs twice: with its blocking store (driven in a worker thread) and with its
asyncio store made on the test's loop.
"""

from __future__ import annotations

import asyncio
import copy
import json
import threading
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner, function_tool
from agents.items import ModelResponse
from agents.memory.session import Session, SessionABC
from agents.models.interface import Model
from agents.run_config import CallModelData, ModelInputData
from agents.usage import Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
)

from agentctx_fast import (
    AiMessage,
    InvalidArgumentError,
    Message,
    WindowOptions,
    validate_tool_protocol,
)
from agentctx_fast.core.window import build_window
from agentctx_fast.formats.responses import ResponsesFormatError, from_responses, to_responses
from agentctx_fast.integrations.openai_agents import AgentCtxInputFilter, AgentCtxSession
from agentctx_fast.memory import ChatMemory, InMemoryChatMemory
from agentctx_fast.stores import InMemoryAgentStore
from store_fixtures import make_async_store, new_conversation_id, store_url

MISSING = "tool result missing"  # the window's synthetic result for a call without one

# Every item kind the SDK puts in a session, as it puts them there.
ITEMS: list[dict[str, Any]] = [
    {"role": "user", "content": "Where is order 1?"},
    {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "look it up"}],
        "encrypted_content": "gAAAA-secret",
    },
    {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "get_order",
        "arguments": '{"id": 1}',
        "status": "completed",
    },
    {"type": "function_call", "id": "fc_2", "call_id": "call_2", "name": "who", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "call_1", "output": '{"status": "shipped"}'},
    {"type": "function_call_output", "call_id": "call_2",
     "output": [{"type": "input_text", "text": "alice"}]},
    {"type": "web_search_call", "id": "ws_1", "status": "completed",
     "action": {"type": "search", "query": "carrier"}},
    {"type": "file_search_call", "id": "fs_1", "status": "completed", "queries": ["policy"],
     "results": None},
    {"type": "code_interpreter_call", "id": "ci_1", "status": "completed", "code": "1+1",
     "container_id": "cntr_1", "outputs": [{"type": "logs", "logs": "2"}]},
    {"type": "mcp_call", "id": "mcp_1", "server_label": "docs", "name": "search",
     "arguments": "{}", "output": "ok"},
    {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [
            {
                "type": "output_text",
                "text": "Shipped.",
                "annotations": [{"type": "url_citation", "start_index": 0, "end_index": 7,
                                 "url": "https://example.com/track", "title": "Tracking"}],
                "logprobs": [],
            }
        ],
    },
    {
        "type": "message",
        "role": "user",
        "content": [
            {"type": "input_text", "text": "and this?"},
            {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "high"},
        ],
    },
    {"id": "__fake_id__", "type": "message", "role": "assistant", "status": "completed",
     "content": [{"type": "output_text", "text": "A cat.", "annotations": []}]},
    {"role": "developer", "content": "Be brief."},
    {"role": "user", "content": [{"type": "input_text", "text": "thanks"},
                                 {"type": "input_image", "image_url": "https://example.com/b.png"}]},
    {"role": "assistant", "content": "You're welcome."},
    {"type": "item_reference", "id": "msg_0"},
]  # fmt: skip


# -- sessions on every store, blocking and asyncio ---------------------------------------------


class Sessions:
    """Makes sessions on one store: the blocking ``store`` or, in asyncio mode, the asyncio store
    of the same kind and database made on the running loop."""

    def __init__(self, store: Any, kind: str, mode: str, url: str | None) -> None:
        self.store, self.kind, self.mode, self.url = store, kind, mode, url
        self.async_store: Any = None

    def __call__(self, session_id: str, **options: Any) -> AgentCtxSession:
        return AgentCtxSession(session_id, self.async_store or self.store, **options)

    def run(self, scenario: Callable[[Sessions], Awaitable[None]]) -> None:
        async def main() -> None:
            if self.mode == "async":
                self.async_store = await make_async_store(self.kind, self.url)
            try:
                await scenario(self)
            finally:
                if self.async_store is not None:
                    await self.async_store.aclose()
                    self.async_store = None

        asyncio.run(main())


@pytest.fixture(params=("blocking", "async"))
def sessions(store: Any, store_kind: str, request: pytest.FixtureRequest) -> Sessions:
    return Sessions(store, store_kind, str(request.param), store_url(store_kind, request))


def key(item: Any) -> str:
    return json.dumps(item, sort_keys=True)


def assert_valid_window(items: Sequence[Any]) -> None:
    """What a model may be sent: it opens with a user message, every function call has its
    output and every output its call, and the messages pass the tool protocol."""
    assert items, "an empty model input"
    assert items[0].get("role") == "user", items[0]
    calls = [i["call_id"] for i in items if i.get("type") == "function_call"]
    outputs = [i["call_id"] for i in items if i.get("type") == "function_call_output"]
    assert sorted(calls) == sorted(outputs), (calls, outputs)
    assert validate_tool_protocol(from_responses(items)) == []


# -- round trips --------------------------------------------------------------------------------


def test_every_item_kind_comes_back_equal(sessions: Sessions) -> None:
    async def scenario(make: Sessions) -> None:
        batch, single = new_conversation_id(), new_conversation_id()
        await make(batch).add_items(copy.deepcopy(ITEMS))
        for item in ITEMS:  # each item in its own batch
            await make(single).add_items([copy.deepcopy(item)])
        for session_id in (batch, single):
            assert await make(session_id).get_items() == ITEMS  # a new session: from the store
        # stored as messages: the conversation is this library's, with its tool calls
        session = make(batch)
        if make.mode == "blocking":
            stored = make.store.chat_memory_provider()(batch).get_messages()
        else:
            stored = await make.async_store.chat_memory_provider()(batch).get_messages()
        ai = [m for m in stored if isinstance(m, AiMessage)]
        assert [c.id for m in ai for c in m.tool_calls] == ["call_1", "call_2"]
        assert ai[0].provider_items[0]["encrypted_content"] == "gAAAA-secret"
        assert await session.get_items() == ITEMS

    sessions.run(scenario)


def scribbled(value: Any) -> None:
    """Edits every dict and list inside ``value`` in place, as a caller may."""
    if isinstance(value, dict):
        for name, inner in list(value.items()):
            scribbled(inner)
            if isinstance(inner, str):
                value[name] = inner + "!"
    elif isinstance(value, list):
        for inner in value:
            scribbled(inner)
        value.append("scribbled")


@pytest.mark.parametrize("window", [None, WindowOptions()], ids=["stored", "windowed"])
def test_editing_the_items_given_back_leaves_the_stored_ones(window: Any) -> None:
    """The in-memory store keeps message objects: items given back share nothing with them."""

    async def scenario() -> None:
        session = AgentCtxSession("s", InMemoryAgentStore(), window=window)
        await session.add_items(copy.deepcopy(ITEMS))
        expected = await session.get_items()
        scribbled(await session.get_items())
        assert await session.get_items() == expected
        if window is None:
            assert expected == ITEMS

    asyncio.run(scenario())


def test_the_same_item_twice_is_stored_twice(sessions: Sessions) -> None:
    """The SDK stores what it is given; an item's own id is not a storage key."""

    async def scenario(make: Sessions) -> None:
        session = make(new_conversation_id())
        await session.add_items([ITEMS[10], ITEMS[10]])
        await session.add_items([ITEMS[10]])
        assert await session.get_items() == [ITEMS[10]] * 3

    sessions.run(scenario)


def test_limit_gives_the_last_items(sessions: Sessions) -> None:
    async def scenario(make: Sessions) -> None:
        session_id = new_conversation_id()
        await make(session_id).add_items(copy.deepcopy(ITEMS))
        session = make(session_id)
        for limit in (1, 2, 3, 5, 9, len(ITEMS), len(ITEMS) + 3):  # 2, 3: inside one message
            assert await session.get_items(limit) == ITEMS[-limit:]
        assert await session.get_items(0) == []
        settled = make(session_id, session_settings={"limit": 4})
        assert await settled.get_items() == ITEMS[-4:]
        assert await settled.get_items(2) == ITEMS[-2:]  # an explicit limit wins
        assert await make(new_conversation_id()).get_items(3) == []

    sessions.run(scenario)


def test_a_malformed_batch_raises_and_writes_nothing(sessions: Sessions) -> None:
    async def scenario(make: Sessions) -> None:
        session = make(new_conversation_id())
        await session.add_items([ITEMS[0]])
        bad = [ITEMS[0], {"type": "function_call", "name": "f", "arguments": "{}"}]
        with pytest.raises(ResponsesFormatError, match="item 1: a function call has no call_id"):
            await session.add_items(bad)
        with pytest.raises(InvalidArgumentError, match="items must be a list"):
            await session.add_items(ITEMS[0])  # type: ignore[arg-type]
        uncopyable = {"type": "reasoning", "id": "rs_9", "summary": [], "lock": threading.Lock()}
        with pytest.raises(InvalidArgumentError, match="items cannot be copied"):
            await session.add_items([ITEMS[0], uncopyable])
        assert await session.get_items() == [ITEMS[0]]

    sessions.run(scenario)


# -- the window ---------------------------------------------------------------------------------


def turn(n: int, *, outputs: bool = True) -> list[dict[str, Any]]:
    """A tool-heavy turn: a question, reasoning with two parallel calls, their outputs (the
    second left out with ``outputs=False``: an interrupted turn), the answer."""
    items: list[dict[str, Any]] = [
        {"role": "user", "content": f"question {n}"},
        {"type": "reasoning", "id": f"rs_{n}", "summary": [], "encrypted_content": f"enc{n}"},
        {"type": "function_call", "call_id": f"c{n}a", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": f"c{n}b", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": f"c{n}a", "output": f"a{n}"},
    ]
    if outputs:
        items.append({"type": "function_call_output", "call_id": f"c{n}b", "output": f"b{n}"})
    else:
        items.append(
            {"type": "function_call_output", "call_id": f"c{n}b", "output": MISSING}
        )  # what the window adds in its place
    items.append(
        {"id": f"msg_{n}", "type": "message", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": f"answer {n}", "annotations": []}]}
    )  # fmt: skip
    return items


def test_get_items_with_a_window(sessions: Sessions) -> None:
    async def scenario(make: Sessions) -> None:
        session_id = new_conversation_id()
        history = [*turn(1), *turn(2, outputs=False), *turn(3)]
        stored = [i for i in history if i.get("output") != MISSING]
        writer = make(session_id)
        await writer.add_items(stored[:7])
        await writer.add_items(stored[7:])
        assert await writer.get_items() == stored  # without a window: what was stored
        window = WindowOptions(max_attached_turns=2)
        windowed = make(session_id, window=window)
        expected = [*turn(2, outputs=False), *turn(3)]
        assert await windowed.get_items() == expected  # whole turns, the missing output closed
        assert_valid_window(expected)
        assert await make(session_id, window=WindowOptions()).get_items() == history
        # a limit keeps the last whole turns of the window that fit
        assert await windowed.get_items(len(expected)) == expected
        assert await windowed.get_items(len(expected) - 1) == turn(3)
        assert await windowed.get_items(6) == []
        assert await make(session_id, window=window, session_settings={"limit": 7}).get_items() == (
            turn(3)
        )
        assert await writer.get_items() == stored  # the store is untouched
        # a history without a user message has an empty window
        lonely = make(new_conversation_id(), window=window)
        await lonely.add_items([turn(1)[-1]])
        assert await lonely.get_items() == []

    sessions.run(scenario)


def interleaved() -> list[dict[str, Any]]:
    """One model turn with reasoning and text between its calls, as models with interleaved
    reasoning produce it, the outputs after them all."""
    return [
        {"role": "user", "content": "go"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e1"},
        {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"},
        {"type": "reasoning", "id": "rs_2", "summary": [], "encrypted_content": "e2"},
        {"type": "function_call", "call_id": "b", "name": "f", "arguments": "{}"},
        {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "Let me also check.", "annotations": []}]},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "a", "output": "A"},
        {"type": "function_call_output", "call_id": "b", "output": "B"},
        {"type": "function_call_output", "call_id": "c", "output": "C"},
    ]  # fmt: skip


def test_a_windowed_session_keeps_interleaved_calls_with_their_outputs(
    sessions: Sessions,
) -> None:
    async def scenario(make: Sessions) -> None:
        session_id = new_conversation_id()
        items = [*turn(1), *interleaved()]
        await make(session_id).add_items(items)
        windowed = make(session_id, window=WindowOptions(max_attached_turns=1))
        assert await windowed.get_items() == interleaved()  # the real outputs, in API order
        assert await make(session_id, window=WindowOptions()).get_items() == items

    sessions.run(scenario)


# -- pop_item -----------------------------------------------------------------------------------


def test_pop_item_removes_the_newest_item(sessions: Sessions) -> None:
    async def scenario(make: Sessions) -> None:
        session = make(new_conversation_id())
        assert await session.pop_item() is None
        await session.add_items(copy.deepcopy(ITEMS))
        for left in range(len(ITEMS) - 1, -1, -1):
            assert await session.pop_item() == ITEMS[left]
            assert await session.get_items() == ITEMS[:left]
        assert await session.pop_item() is None

    sessions.run(scenario)


def test_concurrent_pops_never_return_one_item_twice(sessions: Sessions) -> None:
    async def scenario(make: Sessions) -> None:
        session_id = new_conversation_id()
        await make(session_id).add_items(copy.deepcopy(ITEMS))
        first, second = make(session_id), make(session_id)
        popped = await asyncio.gather(
            *(s.pop_item() for _ in range(len(ITEMS) // 2 + 2) for s in (first, second))
        )
        got = [item for item in popped if item is not None]
        assert sorted(map(key, got)) == sorted(map(key, ITEMS))
        assert await first.get_items() == []

    sessions.run(scenario)


class RacingMemory(ChatMemory):
    """An in-memory conversation where another writer changes the newest message between the
    session's read of it and its first compare-and-set (the race the session must lose)."""

    def __init__(self) -> None:
        self.inner = InMemoryChatMemory()
        self.raced = False
        self.threads: set[int] = set()  # the threads that read it

    def _race(self, message_id: str) -> None:
        if not self.raced:
            self.raced = True
            stored = self.inner.get_message(message_id)
            assert stored is not None
            self.inner.delete_message(message_id, stored.version)  # the other popper wins

    def delete_message(self, message_id: str, expected_version: int) -> None:
        self._race(message_id)
        self.inner.delete_message(message_id, expected_version)

    def update_message(self, message: Message, expected_version: int) -> Message:
        self._race(message.message_id)
        return self.inner.update_message(message, expected_version)

    def add_message_if_absent(self, message: Message) -> bool:
        return self.inner.add_message_if_absent(message)

    def add_messages_if_absent(self, messages: Sequence[Message]) -> list[bool]:
        return self.inner.add_messages_if_absent(messages)

    def get_messages(self, count: int | None = None, *, offset: int = 0) -> list[Message]:
        self.threads.add(threading.get_ident())
        return self.inner.get_messages(count, offset=offset)

    def get_message(self, message_id: str) -> Message | None:
        return self.inner.get_message(message_id)

    def message_count(self) -> int:
        return self.inner.message_count()

    def clear(self) -> None:
        self.inner.clear()


class RacingStore:
    def __init__(self) -> None:
        self.memory = RacingMemory()

    def chat_memory_provider(self) -> Callable[[str], ChatMemory]:
        return lambda conversation_id: self.memory


@pytest.mark.parametrize("last", [1, 3], ids=["delete", "rewrite"])
def test_a_pop_that_loses_the_race_pops_the_next_item(last: int) -> None:
    """The newest message holds ``last`` items: the pop deletes it, or rewrites it without its
    last item; another writer removes it first, so the pop reads the tail again."""
    store = RacingStore()
    session = AgentCtxSession("s", store)
    items = [*turn(1), {"role": "user", "content": "more"}, *ITEMS[1:4]][: 8 + last]

    async def scenario() -> None:
        await session.add_items(items)
        newest = store.memory.get_messages(1)[0]
        assert len(await session.get_items()) == len(items)
        assert await session.pop_item() == items[-last - 1]  # the other writer took `newest`
        assert store.memory.get_message(newest.message_id) is None
        assert await session.get_items() == items[: -last - 1]

    asyncio.run(scenario())


def test_a_blocking_store_is_driven_off_the_event_loop() -> None:
    store = RacingStore()
    session = AgentCtxSession("s", store)

    async def scenario() -> None:
        await session.add_items(turn(1))
        assert await session.get_items() == turn(1)
        assert store.memory.threads and threading.get_ident() not in store.memory.threads

    asyncio.run(scenario())


# -- concurrent writers, clear ------------------------------------------------------------------


def test_concurrent_add_items_lose_nothing(sessions: Sessions) -> None:
    """Two sessions on one id append batches at once: every item is stored, each batch in its
    order (a batch is one atomic write; PostgreSQL may interleave two batches' rows)."""

    async def scenario(make: Sessions) -> None:
        session_id = new_conversation_id()
        writers = [make(session_id), make(session_id)]
        batches = [[{"role": "user", "content": f"q{n}"}, *turn(n)[1:]] for n in range(12)]
        await asyncio.gather(*(writers[n % 2].add_items(b) for n, b in enumerate(batches)))
        stored = list(map(key, await writers[0].get_items()))
        assert sorted(stored) == sorted(key(i) for b in batches for i in b)
        for batch in batches:
            mine = set(map(key, batch))
            assert [k for k in stored if k in mine] == list(map(key, batch))


def test_clear_session_removes_only_its_items(sessions: Sessions) -> None:
    async def scenario(make: Sessions) -> None:
        mine, other = make(new_conversation_id()), make(new_conversation_id())
        await mine.add_items(turn(1))
        await other.add_items(turn(2))
        await mine.clear_session()
        assert await mine.get_items() == []
        assert await mine.pop_item() is None
        assert await other.get_items() == turn(2)
        await mine.add_items(turn(3))
        assert await mine.get_items() == turn(3)

    sessions.run(scenario)


# -- construction -------------------------------------------------------------------------------


def test_the_session_is_the_sdks_session() -> None:
    session = AgentCtxSession("s", InMemoryAgentStore(), session_settings={"limit": 3})
    assert isinstance(session, SessionABC)
    assert isinstance(session, Session)
    assert session.session_id == "s"
    assert session.session_settings is not None and session.session_settings.limit == 3
    with pytest.raises(InvalidArgumentError, match="window must be a WindowOptions"):
        AgentCtxSession("s", InMemoryAgentStore(), window={"max_attached_turns": 1})  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="store must be a store"):
        AgentCtxSession("s", object())
    with pytest.raises(InvalidArgumentError, match="must be a non-empty str"):
        AgentCtxSession("", InMemoryAgentStore())


@pytest.mark.parametrize(
    "kind", ["memory", "sqlite", "postgresql", "postgres", "redis", "redis-cluster"]
)
def test_from_url(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    if kind == "memory":
        url = "memory:"
    elif kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'sessions.db'}"
    elif kind == "postgres":  # the short scheme
        url = str(store_url("postgresql", request)).replace("postgresql", "postgres", 1)
        kind = "postgresql"
    else:
        url = str(store_url(kind, request))
    prefix = {"sqlite": "table_prefix", "postgresql": "table_prefix", "redis": "key_prefix"}
    options: dict[str, Any] = (
        {prefix[kind]: f"s{new_conversation_id()[-8:]}_"} if kind in prefix else {}
    )
    if kind == "redis-cluster":
        options["cluster"] = True  # a Redis Cluster reached through one node's URL

    async def scenario() -> None:
        session_id = new_conversation_id()
        session = AgentCtxSession.from_url(session_id, url, create_tables=True, **options)
        again = AgentCtxSession.from_url(session_id, url, window=WindowOptions(), **options)
        try:
            await session.add_items(turn(1))
            assert await session.get_items() == turn(1)
            if kind != "memory":  # the same database, through another store
                assert await again.get_items() == turn(1)
            assert await session.pop_item() == turn(1)[-1]
        finally:
            await session.close()
            await again.close()

    asyncio.run(scenario())
    with pytest.raises(InvalidArgumentError, match="unknown store URL"):
        AgentCtxSession.from_url("s", "mysql://nowhere/db")
    with pytest.raises(InvalidArgumentError, match="the memory: store takes no options"):
        AgentCtxSession.from_url("s", "memory:", key_prefix="p")


def test_a_session_shared_by_two_event_loops_creates_its_tables_on_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session made with ``create_tables=True`` and used from two threads' event loops: the
    second loop's first call does not wait on the first loop's table creation (an asyncio lock
    belongs to one loop: waiting on it from another never wakes), it creates them itself."""
    from agentctx_fast.stores.sql import AsyncSqlSchema

    original = AsyncSqlSchema.initialize
    first_in, release = threading.Event(), threading.Event()
    calls: list[int] = []

    async def initialize(self: AsyncSqlSchema) -> None:
        calls.append(threading.get_ident())
        if len(calls) == 1:  # the first loop's creation is held until the second loop is done
            first_in.set()
            await asyncio.to_thread(release.wait, 30)
        await original(self)

    monkeypatch.setattr(AsyncSqlSchema, "initialize", initialize)
    session = AgentCtxSession.from_url(
        "shared", f"sqlite:///{tmp_path / 's.db'}", create_tables=True
    )
    results: dict[str, str] = {}

    def worker(content: str) -> None:
        async def run() -> None:
            await asyncio.wait_for(
                session.add_items([{"role": "user", "content": content}]), timeout=5
            )

        try:
            asyncio.run(run())
            results[content] = "ok"
        except Exception as error:  # the outcome is the assertion below
            results[content] = type(error).__name__

    one = threading.Thread(target=worker, args=("one",))
    one.start()
    assert first_in.wait(30)
    two = threading.Thread(target=worker, args=("two",))
    two.start()
    two.join(30)
    release.set()
    one.join(30)
    assert results == {"one": "ok", "two": "ok"}
    assert len(calls) == 2
    stored = asyncio.run(session.get_items())
    asyncio.run(session.close())
    assert sorted(item["content"] for item in stored) == ["one", "two"]


# -- Runner.run with a scripted model -----------------------------------------------------------


class ScriptedModel(Model):
    """Returns the scripted outputs in order and records every input it is sent."""

    def __init__(self, outputs: list[list[Any]]) -> None:
        self.outputs = list(outputs)
        self.inputs: list[list[Any]] = []

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        self.inputs.append(copy.deepcopy(input))
        return ModelResponse(output=self.outputs.pop(0), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def tool_step(n: int) -> list[Any]:
    return [
        ResponseReasoningItem(id=f"rs_{n}", type="reasoning", summary=[], encrypted_content="e"),
        ResponseFunctionToolCall(id=f"fc_{n}a", call_id=f"c{n}a", type="function_call",
                                 name="lookup", arguments='{"q": "a"}'),
        ResponseFunctionToolCall(id=f"fc_{n}b", call_id=f"c{n}b", type="function_call",
                                 name="lookup", arguments='{"q": "b"}'),
    ]  # fmt: skip


def text_step(n: int) -> list[Any]:
    text = ResponseOutputText(type="output_text", text=f"answer {n}", annotations=[], logprobs=[])
    return [ResponseOutputMessage(id=f"msg_{n}", type="message", role="assistant",
                                  status="completed", content=[text])]  # fmt: skip


@function_tool
def lookup(q: str) -> str:
    """Looks ``q`` up."""
    return f"found {q}"


class Recording:
    """A ``call_model_input_filter`` recording what the SDK passes and what the filter returns,
    and checking the filter leaves the SDK's items as they were."""

    def __init__(self, inner: AgentCtxInputFilter) -> None:
        self.inner = inner
        self.given: list[list[Any]] = []

    def __call__(self, data: CallModelData[Any]) -> ModelInputData:
        before = copy.deepcopy(data.model_data.input)
        out = self.inner(data)
        assert data.model_data.input == before  # the SDK's items are not changed
        assert out.instructions == data.model_data.instructions == "Answer briefly."
        self.given.append(before)
        return out


QUESTIONS = ["q1", "q2", "q3", "q4"]


def script() -> list[list[Any]]:
    """Per question: a tool step, then the answer (question 3 answers at once)."""
    outputs: list[list[Any]] = []
    for n, _ in enumerate(QUESTIONS):
        if n != 2:
            outputs.append(tool_step(n))
        outputs.append(text_step(n))
    return outputs


def test_runner_with_a_session_and_the_input_filter(sessions: Sessions) -> None:
    async def scenario(make: Sessions) -> None:
        session_id = new_conversation_id()
        model = ScriptedModel(script())
        agent = Agent(name="helper", instructions="Answer briefly.", model=model, tools=[lookup])
        recording = Recording(AgentCtxInputFilter(max_attached_turns=1))
        config = RunConfig(call_model_input_filter=recording, tracing_disabled=True)
        session = make(session_id)
        for question in QUESTIONS:
            result = await Runner.run(agent, question, session=session, run_config=config)
            assert result.final_output == f"answer {QUESTIONS.index(question)}"
        assert model.outputs == []
        for sent in model.inputs:
            assert_valid_window(sent)
        # each model call: at most one earlier turn, then the run's own turn in full
        users = [[i["content"] for i in sent if i.get("role") == "user"] for sent in model.inputs]
        assert users == [["q1"], ["q1"], ["q1", "q2"], ["q1", "q2"], ["q2", "q3"], ["q3", "q4"],
                         ["q3", "q4"]]  # fmt: skip
        assert [len(g) for g in recording.given] == [1, 6, 8, 13, 15, 17, 22]  # the full input
        # the session holds every item of every turn, untouched by the filter
        stored = await make(session_id).get_items()
        assert stored == recording.given[-1] + [
            {"id": "msg_3", "type": "message", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": "answer 3", "annotations": [],
                          "logprobs": []}]}
        ]  # fmt: skip

    sessions.run(scenario)


def test_runner_with_a_windowed_session(sessions: Sessions) -> None:
    async def scenario(make: Sessions) -> None:
        session_id = new_conversation_id()
        model = ScriptedModel(script())
        agent = Agent(name="helper", instructions="Answer briefly.", model=model, tools=[lookup])
        session = make(session_id, window=WindowOptions(max_attached_turns=1))
        config = RunConfig(tracing_disabled=True)
        for question in QUESTIONS:
            await Runner.run(agent, question, session=session, run_config=config)
        for sent in model.inputs:
            assert_valid_window(sent)
        users = [[i["content"] for i in sent if i.get("role") == "user"] for sent in model.inputs]
        assert users == [["q1"], ["q1"], ["q1", "q2"], ["q1", "q2"], ["q2", "q3"], ["q3", "q4"],
                         ["q3", "q4"]]  # fmt: skip
        full = await make(session_id).get_items()
        assert [i["content"] for i in full if i.get("role") == "user"] == QUESTIONS
        assert len(full) == 3 * 7 + 2  # nothing the window left out was lost

    sessions.run(scenario)


@function_tool(needs_approval=True)
def refund(order_id: str) -> str:
    """Refunds ``order_id``."""
    return f"refunded {order_id}"


@pytest.mark.parametrize("window", [None, WindowOptions()], ids=["stored", "windowed"])
def test_runner_resumes_an_approved_tool_call(
    sessions: Sessions, window: WindowOptions | None
) -> None:
    """A run paused for an approval, then resumed from its state: the session holds the call
    and its output once, nothing the window added."""

    async def scenario(make: Sessions) -> None:
        session_id = new_conversation_id()
        call = ResponseFunctionToolCall(
            id="fc_1",
            call_id="c1",
            type="function_call",
            name="refund",
            arguments='{"order_id": "7"}',
        )
        model = ScriptedModel([text_step(0), [call], text_step(2)])
        agent = Agent(name="helper", instructions="Answer briefly.", model=model, tools=[refund])
        config = RunConfig(call_model_input_filter=AgentCtxInputFilter(), tracing_disabled=True)
        session = make(session_id, window=window)
        await Runner.run(agent, "hello", session=session, run_config=config)
        paused = await Runner.run(agent, "refund 7", session=session, run_config=config)
        [approval] = paused.interruptions
        state = paused.to_state()
        state.approve(approval)
        done = await Runner.run(
            agent, state, session=make(session_id, window=window), run_config=config
        )
        assert done.final_output == "answer 2"
        assert_valid_window(model.inputs[-1])
        stored = await make(session_id).get_items()
        kinds = [(i.get("type") or i.get("role"), i.get("output")) for i in stored]
        assert kinds == [("user", None), ("message", None), ("user", None),
                         ("function_call", None), ("function_call_output", "refunded 7"),
                         ("message", None)]  # fmt: skip

    sessions.run(scenario)


# -- the input filter alone ---------------------------------------------------------------------


def filtered(items: list[Any], **options: Any) -> list[Any]:
    data = CallModelData(ModelInputData(input=items, instructions="i"), agent=None, context=None)  # type: ignore[arg-type]
    out = AgentCtxInputFilter(**options)(data)
    assert out.instructions == "i"
    return out.input


def test_the_filter_returns_the_runs_own_items() -> None:
    items = [*turn(1), *turn(2), {"role": "user", "content": "now"}]
    before = copy.deepcopy(items)
    out = filtered(items, max_attached_turns=1)
    assert out == [*turn(2), {"role": "user", "content": "now"}]
    assert all(a is b for a, b in zip(out, items[7:], strict=True))  # the same objects
    assert items == before
    assert filtered(items, max_attached_turns=0) == [items[-1]]
    assert filtered(items, options=None, max_attached_turns=5) == items


def test_the_filter_closes_a_call_without_output() -> None:
    interrupted = [i for i in turn(1, outputs=False) if i.get("output") != MISSING]
    items = [*interrupted, {"role": "user", "content": "now"}]
    out = filtered(items)
    assert out == [*turn(1, outputs=False), {"role": "user", "content": "now"}]
    assert_valid_window(out)


def test_the_filter_keeps_interleaved_calls_with_their_outputs() -> None:
    items = [*turn(1), *interleaved(), {"type": "reasoning", "id": "rs_3", "summary": []}]
    out = filtered(items, max_attached_turns=0)
    assert out == items[7:]  # the real outputs, no synthetic one
    assert all(a is b for a, b in zip(out, items[7:], strict=True))
    assert filtered(items) == items


def test_the_filter_checks_its_options() -> None:
    with pytest.raises(InvalidArgumentError, match="not both"):
        AgentCtxInputFilter(WindowOptions(), max_attached_turns=1)
    with pytest.raises(InvalidArgumentError, match="options must be a WindowOptions"):
        AgentCtxInputFilter({"max_attached_turns": 1})  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="max_attached_turns"):
        AgentCtxInputFilter(max_attached_turns=-1)
    with pytest.raises(InvalidArgumentError, match="unknown window option 'max_turns'"):
        AgentCtxInputFilter(max_turns=1)
    options = WindowOptions(max_attached_turns=2)
    assert AgentCtxInputFilter(options).options is options


@pytest.mark.parametrize("current_turn", ["last", "none"])
@pytest.mark.parametrize("compact", [False, True])
def test_the_filter_gives_the_window_of_the_whole_input(current_turn: str, compact: bool) -> None:
    """The filter converts only the turns a window can reach; what it sends is the window of
    the whole input, whatever the limits."""
    developer = {"role": "developer", "content": "Be brief."}
    history = [developer, *turn(1), *turn(2, outputs=False), developer, *turn(3), *turn(4)]
    history = [i for i in history if i.get("output") != MISSING]
    items = [*history, {"role": "user", "content": "now"}, *turn(5)[1:5]]
    for turns in range(7):
        for messages in (3, 8, 100):
            options = WindowOptions(
                max_attached_turns=turns,
                max_attached_messages=messages,
                compact_completed_tool_turns=compact,
                current_turn=current_turn,  # type: ignore[arg-type]
            )
            whole = build_window(from_responses(items), options).messages
            sent = filtered(items, options=options)
            expected = [{k: v for k, v in i.items() if k != "name" or i.get("type") != (
                "function_call_output")} for i in to_responses(whole)]  # fmt: skip
            assert to_responses(from_responses(sent)) == expected, options
