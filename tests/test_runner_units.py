"""The runner's units of store I/O (several store calls in one trip, on the async SQLite store
a trip to a connection's thread): they change the number of trips, never what a turn does or
where a user's callable runs. Each case runs on the async and the blocking runner, over an
in-memory store and SQLite, and every kind must observe the same."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
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
    ScriptedChatModel,
    Tool,
    ToolCall,
    UserMessage,
)
from agentctx_fast._units import shared_port
from agentctx_fast.observability import metrics as m
from agentctx_fast.stores.serializer import JsonAgentStoreSerializer
from agentctx_fast.stores.sql import AsyncSqlAgentStore, SqlAgentStore

KINDS = ("async-memory", "async-sqlite", "async-sqlite-file", "blocking-memory", "blocking-sqlite")
ASYNC_KINDS = tuple(kind for kind in KINDS if kind.startswith("async"))

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="none")
"""What a caller's context carries (a request id, a tracing span)."""


def _replies() -> list[AiMessage]:
    """A plain turn, then a tool turn (a reply with a call, then the answer)."""
    return [
        AiMessage("Hello."),
        AiMessage(tool_calls=(ToolCall("call-1", "lookup", '{"order_id": "o1"}'),)),
        AiMessage("It has shipped."),
    ]


def _agent(kind: str, replies: list[AiMessage]) -> Agent:
    model: Any = (
        AsyncScriptedChatModel(replies) if kind.startswith("async") else ScriptedChatModel(replies)
    )
    return Agent("a", model, tools=[Tool("lookup", lambda order_id: {"order_id": order_id})])


class Place:
    """Notes where the user's callables run: the caller's context, thread and event loop."""

    def __init__(self) -> None:
        self.seen: set[tuple[str, str, bool, bool]] = set()

    def note(self, what: str) -> None:
        try:
            asyncio.get_running_loop()
            loop = True
        except RuntimeError:
            loop = False
        on_main = threading.current_thread() is threading.main_thread()
        self.seen.add((what, request_id.get(), on_main, loop))


class Sink:
    """A metrics sink of the user's: what it received (model latency left out, and the value
    and store of the other timings: they vary) and where; ``fail_on``: the metric whose first
    observation raises `Boom`."""

    def __init__(self, place: Place, fail_on: str | None = None) -> None:
        self.place = place
        self.received: list[tuple[str, float, dict[str, str]]] = []
        self.fail_on = fail_on

    def record(self, metric: str, value: float, labels: Mapping[str, str]) -> None:
        self.place.note("metrics")
        if metric == self.fail_on:
            self.fail_on = None
            raise Boom(metric)
        if metric.endswith("_seconds"):
            value, labels = 0.0, {k: v for k, v in labels.items() if k != "store"}
        if metric != m.MODEL_LATENCY_SECONDS:
            self.received.append((metric, value, dict(labels)))


class LoopSink:
    """A sink that needs the caller's event loop (e.g. to schedule an export)."""

    def __init__(self) -> None:
        self.loops: list[asyncio.AbstractEventLoop] = []

    def record(self, metric: str, value: float, labels: Mapping[str, str]) -> None:
        self.loops.append(asyncio.get_running_loop())


class Clock:
    """A clock of the user's: a fixed time (every kind then stores the same bytes)."""

    def __init__(self, place: Place) -> None:
        self.place = place

    def __call__(self) -> float:
        self.place.note("clock")
        return 1_000_000.0


class Serializer(JsonAgentStoreSerializer):
    """A serializer of the user's (the library's format, noting where it runs)."""

    def __init__(self, place: Place) -> None:
        self.place = place

    def dumps(self, obj: object) -> bytes:
        self.place.note("serializer")
        return super().dumps(obj)

    def loads(self, data: bytes) -> Any:
        self.place.note("serializer")
        return super().loads(data)


class Boom(Exception):
    pass


def _sqlite_url(kind: str, tmp_path: Path) -> str:
    url = "sqlite://" if kind == "async-sqlite" else f"sqlite:///{tmp_path / 'agent.db'}"
    if url != "sqlite://":
        tmp_path.mkdir(parents=True, exist_ok=True)
        blocking = SqlAgentStore(url)
        blocking.schema.initialize()
        blocking.close()
    return url


