"""The service path beside the OpenAI Agents SDK's sessions (issue 17), one run, side by side.

What a service pays per model call around the window: read the conversation's tail from the
store, decode it, build the window and turn it into request messages. Our rows use the
runner's own history read (`read_history` with an agent's default limits), `build_window` and
`to_openai`; the peer rows are ``SQLiteSession.get_items(limit=100)`` and
``RedisSession.get_items(limit=100)`` over the same conversations (1,000 and 10,000 tool-heavy
messages, stored in the SDK's item format). ``warm`` is the default decoded-record cache,
``cold`` has it off. Also: 100 conversations read round-robin with default settings (a cache
that cannot hold them all), appending one finished tool turn (four messages; also with both
sides alternating, as the test Redis fsyncs every write), and on Redis the server CPU per page
read (INFO commandstats) beside a plain ``LRANGE`` of the same records.

The SDK is a benchmark-only dependency (``pip install openai-agents``); its sessions are async,
so both sides run on one event loop kept for the whole module (the blocking stores' calls
complete without suspending).
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from agentctx_fast import AiMessage, Message, ToolCall, ToolMessage, UserMessage, to_openai
from agentctx_fast._reads import REACH_MARGIN, read_history
from agentctx_fast.core.window import WindowOptions, build_window
from agentctx_fast.memory import AsyncChatMemory, awaitable_memory
from agentctx_fast.stores.redis import RedisAgentStore
from agentctx_fast.stores.sql import SqlAgentStore
from bench_runner import tool_history
from bench_stores import bulk_load

agents_memory = pytest.importorskip("agents.memory")
redis_session = pytest.importorskip("agents.extensions.memory.redis_session")

SIZES = (1_000, 10_000)
KINDS = ("sqlite", "redis")
ROUND_ROBIN = 100
_DEFAULTS = WindowOptions()  # an agent's default limits


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def _peer_items(messages: list[Message]) -> list[dict[str, Any]]:
    return [dict(item) for item in to_openai(messages)]


class Setup:
    """One kind's stores, the peer's sessions and the conversation ids, loaded once."""

    def __init__(self, kind: str, request: pytest.FixtureRequest, tmp: Any, loop: Any) -> None:
        self.kind = kind
        self.loop = loop
        tag = uuid.uuid4().hex[:8]
        if kind == "sqlite":
            path = tmp.mktemp("service") / "service.db"
            self.store: Any = SqlAgentStore(f"sqlite:///{path}")
            self.store.schema.initialize()
            self.cold: Any = SqlAgentStore(self.store.engine, message_cache_size=0)
            peer_path = tmp.mktemp("peer") / "peer.db"
            self.session = lambda sid: agents_memory.SQLiteSession(sid, str(peer_path))
        else:
            url = request.getfixturevalue("redis_server").url
            self.store = RedisAgentStore(url, key_prefix=f"s{tag}:")
            self.cold = RedisAgentStore(self.store.client, key_prefix=f"s{tag}:",
                                        message_cache_size=0)  # fmt: skip
            self.session = lambda sid: redis_session.RedisSession.from_url(
                sid, url=url, key_prefix=f"p{tag}"
            )
        self.conversations = {}
        self.sessions = {}
        for size in SIZES:
            conversation = f"svc-{size}-{tag}"
            messages = tool_history(size)
            bulk_load(self.store, conversation, messages)
            session = self.session(conversation)
            items = _peer_items(messages)
            for start in range(0, len(items), 1_000):
                loop.run_until_complete(session.add_items(items[start : start + 1_000]))
            self.conversations[size] = conversation
            self.sessions[size] = session
        self.ring = [f"ring-{i}-{tag}" for i in range(ROUND_ROBIN)]
        ring_messages = tool_history(1_000)
        for conversation in self.ring:
            bulk_load(self.store, conversation, ring_messages)
            session = self.session(conversation)
            loop.run_until_complete(session.add_items(_peer_items(ring_messages)))
            self.sessions[conversation] = session

    def close(self) -> None:
        self.store.close()


@pytest.fixture(scope="module", params=KINDS)
def setup(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    loop: asyncio.AbstractEventLoop,
) -> Iterator[Setup]:
    loaded = Setup(str(request.param), request, tmp_path_factory, loop)
    yield loaded
    loaded.close()


_REACH: dict[int, int] = {}


async def _assemble(memory: AsyncChatMemory, key: int = 0) -> list[dict[str, Any]]:
    """One model call's input as the runner makes it (default agent limits; the first read
    sized from what the conversation's last read needed plus the runner's margin, as the
    runner remembers it; no turn is appended between calls here)."""
    known = _REACH.get(key)
    history, _ = await read_history(
        memory, _DEFAULTS, first_page=None if known is None else known + REACH_MARGIN
    )
    _REACH[key] = len(history)
    window = build_window(history, system="You are a support agent.")
    return to_openai(window.messages)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("side", ["ours-warm", "ours-cold", "peer-get_items"])
def test_assemble_one_call(benchmark: Any, setup: Setup, size: int, side: str) -> None:
    benchmark.group = f"service: one call's input, {setup.kind}, {size} messages"
    loop = setup.loop
    if side == "peer-get_items":
        session = setup.sessions[size]
        items = benchmark(lambda: loop.run_until_complete(session.get_items(limit=100)))
        assert len(items) == 100
        return
    store = setup.store if side == "ours-warm" else setup.cold
    memory = awaitable_memory(store.chat_memory(setup.conversations[size]))
    key = hash((side, setup.kind, size))
    request = benchmark(lambda: loop.run_until_complete(_assemble(memory, key)))
    assert request[0]["role"] == "system" and len(request) > 10


@pytest.mark.parametrize("side", ["ours", "peer-get_items"])
def test_round_robin_100_conversations(benchmark: Any, setup: Setup, side: str) -> None:
    """Throughput with default settings over 100 conversations of 1,000 messages each, in the
    steady state of a service: each side serves the whole ring once before the timing starts
    (fewer rounds than conversations would otherwise time only first visits)."""
    benchmark.group = f"service: 100 conversations round-robin, {setup.kind}"
    loop = setup.loop
    ring = itertools.cycle(setup.ring)
    if side == "peer-get_items":
        sessions = setup.sessions

        def peer() -> Any:
            return loop.run_until_complete(sessions[next(ring)].get_items(limit=100))

        for _ in setup.ring:
            peer()
        assert len(benchmark(peer)) == 100
        return
    store = setup.store

    def ours() -> Any:
        conversation = next(ring)
        memory = awaitable_memory(store.chat_memory(conversation))
        return loop.run_until_complete(_assemble(memory, hash(conversation)))

    for _ in setup.ring:
        ours()
    assert len(benchmark(ours)) > 10


def _tool_turn(tag: str) -> list[Message]:
    call = ToolCall(f"call-{tag}", "get_order", '{"order_id": "ORD-1"}')
    return [
        UserMessage("Where is ORD-1?", message_id=f"{tag}:user", turn_id=tag),
        AiMessage(tool_calls=(call,), message_id=f"{tag}:ai:1", turn_id=tag),
        ToolMessage(
            call.id,
            '{"status": "shipped"}' + " detail" * 200,
            tool_name="get_order",
            message_id=f"{tag}:tool",
            turn_id=tag,
        ),
        AiMessage("ORD-1 has shipped.", message_id=f"{tag}:ai:2", turn_id=tag),
    ]


@pytest.mark.parametrize("side", ["ours-batch", "ours-one-by-one", "peer-add_items"])
def test_append_a_tool_turn(benchmark: Any, setup: Setup, side: str) -> None:
    benchmark.group = f"service: append a finished tool turn, {setup.kind}"
    conversation = f"append-{uuid.uuid4().hex[:8]}"
    tags = (f"t{i}" for i in itertools.count())
    if side == "peer-add_items":
        session = setup.session(conversation)
        loop = setup.loop
        benchmark(
            lambda: loop.run_until_complete(session.add_items(_peer_items(_tool_turn(next(tags)))))
        )
        return
    memory = setup.store.chat_memory(conversation)
    if side == "ours-batch":
        benchmark(lambda: memory.add_messages_if_absent(_tool_turn(next(tags))))
    else:
        benchmark(lambda: [memory.add_message_if_absent(m) for m in _tool_turn(next(tags))])
    assert memory.message_count() % 4 == 0


PAGE = 116  # the runner's first read with default limits (max_attached_messages + 16)


def _server_usec_per_call(client: Any, command: str) -> float:
    stats = client.info("commandstats")
    return float(stats[f"cmdstat_{command}"]["usec_per_call"])


@pytest.mark.parametrize("read", ["ours-get_messages", "ours-get_model_messages", "plain-lrange"])
def test_redis_server_cpu_per_page_read(benchmark: Any, setup: Setup, read: str) -> None:
    """Redis server CPU per page read (``usec_per_call`` of INFO commandstats), ours beside a
    plain ``LRANGE`` of the same records copied to a list of their own. The figure is in the
    row's ``extra_info`` and printed (run with ``-s``)."""
    if setup.kind != "redis":
        pytest.skip("server CPU per read is a Redis figure")
    benchmark.group = "service: Redis server CPU per page read (see server_usec_per_read)"
    client = setup.store.client
    memory = setup.store.chat_memory(setup.conversations[SIZES[-1]])
    records_key = memory._inner._records
    if read == "plain-lrange":
        plain = f"{records_key}:plain-copy"
        client.delete(plain)
        client.rpush(plain, *client.lrange(records_key, -PAGE, -1))

        def run() -> Any:
            return client.lrange(plain, -PAGE, -1)

        command = "lrange"
    elif read == "ours-get_messages":

        def run() -> Any:
            return memory.get_messages(PAGE)

        command = "lrange"
    else:

        def run() -> Any:
            return memory.get_model_messages(PAGE)

        command = "evalsha"
    run()  # loads the script, if any, before the count starts
    client.config_resetstat()
    result = benchmark(run)
    usec = _server_usec_per_call(client, command)
    benchmark.extra_info["server_usec_per_read"] = usec
    print(f"\n{read}: {usec:.2f} usec of Redis server CPU per read of {PAGE} records")
    assert len(result) == PAGE


