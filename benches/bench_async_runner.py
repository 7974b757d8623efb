"""The async runner beside the blocking one (issue 12).

1. Overhead per turn on the same conversations as ``bench_runner.py`` (1,000 and 10,000 stored
   tool-heavy messages), same scripted model: the rows share a group with the blocking rows
   (``runner turn (…) KIND``), so one run shows them side by side. Each async row starts the
   event loop for its one turn (``run_until_complete``, some 10–15 µs here), which a service,
   already inside its loop, never pays per turn; so also ``runner turns in a running loop
   (…) KIND``: ten turns per call, the blocking runner's in a plain loop and the async
   runner's in one coroutine, on the same stored conversation (1,000 messages). The plain tool
   (``async``) costs a worker-thread hop per call (the runner's ``asyncio.to_thread``);
   ``async-async-tool`` has the same tool as an ``async def``, and ``async-to-thread-tool``
   as an ``async def`` that awaits ``asyncio.to_thread(plain)`` itself. Those rows run one
   after the other, and on a shared machine the load moves between them by more than the runners
   differ: ``runner turns alternating (…) KIND`` runs the same batches round by round, every
   runner kind in each round, and gives the async/blocking ratios in ``extra_info`` (printed
   with ``-s``).
2. ``plain call hop (…)``: that hop alone, ``asyncio.to_thread`` beside
   ``loop.run_in_executor(None, …)`` and an inline call (the floor), for
   the call a turn hands over (the plain ``get_order`` tool's ``invoke``: parse the arguments,
   call, render the result, some 5-10 µs), many calls per round in a running loop: back to
   back, and each after some work on the loop thread (as in a turn, where the worker has gone
   idle and the loop has work of its own to finish before it waits).
3. 500 conversations on one event loop (arriving one per millisecond, then all in flight
   together), with a model that awaits 50 ms per call:
   ``extra_info`` holds turns per second, the p50/p99 runner overhead per turn (the turn's time
   less the model's wait), the event loop's largest lag (how late a 1 ms ticker woke, which
   includes waiting behind other ready tasks) and, from a second run, the longest single step
   any task took on the loop (what "blocking the loop" means), timed around each of the loop's
   callbacks. A step can also hold the cyclic garbage collector's pause, which the interpreter
   takes wherever allocations cross its threshold and whose length grows with everything the
   process keeps alive (the other benchmarks' histories included): the longest collection is
   reported on its own, and the longest step once more with the collector off for the run,
   which is the library's own share.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import statistics
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import replace
from typing import Any

import pytest

from agentctx_fast import (
    Agent,
    AgentRunner,
    AiMessage,
    AsyncAgentRunner,
    AsyncInMemoryAgentStore,
    AsyncScriptedChatModel,
    InMemoryAgentStore,
    Message,
    Tool,
)
from agentctx_fast.stores.redis import AsyncRedisAgentStore
from agentctx_fast.stores.sql import AsyncSqlAgentStore
from bench_runner import _PLAIN, _TOOL, SIZES, _store, tool_history
from bench_runner import _agent as _blocking_agent
from bench_stores import bulk_load

KINDS = ("memory", "sqlite", "redis", "postgresql")


def _async_twin(kind: str, store: Any, loop: asyncio.AbstractEventLoop) -> Any:
    """The async store on the blocking store's database (same tables or keys)."""
    if kind == "sqlite" or kind == "postgresql":
        async_store = AsyncSqlAgentStore(str(store.engine.url), table_prefix=store.table_prefix)
    else:
        url = store.client.connection_pool.connection_kwargs
        async_store = AsyncRedisAgentStore(
            f"redis://{url['host']}:{url['port']}/{url.get('db', 0)}", key_prefix=store.key_prefix
        )
    return async_store