def _drive(
    kind: str,
    tmp_path: Path,
    body: Callable[[Any, Any], Any],
    *,
    metrics: Any = None,
    clock: Any = None,
    serializer: Any = None,
) -> Any:
    """``body(runner, store)`` on a runner of ``kind``, in a context whose request id is
    ``r-42``; a blocking body is a plain function, an async one a coroutine function."""
    options: dict[str, Any] = {"metrics": metrics}
    if clock is not None:
        options["clock"] = clock
    store_options = {} if serializer is None else {"serializer": serializer}

    async def main() -> Any:
        request_id.set("r-42")
        if kind == "async-memory":
            store: Any = AsyncInMemoryAgentStore()
        else:
            store = AsyncSqlAgentStore(_sqlite_url(kind, tmp_path), **store_options)
            if kind == "async-sqlite":
                await store.schema.initialize()
        runner = AsyncAgentRunner(store, **options)
        try:
            return await body(runner, store)
        finally:
            await runner.aclose()
            if kind != "async-memory":
                await store.aclose()

    if kind.startswith("async"):
        return contextvars.copy_context().run(asyncio.run, main())

    def blocking() -> Any:
        request_id.set("r-42")
        if kind == "blocking-memory":
            store: Any = InMemoryAgentStore()
        else:
            store = SqlAgentStore(_sqlite_url(kind, tmp_path), **store_options)
        runner = AgentRunner(store, **options)
        try:
            return body(runner, store)
        finally:
            runner.close()
            if kind != "blocking-memory":
                store.close()

    return contextvars.copy_context().run(blocking)


def _two_turns(kind: str) -> Callable[[Any, Any], Any]:
    """A plain turn and a tool turn on conversation ``c1``: their statuses."""
    agent = _agent(kind, _replies())

    if kind.startswith("async"):

        async def run_async(runner: Any, _store: Any) -> list[str]:
            first = await runner.run(agent, "c1", "hi", turn_id="t1")
            second = await runner.run(agent, "c1", "where is o1?", turn_id="t2")
            return [first.status.value, second.status.value]

        return run_async

    def run_blocking(runner: Any, _store: Any) -> list[str]:
        first = runner.run(agent, "c1", "hi", turn_id="t1")
        second = runner.run(agent, "c1", "where is o1?", turn_id="t2")
        return [first.status.value, second.status.value]

    return run_blocking


# -- run_history: no store, no trip -----------------------------------------------------------


@pytest.mark.parametrize("runner_kind", ["async", "blocking"])
def test_run_history_never_touches_the_store(runner_kind: str, tmp_path: Path) -> None:
    """``run_history`` has no conversation in the store: a store that cannot even open its
    database (its directory does not exist) is never asked, on either runner."""
    url = f"sqlite:///{tmp_path / 'missing' / 'agent.db'}"
    replies = _replies()[1:]  # a tool step, then the answer: two replies recorded
    history = [UserMessage("earlier", message_id="h1")]

    async def main() -> list[str]:
        store = AsyncSqlAgentStore(url)
        runner = AsyncAgentRunner(store)
        try:
            turn = await runner.run_history(_agent("async", replies), history, "where is o1?")
        finally:
            await runner.aclose()
            await store.aclose()
        return [turn.status.value, *(msg.text or "" for msg in turn.messages[-1:])]

    if runner_kind == "async":
        outcome = asyncio.run(main())
    else:
        store = SqlAgentStore(url)
        runner = AgentRunner(store)
        try:
            turn = runner.run_history(_agent("blocking", replies), history, "where is o1?")
        finally:
            runner.close()
            store.close()
        outcome = [turn.status.value, *(msg.text or "" for msg in turn.messages[-1:])]
    assert outcome == ["completed", "It has shipped."]
    assert not (tmp_path / "missing").exists()


def test_run_history_checks_out_no_connection(tmp_path: Path) -> None:
    """On a working async SQLite store, ``run_history`` takes no connection at all (a turn of
    a conversation does)."""
    from sqlalchemy import event

    url = _sqlite_url("async-sqlite-file", tmp_path)
    checkouts: list[int] = []

    async def main() -> tuple[str, int, int]:
        store = AsyncSqlAgentStore(url)
        event.listen(store.engine, "checkout", lambda *_: checkouts.append(1))
        runner = AsyncAgentRunner(store)
        try:
            turn = await runner.run_history(
                _agent("async", _replies()[1:]), [UserMessage("earlier")], "where is o1?"
            )
            history_checkouts = len(checkouts)
            await runner.run(_agent("async", [AiMessage("Hello.")]), "c1", "hi")
        finally:
            await runner.aclose()
            await store.aclose()
        return turn.status.value, history_checkouts, len(checkouts)

    status, during_history, after_a_stored_turn = asyncio.run(main())
    assert (status, during_history) == ("completed", 0)
    assert after_a_stored_turn > 0  # the counter counts: a stored turn takes connections