def test_append_a_tool_turn_alternating(benchmark: Any, setup: Setup) -> None:
    """Ours (one batch) and the peer's ``add_items`` appending a tool turn in alternation, so
    both see the same server and disk (the test Redis fsyncs every write, which a shared disk
    makes slow and variable): per-side medians in ``extra_info``, printed with ``-s``."""
    benchmark.group = f"service: append a tool turn, ours and the peer alternating, {setup.kind}"
    conversation = f"alternate-{uuid.uuid4().hex[:8]}"
    memory = setup.store.chat_memory(conversation)
    session = setup.session(conversation + "-peer")
    loop = setup.loop
    tags = (f"t{i}" for i in itertools.count())
    ours: list[float] = []
    peer: list[float] = []

    def pair() -> None:
        turn = _tool_turn(next(tags))
        items = _peer_items(_tool_turn(next(tags)))
        start = time.perf_counter()
        memory.add_messages_if_absent(turn)
        middle = time.perf_counter()
        loop.run_until_complete(session.add_items(items))
        ours.append(middle - start)
        peer.append(time.perf_counter() - middle)

    benchmark.pedantic(pair, rounds=200, warmup_rounds=5)
    ours_us, peer_us = statistics.median(ours) * 1e6, statistics.median(peer) * 1e6
    benchmark.extra_info.update(ours_median_us=ours_us, peer_median_us=peer_us)
    for side, times in (("ours", ours), ("peer", peer)):  # the chart's whiskers
        if len(times) < 2:
            continue  # a smoke run (--benchmark-disable) times one pair
        q1, _, q3 = statistics.quantiles(times, n=4)
        benchmark.extra_info.update({f"{side}_q1_us": q1 * 1e6, f"{side}_q3_us": q3 * 1e6})
    print(f"\n{setup.kind}: append a tool turn, ours {ours_us:.0f} us, peer {peer_us:.0f} us")
    assert memory.message_count() == 4 * len(ours)