@pytest.fixture(scope="module", params=KINDS)
def async_runner_store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Any, dict[int, str], asyncio.AbstractEventLoop]]:
    kind = str(request.param)
    loop = asyncio.new_event_loop()
    conversations = {}
    if kind == "memory":
        store: Any = AsyncInMemoryAgentStore()
        for size in SIZES:
            conversation_id = f"runner-{size}-{uuid.uuid4().hex[:6]}"
            memory = store.chat_memory(conversation_id)
            for message in tool_history(size):
                loop.run_until_complete(memory.add_message_if_absent(message))
            conversations[size] = conversation_id
        yield kind, store, conversations, loop
    else:
        blocking = _store(kind, request, tmp_path_factory)
        for size in SIZES:
            conversation_id = f"runner-{size}-{uuid.uuid4().hex[:6]}"
            bulk_load(blocking, conversation_id, tool_history(size))
            conversations[size] = conversation_id
        if kind == "postgresql":
            with blocking.engine.begin() as connection:
                connection.exec_driver_sql(f"ANALYZE {blocking._tables.messages.name}")
        store = _async_twin(kind, blocking, loop)
        _BLOCKING[kind] = blocking
        yield kind, store, conversations, loop
        loop.run_until_complete(store.aclose())
        del _BLOCKING[kind]
        blocking.close()
    loop.close()


_BLOCKING: dict[str, Any] = {}  # the blocking store on the async one's database, by kind


def _agent(replies: Sequence[AiMessage], delay: float = 0.0) -> Agent:
    return Agent(
        "bench",
        AsyncScriptedChatModel(list(replies), cycle=True, delay=delay),
        instructions="You are a support agent.",
        tools=[Tool("get_order", lambda order_id: {"order_id": order_id, "status": "shipped"})],
        compact_completed_tool_turns=True,
    )


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("turn_kind", ["plain", "tool"])
def test_async_runner_turn(
    benchmark: Any,
    async_runner_store: tuple[str, Any, dict[int, str], asyncio.AbstractEventLoop],
    size: int,
    turn_kind: str,
) -> None:
    kind, store, conversations, loop = async_runner_store
    benchmark.group = f"runner turn ({turn_kind}) {kind}"
    runner = AsyncAgentRunner(store)
    agent = _agent(_PLAIN if turn_kind == "plain" else _TOOL)

    def turn() -> Any:
        return loop.run_until_complete(runner.run(agent, conversations[size], "Where is my order?"))

    done = benchmark(turn)
    loop.run_until_complete(runner.aclose())
    assert done.status.value == "completed"


TURNS_PER_CALL = 10


RUNNER_KINDS = ("blocking", "async", "async-async-tool", "async-to-thread-tool")


class _Batch:
    """``TURNS_PER_CALL`` turns of one runner kind on a store's stored conversation (1,000
    messages): the blocking runner's in a plain loop, the async runner's in one coroutine in the
    running loop, with a plain tool, or the ``async def`` tool an asyncio service would write
    (``async-async-tool``), or one that awaits ``asyncio.to_thread`` (``async-to-thread-tool``)."""

    def __init__(
        self,
        runner_kind: str,
        async_runner_store: tuple[str, Any, dict[int, str], asyncio.AbstractEventLoop],
        replies: Sequence[AiMessage],
    ) -> None:
        kind, store, conversations, loop = async_runner_store
        self._loop = loop
        self._runner: Any
        self._async = runner_kind != "blocking"
        if not self._async:
            if kind == "memory":  # the async in-memory store's data is not the blocking one's
                blocking: Any = InMemoryAgentStore()
                self._conversation = f"blocking-{uuid.uuid4().hex[:6]}"
                memory = blocking.chat_memory(self._conversation)
                memory.add_messages_if_absent(tool_history(SIZES[0]))
            else:
                blocking, self._conversation = _BLOCKING[kind], conversations[SIZES[0]]
            self._runner = AgentRunner(blocking)
            self._agent = _blocking_agent(replies)
            return
        self._conversation = conversations[SIZES[0]]
        self._runner = AsyncAgentRunner(store)
        self._agent = _agent(replies)
        if runner_kind != "async":
            self._agent = replace(self._agent, tools=(_ASYNC_TOOLS[runner_kind],))

    def __call__(self) -> Any:
        """The batch's turns; the last one."""
        if not self._async:
            for _ in range(TURNS_PER_CALL):
                done = self._runner.run(self._agent, self._conversation, "Where is my order?")
            return done
        return self._loop.run_until_complete(self._many())

    async def _many(self) -> Any:
        for _ in range(TURNS_PER_CALL):
            done = await self._runner.run(self._agent, self._conversation, "Where is my order?")
        return done

    def close(self) -> None:
        if self._async:
            self._loop.run_until_complete(self._runner.aclose())
        else:
            self._runner.close()