# -- the user's callables run on the caller's side --------------------------------------------


def _observed(kind: str, tmp_path: Path) -> tuple[list[str], Sink, Place]:
    place = Place()
    sink = Sink(place)
    serializer = Serializer(place) if "sqlite" in kind else None
    statuses = _drive(
        kind, tmp_path, _two_turns(kind), metrics=sink, clock=Clock(place), serializer=serializer
    )
    return statuses, sink, place


def test_every_store_gives_the_sink_the_same_observations(tmp_path: Path) -> None:
    """Metrics, with the same values in the same order, whatever the store and the runner."""
    outcomes = {}
    for kind in KINDS:
        statuses, sink, _ = _observed(kind, tmp_path / kind)
        outcomes[kind] = (statuses, sink.received)
    reference = outcomes["async-memory"]
    assert reference[0] == ["completed", "completed"]
    # a save per turn ended and per tool step, and one recording the step's call as started
    assert [metric for metric, _, _ in reference[1]].count(m.SNAPSHOT_BYTES) == 4
    assert [metric for metric, _, _ in reference[1]].count(m.TURN_STEPS) == 2
    for kind, outcome in outcomes.items():
        assert outcome == reference, kind


@pytest.mark.parametrize("kind", ASYNC_KINDS)
def test_the_async_runner_calls_the_users_code_in_the_callers_context(
    kind: str, tmp_path: Path
) -> None:
    """The metrics sink, the clock and a serializer of the user's run in the context of the
    task that awaits the turn, on its thread, with its event loop running: never on a
    connection's thread (where a contextvar reads its default and there is no loop)."""
    statuses, _, place = _observed(kind, tmp_path)
    assert statuses == ["completed", "completed"]
    expected = {"metrics", "clock"} | ({"serializer"} if "sqlite" in kind else set())
    assert place.seen == {(what, "r-42", True, True) for what in expected}


@pytest.mark.parametrize("kind", ["blocking-memory", "blocking-sqlite"])
def test_the_blocking_runner_calls_the_sink_in_the_callers_context(
    kind: str, tmp_path: Path
) -> None:
    statuses, sink, place = _observed(kind, tmp_path)
    assert statuses == ["completed", "completed"]
    assert sink.received
    seen = {entry for entry in place.seen if entry[0] in ("metrics", "serializer")}
    expected = {"metrics"} | ({"serializer"} if "sqlite" in kind else set())
    assert seen == {(what, "r-42", True, False) for what in expected}


@pytest.mark.parametrize("kind", ASYNC_KINDS)
def test_a_sink_that_needs_the_event_loop_works_on_every_store(kind: str, tmp_path: Path) -> None:
    sink = LoopSink()

    async def body(runner: Any, _store: Any) -> tuple[list[str], bool]:
        statuses = await _two_turns(kind)(runner, _store)
        loop = asyncio.get_running_loop()
        return statuses, all(seen is loop for seen in sink.loops)

    statuses, on_the_loop = _drive(kind, tmp_path, body, metrics=sink)
    assert statuses == ["completed", "completed"]
    assert sink.loops and on_the_loop


def _status_and_error(turn: Any) -> str:
    return turn.status.value + (f" ({turn.error})" if turn.error else "")


def _after_a_failing_sink(kind: str, tmp_path: Path, fail_on: str) -> tuple[str, str, str]:
    """A two-step turn whose sink raises once, at ``fail_on``: what the run raised, the turn's
    stored status, and the status of a next turn of the conversation (its lease is free)."""
    sink = Sink(Place(), fail_on=fail_on)
    agent = _agent(kind, _replies()[1:])
    after = _agent(kind, [AiMessage("Hello.")])

    if kind.startswith("async"):

        async def body(runner: Any, _store: Any) -> tuple[str, str, str]:
            try:
                await runner.run(agent, "c1", "where is o1?", turn_id="t1")
                raised = "nothing"
            except Exception as error:
                raised = f"{type(error).__name__}: {error}"
            stored = _status_and_error(await runner.turn("c1", "t1"))
            next_turn = (await runner.run(after, "c1", "hi", turn_id="t2")).status.value
            return raised, stored, next_turn

        result: tuple[str, str, str] = _drive(kind, tmp_path, body, metrics=sink)
        return result

    def blocking(runner: Any, _store: Any) -> tuple[str, str, str]:
        try:
            runner.run(agent, "c1", "where is o1?", turn_id="t1")
            raised = "nothing"
        except Exception as error:
            raised = f"{type(error).__name__}: {error}"
        stored = _status_and_error(runner.turn("c1", "t1"))
        next_turn = runner.run(after, "c1", "hi", turn_id="t2").status.value
        return raised, stored, next_turn

    result = _drive(kind, tmp_path, blocking, metrics=sink)
    return result