@pytest.mark.parametrize("runner_kind", RUNNER_KINDS)
@pytest.mark.parametrize("turn_kind", ["plain", "tool"])
def test_turns_in_a_running_loop(
    benchmark: Any,
    async_runner_store: tuple[str, Any, dict[int, str], asyncio.AbstractEventLoop],
    turn_kind: str,
    runner_kind: str,
) -> None:
    kind = async_runner_store[0]
    benchmark.group = (
        f"runner turns in a running loop ({turn_kind}, {TURNS_PER_CALL} per call) {kind}"
    )
    benchmark.extra_info["turns_per_call"] = TURNS_PER_CALL
    if runner_kind not in ("blocking", "async") and turn_kind == "plain":
        pytest.skip("a plain turn calls no tool")
    batch = _Batch(runner_kind, async_runner_store, _PLAIN if turn_kind == "plain" else _TOOL)
    last = benchmark(batch)
    batch.close()
    assert last.status.value == "completed"


def _get_order(order_id: str) -> dict[str, str]:
    return {"order_id": order_id, "status": "shipped"}


async def _get_order_async(order_id: str) -> dict[str, str]:
    """The tool an asyncio service would write."""
    return _get_order(order_id)


async def _get_order_to_thread(order_id: str) -> dict[str, str]:
    """The plain tool as a user would hand it to a thread without the runner's workers."""
    return await asyncio.to_thread(_get_order, order_id)


_ASYNC_TOOLS = {
    "async-async-tool": Tool("get_order", _get_order_async),
    "async-to-thread-tool": Tool("get_order", _get_order_to_thread),
}

CALLS_PER_ROUND = 50
HOP_WORK = 3000  # `_loop_work` rounds between two calls: some 100 µs here
_PLAIN_TOOL = Tool("get_order", _get_order)
_ARGUMENTS = '{"order_id": "ORD-1"}'


def _loop_work(rounds: int) -> int:
    """Work on the loop thread between two calls (the Python of a turn, roughly)."""
    total = 0
    for i in range(rounds):
        total += i * i
    return total


@pytest.mark.parametrize("spacing", ["back to back", "after loop work"])
@pytest.mark.parametrize("hop", ["to_thread", "run_in_executor", "inline"])
def test_plain_call_hop(benchmark: Any, hop: str, spacing: str) -> None:
    """One plain call from a running loop, by each way there is to make it."""
    benchmark.group = f"plain call hop ({CALLS_PER_ROUND} calls per round, {spacing})"
    benchmark.extra_info["calls_per_round"] = CALLS_PER_ROUND
    work = HOP_WORK if spacing == "after loop work" else 0
    loop = asyncio.new_event_loop()

    async def calls_made() -> int:
        running = asyncio.get_running_loop()
        calls = 0
        for _ in range(CALLS_PER_ROUND):
            if work:
                _loop_work(work)
            if hop == "to_thread":
                outcome = await asyncio.to_thread(_PLAIN_TOOL.invoke, _ARGUMENTS)
            elif hop == "run_in_executor":
                outcome = await running.run_in_executor(None, _PLAIN_TOOL.invoke, _ARGUMENTS)
            else:
                outcome = _PLAIN_TOOL.invoke(_ARGUMENTS)
            calls += not outcome.is_error
        return calls

    try:
        loop.run_until_complete(calls_made())  # threads started before the first round
        calls = benchmark(lambda: loop.run_until_complete(calls_made()))
    finally:
        loop.close()
    assert calls == CALLS_PER_ROUND


ALTERNATING_ROUNDS = 30


@pytest.mark.parametrize("turn_kind", ["plain", "tool"])
def test_turns_alternating(
    benchmark: Any,
    async_runner_store: tuple[str, Any, dict[int, str], asyncio.AbstractEventLoop],
    turn_kind: str,
) -> None:
    """The batches of ``test_turns_in_a_running_loop``, every runner kind's in each round (in a
    rotating order), so they all see the same load: the rows of that test run one after the
    other, and on a shared machine the load moves between them by more than the runners
    differ. Per kind, the fastest batch and the median in ``extra_info`` (ms per turn), and for
    each async kind its ratio to the blocking runner: of the fastest batches, and the median
    and the 90th percentile of the rounds' own ratios; printed with ``-s``. The row's own time
    is a whole round."""
    kind = async_runner_store[0]
    benchmark.group = f"runner turns alternating ({turn_kind}, {TURNS_PER_CALL} per batch) {kind}"
    replies = _PLAIN if turn_kind == "plain" else _TOOL
    kinds = RUNNER_KINDS if turn_kind == "tool" else RUNNER_KINDS[:2]  # a plain turn calls no tool
    batches = {
        runner_kind: _Batch(runner_kind, async_runner_store, replies) for runner_kind in kinds
    }
    times: dict[str, list[float]] = {runner_kind: [] for runner_kind in kinds}
    rounds = itertools.count()
    lasts: list[Any] = []

    def round_of_all() -> None:
        shift = next(rounds) % len(kinds)
        for runner_kind in kinds[shift:] + kinds[:shift]:
            start = time.perf_counter()
            lasts.append(batches[runner_kind]())
            times[runner_kind].append((time.perf_counter() - start) / TURNS_PER_CALL)

    benchmark.pedantic(round_of_all, rounds=ALTERNATING_ROUNDS, warmup_rounds=len(kinds))
    for batch in batches.values():
        batch.close()
    warmed = len(kinds) if len(times["blocking"]) > len(kinds) else 0  # one round if disabled
    blocking = times["blocking"][warmed:]  # after the warm-up rounds
    lines = []
    for runner_kind in kinds:
        mine = times[runner_kind][warmed:]
        key = runner_kind.replace("-", "_")
        benchmark.extra_info[f"{key}_min_ms"] = round(min(mine) * 1e3, 3)
        benchmark.extra_info[f"{key}_median_ms"] = round(statistics.median(mine) * 1e3, 3)
        line = (
            f"{runner_kind}: min {min(mine) * 1e3:.3f} median {statistics.median(mine) * 1e3:.3f}"
        )
        if runner_kind != "blocking":
            ratios = sorted(a / b for a, b in zip(mine, blocking, strict=True))
            figures = {
                "ratio_of_mins": min(mine) / min(blocking),
                "ratio_median": statistics.median(ratios),
                "ratio_p90": ratios[int(len(ratios) * 0.9) - 1],
            }
            for name, value in figures.items():
                benchmark.extra_info[f"{key}_{name}"] = round(value, 3)
            line += " ms/turn; over blocking: " + ", ".join(
                f"{name} {value:.2f}" for name, value in figures.items()
            )
        else:
            line += " ms/turn"
        lines.append(line)
    print(f"\n{kind}, {turn_kind} turns alternating:\n  " + "\n  ".join(lines))
    assert all(last.status.value == "completed" for last in lasts)


def test_500_conversations_on_one_loop(benchmark: Any) -> None:
    """Turns per second and runner overhead with 500 conversations waiting on a 50 ms model."""
    benchmark.group = "async runner: 500 concurrent conversations, 50 ms model"
    _five_hundred_conversations(benchmark, {})