@pytest.mark.parametrize(
    ("fail_on", "expected"),
    [
        # at the turn's end: the turn is recorded completed and its lease freed
        (m.TURN_STEPS, ("Boom: agentctx_turn_steps", "completed", "completed")),
        # at the tool step's record: the runner closes the turn failed, naming the error
        (
            m.SNAPSHOT_BYTES,
            (
                "Boom: agentctx_snapshot_bytes",
                "failed (the runner stopped on an error: Boom)",
                "completed",
            ),
        ),
    ],
)
def test_a_failing_sink_leaves_no_turn_or_lease_open(
    fail_on: str, expected: tuple[str, str, str], tmp_path: Path
) -> None:
    """The sink's error reaches the caller; the turn is closed and its conversation free,
    the same on every store and both runners."""
    outcomes = {kind: _after_a_failing_sink(kind, tmp_path / kind, fail_on) for kind in KINDS}
    assert outcomes == dict.fromkeys(KINDS, expected)


# -- a method replaced on an instance ---------------------------------------------------------


def test_a_method_replaced_on_an_instance_sees_every_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chat memory and a turn store with a method replaced on the instance: the runner
    makes every one of its calls through the replacement, on the caller's event loop (none
    is batched around it in a unit on a connection's thread)."""
    url = _sqlite_url("async-sqlite-file", tmp_path)
    added: list[str] = []
    saved: list[str] = []

    async def main() -> tuple[list[str], list[str], set[bool]]:
        store = AsyncSqlAgentStore(url)
        memory = store.chat_memory("c1")
        places: set[bool] = set()
        add = memory.add_message_if_absent

        async def adding(message: Any) -> bool:
            asyncio.get_running_loop()  # raises on a connection's thread
            places.add(threading.current_thread() is threading.main_thread())
            added.append(message.message_id)
            return await add(message)

        monkeypatch.setattr(memory, "add_message_if_absent", adding)
        runner = AsyncAgentRunner(store, chat_memory_provider=lambda _id: memory)
        turns = runner.turn_store
        save = turns.save_turn

        async def saving(snapshot: Any, expected_version: int, fence: Any = None) -> bool:
            asyncio.get_running_loop()
            places.add(threading.current_thread() is threading.main_thread())
            saved.append(snapshot.status.value)
            return bool(await save(snapshot, expected_version, fence))

        monkeypatch.setattr(turns, "save_turn", saving)
        try:
            assert shared_port(turns, memory) is None
            assert shared_port(turns, None) is None
            assert shared_port(store.turn_store(), store.chat_memory("c1")) is not None
            statuses = []
            for text, turn_id in (("hi", "t1"), ("where is o1?", "t2")):
                agent = _agent("async", _replies() if turn_id == "t1" else _replies()[1:])
                statuses.append((await runner.run(agent, "c1", text, turn_id=turn_id)).status)
            stored = [msg.message_id for msg in await store.chat_memory("c1").get_messages()]
        finally:
            await runner.aclose()
            await store.aclose()
        assert [status.value for status in statuses] == ["completed", "completed"]
        return stored, saved, places

    stored, saves, places = asyncio.run(main())
    assert added == stored  # every message the runner stored went through the replacement
    assert len(stored) == 6  # t1: user, reply; t2: user, call, result, answer
    # t1: opened, completed; t2: opened, its tool's call recorded as started (SPEC §20), its
    # tool step, completed
    assert saves == ["running", "completed", "running", "running", "running", "completed"]
    assert places == {True}


def test_a_users_serializer_makes_the_store_offer_no_unit(tmp_path: Path) -> None:
    url = _sqlite_url("async-sqlite-file", tmp_path)

    async def main() -> tuple[Any, Any, Any]:
        own = AsyncSqlAgentStore(url)
        mine = AsyncSqlAgentStore(url, serializer=Serializer(Place()))
        replaced = AsyncSqlAgentStore(url)
        replaced.serializer.dumps = lambda obj: b""  # type: ignore[method-assign]
        try:
            return tuple(
                shared_port(store.turn_store(), store.chat_memory("c1"))
                for store in (own, mine, replaced)
            )
        finally:
            for store in (own, mine, replaced):
                await store.aclose()

    own_port, user_serializer, replaced_method = asyncio.run(main())
    assert own_port is not None
    assert user_serializer is None and replaced_method is None