def test_500_conversations_traced(benchmark: Any) -> None:
    """The same with OpenTelemetry tracing on: the SDK, every span exported at once to an
    in-memory exporter (four spans a turn: the turn, two model calls and a tool call)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from agentctx_fast.observability.otel import OtelTracing

    benchmark.group = "async runner: 500 concurrent conversations, 50 ms model, traced"
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    _five_hundred_conversations(benchmark, {"tracing": OtelTracing(provider)})


def _five_hundred_conversations(benchmark: Any, options: dict[str, Any]) -> None:
    """500 conversations on one loop, with a runner made with ``options``."""
    conversations = 500
    wait = 0.05

    async def main() -> dict[str, float]:
        store = AsyncInMemoryAgentStore()
        runner = AsyncAgentRunner(store, **options)
        agent = _agent(_TOOL, delay=wait)
        for i in range(conversations):  # a short history in each conversation
            memory = store.chat_memory(f"c{i}")
            for message in tool_history(40):
                await memory.add_message_if_absent(message)
        lags: list[float] = []
        stop = asyncio.Event()

        async def ticker() -> None:
            while not stop.is_set():
                before = time.perf_counter()
                await asyncio.sleep(0.001)
                lags.append(time.perf_counter() - before - 0.001)

        async def one(i: int) -> float:
            await asyncio.sleep(i * 0.001)  # requests arrive over half a second, not at once
            start = time.perf_counter()
            turn = await runner.run(agent, f"c{i}", "Where is my order?")
            assert turn.status.value == "completed"
            # The scripted model is shared, so concurrent turns take its replies in turn: a
            # turn's model time is its own count of model calls times the wait.
            return time.perf_counter() - start - turn.step_count * wait

        tick = asyncio.ensure_future(ticker())
        start = time.perf_counter()
        overheads = await asyncio.gather(*(one(i) for i in range(conversations)))
        elapsed = time.perf_counter() - start
        stop.set()
        await tick
        await runner.aclose()
        ordered = sorted(overheads)
        return {
            "turns_per_second": round(conversations / elapsed, 1),
            "overhead_p50_ms": round(statistics.median(ordered) * 1e3, 2),
            "overhead_p99_ms": round(ordered[int(len(ordered) * 0.99) - 1] * 1e3, 2),
            "loop_lag_max_ms": round(max(lags) * 1e3, 2),
        }

    results: list[dict[str, float]] = []
    benchmark.pedantic(lambda: results.append(asyncio.run(main())), rounds=1, iterations=1)
    benchmark.extra_info.update(results[-1])
    pauses: list[float] = []
    with _collections_timed(pauses):
        benchmark.extra_info["longest_step_ms"] = _longest_step_ms(main)
    benchmark.extra_info["longest_gc_pause_ms"] = round(max(pauses, default=0.0) * 1e3, 2)
    benchmark.extra_info["longest_step_gc_off_ms"] = _longest_step_ms(main, collect=False)


@contextlib.contextmanager
def _collections_timed(pauses: list[float]) -> Iterator[None]:
    """Appends to ``pauses`` how long each garbage collection takes meanwhile."""
    started = [0.0]

    def timed(phase: str, _info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            pauses.append(time.perf_counter() - started[0])

    gc.callbacks.append(timed)
    try:
        yield
    finally:
        gc.callbacks.remove(timed)


def _longest_step_ms(
    main: Callable[[], Coroutine[Any, Any, Any]], *, collect: bool = True
) -> float:
    """The longest single step (callback) the loop ran while ``main`` runs, timed around each
    ``Handle._run`` in normal mode (asyncio's debug mode, which reports slow callbacks too,
    slows every step several times over), with the cyclic garbage collector off when not
    ``collect``. The setup's first step (filling the conversations) is not counted."""
    durations: list[float] = []
    original = asyncio.events.Handle._run
    clock = time.perf_counter

    def timed(handle: asyncio.Handle) -> None:
        before = clock()
        original(handle)
        took = clock() - before
        if took > 0.0005 and not _is_setup(handle):
            durations.append(took)

    if not collect:
        gc.collect()
        gc.disable()
    asyncio.events.Handle._run = timed  # type: ignore[method-assign]
    try:
        asyncio.run(main())
    finally:
        asyncio.events.Handle._run = original  # type: ignore[method-assign]
        gc.enable()
    return round(max(durations, default=0.0) * 1e3, 2)


def _is_setup(handle: asyncio.Handle) -> bool:
    """Whether ``handle`` steps the benchmark's own ``main`` coroutine (its setup) or
    ``asyncio.run``'s shutdown, which are not the library's steps."""
    owner = getattr(handle._callback, "__self__", None)  # a task's step: bound to the task
    if isinstance(owner, asyncio.Task):
        return owner.get_coro().__qualname__.endswith("main")  # type: ignore[union-attr]
    return "shutdown" in getattr(handle._callback, "__qualname__", "")


__all__ = ["Message"]
