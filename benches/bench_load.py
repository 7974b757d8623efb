"""Many service instances on one database, with a crash (SPEC §19, issue 15).

    python3 benches/bench_load.py [--workers 4] [--conversations 40] [--turns 6]
        [--backends postgresql,redis-cluster] [--postgres URL] [--redis-cluster URL] [--json]

For each backend, ``--workers`` processes (service instances) each run the turns of their own
``--conversations`` conversations concurrently on one event loop (`AsyncAgentRunner` over
`AsyncSqlAgentStore` or `AsyncRedisAgentStore`, one pooled engine or one cluster client per
process; ``--driver threads`` runs `AgentRunner` on the blocking store, a thread per
conversation, instead). The model waits
``--model-ms`` per call and asks for one or two tools on each request; the tools return results
of a few KB. Once worker 0 has done ``--kill-at`` of its turns, it is SIGKILLed in the middle of
its turns and a replacement takes over its conversations: it carries on from the first request
the store does not hold; its first `run` on a conversation meets the dead worker's lease, waits
for it to expire and then closes the interrupted turn `FAILED` (its unanswered calls get error
results); an interrupted last request is cancelled instead.

Afterwards the stored conversations are audited against the workers' logs: acknowledged
messages lost, requests or messages duplicated, histories whose tool protocol is invalid,
leases still held by dead workers after their expiry and turns left RUNNING with no live
owner; each must be 0. Without URLs the servers are started here (Debian's PostgreSQL and a
three-master Redis Cluster on loopback ports, as the tests do) and stopped afterwards.
tests/test_load.py runs a small version and asserts the zeros.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

from agentctx_fast import (
    Agent,
    AgentConversationBusyError,
    AgentCtxError,
    AgentRunner,
    AiMessage,
    AsyncAgentRunner,
    LeaseLostError,
    Message,
    StoreUnavailableError,
    Tool,
    ToolCall,
    ToolMessage,
    TurnStateError,
    TurnStatus,
    UserMessage,
    validate_tool_protocol,
)

BACKENDS = ("postgresql", "redis-cluster")


@dataclass(frozen=True)
class LoadConfig:
    """What one run does; the defaults fit in about two minutes for both backends."""

    workers: int = 4
    conversations: int = 40  # per worker, all in flight at once
    turns: int = 6  # requests per conversation
    model_seconds: float = 0.005
    tool_result_bytes: int = 3000
    lease_seconds: float = 3.0
    kill_at: float = 0.4  # share of its turns worker 0 has done when it is killed
    # Worker 1 is stopped (SIGSTOP) at the same point, past its lease, while a second worker
    # takes its conversations over; it is continued once that worker has ended a turn on each
    # conversation it was in the middle of, after at least this long (0: no pause).
    pause_seconds: float = 1.0
    # Every worker reaches its servers through loopback proxies that lose the reply to every
    # ``drop_every``-th command after the server ran it (0: no proxies).
    drop_every: int = 40
    timeout_seconds: float = 600.0
    # "async": AsyncAgentRunner on the async store; "threads": AgentRunner on the blocking
    # store, one thread per conversation.
    driver: str = "async"


@dataclass
class LoadReport:
    """The figures and the audit of one run on one backend."""

    backend: str
    config: LoadConfig
    driver: str
    seconds: float = 0.0
    completed_turns: int = 0
    turns_per_second: float = 0.0
    overhead_p50_ms: float = 0.0
    overhead_p99_ms: float = 0.0
    interrupted_turns: int = 0  # started by the killed worker, never ended there
    paused_turns: int = 0  # in flight in the paused worker when it was stopped
    lost_leases: int = 0  # turns the paused worker found taken over once continued
    lost_replies: int = 0  # replies the proxies dropped after the server acted
    requests_completed: int = 0  # stored requests whose turn is COMPLETED
    requests_interrupted: int = 0  # stored requests whose turn the kill ended (FAILED, CANCELLED)
    messages_lost: int = 0
    messages_duplicated: int = 0
    invalid_protocol_histories: int = 0
    dead_leases_after_expiry: int = 0
    running_turns_without_owner: int = 0
    requests_missing: int = 0
    failed_workers: list[str] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list, repr=False)  # until audited

    def audit_is_clean(self) -> bool:
        return not (
            self.messages_lost
            or self.messages_duplicated
            or self.invalid_protocol_histories
            or self.dead_leases_after_expiry
            or self.running_turns_without_owner
            or self.requests_missing
            or self.failed_workers
        )


# -- the service a worker runs ----------------------------------------------------------------


def request_text(k: int) -> str:
    return f"request {k}: where are my orders, and when will they arrive?"


def request_index(message: Message) -> int | None:
    """The request number of a stored user message of this benchmark, else None."""
    if isinstance(message, UserMessage) and message.text.startswith("request "):
        return int(message.text.split(":", 1)[0].removeprefix("request "))
    return None


class LoadModel:
    """An async model that waits, asks for one or two lookups on a request and answers once
    their results are in; ids come from the window, so a resumed or retried turn gets the same
    replies."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    async def chat(self, messages: Sequence[Message], tools: Sequence[Any]) -> AiMessage:
        await asyncio.sleep(self.seconds)
        return self.reply(messages)

    def reply(self, messages: Sequence[Message]) -> AiMessage:
        last = messages[-1]
        if isinstance(last, UserMessage):
            count = 1 + (len(last.message_id) % 2)
            calls = tuple(
                ToolCall(f"{last.message_id}:c{i}", "lookup_orders", json.dumps({"page": i}))
                for i in range(count)
            )
            return AiMessage(tool_calls=calls)
        answered = sum(isinstance(m, ToolMessage) for m in messages)
        return AiMessage(f"I found your orders ({answered} lookups in this window).")


class BlockingLoadModel(LoadModel):
    """`LoadModel` for `AgentRunner`: the wait blocks its thread."""

    def chat(self, messages: Sequence[Message], tools: Sequence[Any]) -> AiMessage:  # type: ignore[override]
        time.sleep(self.seconds)
        return self.reply(messages)


def make_agent(config: LoadConfig, *, blocking: bool = False) -> Agent:
    def orders(page: int) -> str:
        rows, size = [], 0
        while size < config.tool_result_bytes:
            row = {"order_id": f"ORD-{page}-{len(rows):04d}", "status": "shipped", "eta": "2d"}
            rows.append(row)
            size += len(json.dumps(row)) + 2
        return json.dumps(rows)

    async def lookup_orders(page: int) -> str:
        return orders(page)

    model = (BlockingLoadModel if blocking else LoadModel)(config.model_seconds)
    return Agent(
        "load",
        model,
        instructions="You are the support agent of a web shop.",
        tools=[Tool("lookup_orders", orders if blocking else lookup_orders)],
        max_attached_turns=6,
    )


def open_async_store(backend: str, url: str, prefix: str, remap: dict[str, int] | None) -> Any:
    if backend == "postgresql":
        from agentctx_fast.stores.sql import AsyncSqlAgentStore

        return AsyncSqlAgentStore(url, table_prefix=prefix)
    from redis.asyncio.cluster import RedisCluster

    from agentctx_fast.stores.redis import AsyncRedisAgentStore

    client = RedisCluster.from_url(url, address_remap=_remap(remap))
    return AsyncRedisAgentStore(client, key_prefix=prefix)


def open_store(backend: str, url: str, prefix: str, remap: dict[str, int] | None = None) -> Any:
    if backend == "postgresql":
        from agentctx_fast.stores.sql import SqlAgentStore

        return SqlAgentStore(url, table_prefix=prefix)
    from redis.cluster import RedisCluster

    from agentctx_fast.stores.redis import RedisAgentStore

    client = RedisCluster.from_url(url, address_remap=_remap(remap))
    return RedisAgentStore(client, key_prefix=prefix)


def _remap(ports: dict[str, int] | None) -> Any:
    """The cluster nodes' addresses as a worker reaches them: through its proxies, if any."""
    if not ports:
        return None
    return lambda address: ("127.0.0.1", ports.get(str(address[1]), address[1]))


def close_store(store: Any) -> None:
    store.close()
    if hasattr(store, "client"):
        store.client.close()  # the store did not make it, so it leaves it open


class Log:
    """A worker's JSON lines, each written through at once (a SIGKILL loses none)."""

    def __init__(self, handle: TextIO) -> None:
        self._handle = handle

    def write(self, event: str, **fields: Any) -> None:
        self._handle.write(json.dumps({"event": event, **fields}) + "\n")
        self._handle.flush()


def serve_threads(spec: dict[str, Any]) -> None:
    """A worker on the blocking store: one thread per conversation, one `AgentRunner`."""
    config = LoadConfig(**spec["config"])
    store = open_store(spec["backend"], spec["url"], spec["prefix"], spec.get("remap"))
    runner = AgentRunner(store, lease_seconds=config.lease_seconds)
    agent = make_agent(config, blocking=True)
    with (
        open(spec["log"], "a", buffering=1, encoding="utf-8") as handle,
        ThreadPoolExecutor(len(spec["conversations"])) as pool,
    ):
        log = Log(handle)
        log.write("ready", pid=os.getpid())
        try:
            work = [
                pool.submit(
                    blocking_conversation, store, runner, agent, config, cid, log, i * 0.003
                )
                for i, cid in enumerate(spec["conversations"])
            ]
            for done in work:
                done.result()
        finally:
            runner.close()
            close_store(store)
        log.write("done")


def blocking_conversation(
    store: Any, runner: Any, agent: Agent, config: LoadConfig, cid: str, log: Log, delay: float
) -> None:
    """`conversation` in a thread, on the blocking store and runner."""
    time.sleep(delay)
    attempts: Counter[int] = Counter()
    while True:
        try:
            k = next_request(store.chat_memory(cid).get_messages())
            if k >= config.turns and blocking_cancel_dead_turn(store, runner, cid, log):
                log.write("finished", conversation=cid)
                return
        except StoreUnavailableError as error:  # a lost reply: read again
            log.write("unavailable", conversation=cid, error=str(error))
            continue
        if k >= config.turns:
            continue
        turn_id = f"r{k}.{attempts[k]}-{cid}"
        log.write("start", conversation=cid, request=k, turn=turn_id)
        began = time.perf_counter()
        try:
            turn = runner.run(agent, cid, request_text(k), turn_id=turn_id)
        except AgentConversationBusyError:
            log.write("busy", conversation=cid, request=k, turn=turn_id)
            with contextlib.suppress(StoreUnavailableError):  # a lost reply: ask again
                lease = store.turn_store().open_turn(cid)
                if lease is not None and lease.expires_at:
                    time.sleep(max(0.0, lease.expires_at - time.time()) + 0.05)
            continue
        except (TurnStateError, StoreUnavailableError) as error:
            lost(log, cid, k, turn_id, error, attempts)
            continue
        outcome = taken(log, cid, k, turn, attempts)
        if outcome is not None:
            if outcome == "busy":  # it ends, or once its lease has expired it is cancelled
                with contextlib.suppress(StoreUnavailableError):
                    while not blocking_cancel_dead_turn(store, runner, cid, log):
                        pass
            continue
        log_end(log, cid, k, turn, time.perf_counter() - began, config)


def blocking_cancel_dead_turn(store: Any, runner: Any, cid: str, log: Log) -> bool:
    """`cancel_dead_turn` on the blocking store; False while a live worker still runs it."""
    lease = store.turn_store().open_turn(cid)
    if lease is None or lease.status is not TurnStatus.RUNNING:
        return True
    if lease.expired(time.time()):
        turn = runner.cancel(cid, lease.turn_id)
        log.write("cancelled", conversation=cid, turn=lease.turn_id, status=turn.status.value)
        return True
    time.sleep(max(0.0, (lease.expires_at or 0.0) - time.time()) + 0.05)
    return False


def log_end(log: Log, cid: str, k: int, turn: Any, elapsed: float, config: LoadConfig) -> None:
    log.write(
        "end",
        conversation=cid,
        request=k,
        turn=turn.turn_id,
        status=turn.status.value,
        messages=[m.message_id for m in turn.messages],
        overhead=elapsed - turn.step_count * config.model_seconds,
    )


async def serve(spec: dict[str, Any]) -> None:
    """A worker: every conversation of ``spec`` brought to ``turns`` requests, concurrently."""
    config = LoadConfig(**spec["config"])
    store = open_async_store(spec["backend"], spec["url"], spec["prefix"], spec.get("remap"))
    runner = AsyncAgentRunner(store, lease_seconds=config.lease_seconds)
    agent = make_agent(config)
    with open(spec["log"], "a", buffering=1, encoding="utf-8") as handle:
        log = Log(handle)
        log.write("ready", pid=os.getpid())
        try:
            await asyncio.gather(
                *(
                    conversation(store, runner, agent, config, cid, log, i * 0.003)
                    for i, cid in enumerate(spec["conversations"])
                )
            )
        finally:
            await runner.aclose()
            await store.aclose()
            if hasattr(store, "client"):
                await store.client.aclose()  # the store did not make it, so it leaves it open
        log.write("done")


async def conversation(
    store: Any, runner: Any, agent: Agent, config: LoadConfig, cid: str, log: Log, delay: float
) -> None:
    """The conversation's requests, each the first one the store does not hold yet (another
    worker may be running the same conversation: a turn id per request makes a request run
    once). A turn a dead or paused worker left open is closed by the first `run` of another
    request once its lease expires (the runner records it `FAILED`); it is cancelled when the
    request retried is its own (``run`` returns a turn id it already has as stored: `taken`)
    or when no request is left."""
    await asyncio.sleep(delay)  # arrivals spread out, not all at once
    attempts: Counter[int] = Counter()
    while True:
        try:
            k = next_request(await store.chat_memory(cid).get_messages())
            if k >= config.turns:
                await cancel_dead_turn(store, runner, cid, log)
                log.write("finished", conversation=cid)
                return
        except StoreUnavailableError as error:  # a lost reply: read again
            log.write("unavailable", conversation=cid, error=str(error))
            continue
        turn_id = f"r{k}.{attempts[k]}-{cid}"
        log.write("start", conversation=cid, request=k, turn=turn_id)
        began = time.perf_counter()
        try:
            turn = await runner.run(agent, cid, request_text(k), turn_id=turn_id)
        except AgentConversationBusyError:
            log.write("busy", conversation=cid, request=k, turn=turn_id)
            with contextlib.suppress(StoreUnavailableError):  # a lost reply: ask again
                await wait_for_expiry(store, cid)
            continue
        except (TurnStateError, StoreUnavailableError) as error:
            lost(log, cid, k, turn_id, error, attempts)
            continue
        outcome = taken(log, cid, k, turn, attempts)
        if outcome is not None:
            if outcome == "busy":  # it ends, or once its lease has expired it is cancelled
                with contextlib.suppress(StoreUnavailableError):
                    await cancel_dead_turn(store, runner, cid, log)
            continue
        log_end(log, cid, k, turn, time.perf_counter() - began, config)


def taken(log: Log, cid: str, k: int, turn: Any, attempts: Counter[int]) -> str | None:
    """What to do when ``run`` returned a turn that already had this turn id (another
    worker's with the same id, or this request's, left by a worker stopped in between): such
    a turn comes back as stored, without its messages, and is no turn of this worker. An open
    one is logged as busy ("busy": wait for it to end, or cancel it once its lease has expired,
    a dead worker's, then read again); an ended one as lost ("lost": the request is asked
    again under the next turn id). None for a new turn."""
    if turn.messages:
        return None  # a new turn: its user message at least
    if turn.status in (TurnStatus.RUNNING, TurnStatus.SUSPENDED):
        log.write("busy", conversation=cid, request=k, turn=turn.turn_id)
        return "busy"
    error = TurnStateError(f"turn {turn.turn_id!r} already exists ({turn.status.value})")
    lost(log, cid, k, turn.turn_id, error, attempts)
    return "lost"


def lost(
    log: Log, cid: str, k: int, turn_id: str, error: AgentCtxError, attempts: Counter[int]
) -> None:
    """A turn that could not go on: its lease was lost (this worker was paused past it),
    another worker took its turn id first, or a reply was lost (the store is asked again). A
    request whose turn exists but whose message is not stored (a worker stopped in between)
    is asked again under the next turn id."""
    log.write("lost", conversation=cid, request=k, turn=turn_id, error=str(error))
    if isinstance(error, TurnStateError) and not isinstance(error, LeaseLostError):
        attempts[k] += 1


def next_request(stored: Sequence[Message]) -> int:
    """The number of the first request the conversation does not hold."""
    return max((k for k in map(request_index, stored) if k is not None), default=-1) + 1


async def wait_for_expiry(store: Any, cid: str) -> Any:
    """The conversation's lease, once a running one has expired (a dead worker's)."""
    lease = await store.turn_store().open_turn(cid)
    if lease is not None and lease.status is TurnStatus.RUNNING and lease.expires_at:
        await asyncio.sleep(max(0.0, lease.expires_at - time.time()) + 0.05)
    return lease


async def cancel_dead_turn(store: Any, runner: Any, cid: str, log: Log) -> None:
    """The last request's turn, left open by a dead worker: cancelled once its lease expires
    (its unanswered calls get error results, the lease is freed); a live worker's is left to
    end."""
    while True:
        lease = await wait_for_expiry(store, cid)
        if lease is None or lease.status is not TurnStatus.RUNNING:
            return
        current = await store.turn_store().open_turn(cid)
        if current == lease and lease.expired(time.time()):
            turn = await runner.cancel(cid, lease.turn_id)
            log.write("cancelled", conversation=cid, turn=lease.turn_id, status=turn.status.value)
            return


# -- the run ------------------------------------------------------------------------------------


def read_log(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    events = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            break  # a line cut by the kill
    return events


class Worker:
    def __init__(self, index: int, generation: int, spec: dict[str, Any], workdir: Path) -> None:
        self.name = f"worker-{index}.{generation}"
        self.log = workdir / f"{self.name}.jsonl"
        spec = {**spec, "log": str(self.log)}
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--worker", json.dumps(spec)],
            stdin=subprocess.DEVNULL,
            stderr=open(workdir / f"{self.name}.err", "wb"),  # the child holds it
        )
        self.killed = False
        self.continued = False  # after a pause

    def events(self) -> list[dict[str, Any]]:
        return read_log(self.log)


def _conversations(events: list[dict[str, Any]], turns: set[str]) -> set[str]:
    """The conversations of ``turns``."""
    return {e["conversation"] for e in events if e["event"] == "start" and e["turn"] in turns}


def _reached(worker: Worker, turns: float) -> bool:
    """True once ``worker`` is done with ``turns`` turns (ended, or stopped by a lost reply)
    and has turns in flight."""
    progress = worker.events()
    done = sum(e["event"] in ("end", "lost") for e in progress)
    return done >= turns and bool(in_flight(progress))


def in_flight(events: list[dict[str, Any]]) -> set[str]:
    started = {e["turn"] for e in events if e["event"] == "start"}
    return started - {e["turn"] for e in events if e["event"] in ("end", "busy", "lost")}


def run_load(backend: str, url: str, config: LoadConfig, workdir: Path) -> LoadReport:
    """One run on ``backend`` at ``url`` (a fresh table or key prefix), audited."""
    prefix = (
        f"load{uuid.uuid4().hex[:8]}_"
        if backend == "postgresql"
        else f"load{uuid.uuid4().hex[:8]}:"
    )
    setup = open_store(backend, url, prefix)
    if backend == "postgresql":
        setup.schema.initialize()
    close_store(setup)
    plan = {
        index: [f"c{index}-{n}" for n in range(config.conversations)]
        for index in range(config.workers)
    }
    with ExitStack() as stack:
        dropper = None
        if config.drop_every > 0:
            dropper = stack.enter_context(ReplyDropper(backend, url, prefix, config.drop_every))
        report = _run_workers(backend, url, prefix, config, workdir, plan, dropper)
    audit(report, backend, url, prefix, plan, report.events)
    report.events = []
    if backend == "postgresql":
        cleanup = open_store(backend, url, prefix)
        cleanup.schema.drop()
        close_store(cleanup)
    return report


def _run_workers(
    backend: str,
    url: str,
    prefix: str,
    config: LoadConfig,
    workdir: Path,
    plan: dict[int, list[str]],
    dropper: ReplyDropper | None,
) -> LoadReport:
    """The workers' run, with the kill and the pause; the audit comes after."""
    driver = config.driver
    base = {
        "backend": backend,
        "url": url if dropper is None else dropper.url,
        "remap": None if dropper is None else dropper.remap,
        "prefix": prefix,
        "config": asdict(config),
        "driver": driver,
    }
    report = LoadReport(backend, config, driver)
    began = time.perf_counter()
    workers = [
        Worker(i, 0, {**base, "conversations": plan[i]}, workdir) for i in range(config.workers)
    ]
    deadline = time.monotonic() + config.timeout_seconds
    victim = workers[0]
    paused = workers[1] if config.pause_seconds > 0 and len(workers) > 1 else None
    stopped_at: float | None = None
    held: set[str] = set()
    taker: Worker | None = None
    at = config.kill_at * config.conversations * config.turns
    while not victim.killed or (paused is not None and not paused.continued):
        if not victim.killed and _reached(victim, at):
            victim.process.send_signal(signal.SIGKILL)
            victim.process.wait()
            victim.killed = True
            workers.append(Worker(0, 1, {**base, "conversations": plan[0]}, workdir))
        if paused is not None and stopped_at is None and _reached(paused, at):
            paused.process.send_signal(signal.SIGSTOP)  # past its lease, then continued
            held = _conversations(paused.events(), in_flight(paused.events()))
            if held:
                stopped_at = time.monotonic()
                report.paused_turns = len(held)
                taker = Worker(1, 1, {**base, "conversations": plan[1]}, workdir)
                workers.append(taker)
            else:  # its turns ended before the stop landed: try again
                paused.process.send_signal(signal.SIGCONT)
        if paused is not None and stopped_at is not None and not paused.continued:
            # continued once the taker has ended (or cancelled) a turn on every conversation
            # the paused worker was in the middle of, or finished it, after ``pause_seconds``
            assert taker is not None
            taken = {
                e["conversation"]
                for e in taker.events()
                if e["event"] in ("end", "cancelled", "finished")
            }
            if held <= taken and time.monotonic() - stopped_at >= config.pause_seconds:
                paused.process.send_signal(signal.SIGCONT)
                paused.continued = True
        faults = ((victim, victim.killed), (paused, stopped_at is not None))
        early = [w for w, hit in faults if w and not hit and w.process.poll() is not None]
        if early or time.monotonic() > deadline:
            names = ", ".join(w.name for w in early) or "the run timed out:"
            report.failed_workers.append(f"{names} ended before the kill or pause")
            if paused is not None and stopped_at is not None and not paused.continued:
                paused.process.send_signal(signal.SIGCONT)
            break
        time.sleep(0.005)
    for worker in workers:
        try:
            code = worker.process.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            worker.process.kill()
            code = worker.process.wait()
        if not worker.killed and code != 0:
            err = (workdir / f"{worker.name}.err").read_text(errors="replace")[-2000:]
            report.failed_workers.append(f"{worker.name} exited {code}: {err}")
    report.seconds = time.perf_counter() - began
    events = [e for w in workers for e in w.events()]
    overheads = sorted(
        e["overhead"] for e in events if e["event"] == "end" and e["status"] == "completed"
    )
    report.completed_turns = len(overheads)
    report.turns_per_second = report.completed_turns / report.seconds
    if overheads:
        report.overhead_p50_ms = statistics.median(overheads) * 1e3
        report.overhead_p99_ms = (
            overheads[min(len(overheads) - 1, int(len(overheads) * 0.99))] * 1e3
        )
    report.interrupted_turns = len(in_flight(victim.events())) if victim.killed else 0
    report.lost_leases = sum(
        e["event"] == "lost" and "lease lost" in e.get("error", "") for e in events
    )
    report.lost_replies = 0 if dropper is None else dropper.fired
    report.events = events
    return report


class ReplyDropper:
    """Loopback proxies in front of the servers (the cluster's every node), each losing the
    reply to every ``every``-th store command it carries after the server ran it; workers
    reach the servers through them (``url``, and ``remap`` for the cluster's node ports)."""

    def __init__(self, backend: str, url: str, prefix: str, every: int) -> None:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
        from faults import FaultProxy

        if backend == "postgresql":
            ports = [int(url.rsplit(":", 1)[1].split("/", 1)[0])]
            self.marker = prefix.encode()  # every statement names the tables
        else:
            from redis.cluster import RedisCluster

            nodes = RedisCluster.from_url(url)
            ports = sorted({int(node.port) for node in nodes.get_nodes()})
            nodes.close()
            self.marker = b"EVALSHA"  # every write (a read is a plain command)
        self.every = every
        self.proxies = [FaultProxy(port, lifetime=3600.0) for port in ports]
        self.remap = {str(proxy.upstream[1]): proxy.port for proxy in self.proxies}
        first = self.proxies[0]
        self.url = (
            first.url(url)
            if backend == "postgresql"
            else url.replace(f":{first.upstream[1]}", f":{first.port}", 1)
        )
        self._stop = threading.Event()
        self._armer = threading.Thread(target=self._arm, daemon=True)
        self._armer.start()

    @property
    def fired(self) -> int:
        return sum(proxy.fired for proxy in self.proxies)

    def _arm(self) -> None:
        """Each proxy armed, and armed again once it fired."""
        seen = [proxy.fired for proxy in self.proxies]
        for proxy in self.proxies:
            proxy.drop_reply(self.marker, nth=self.every)
        while not self._stop.wait(0.01):
            for index, proxy in enumerate(self.proxies):
                if proxy.fired != seen[index]:
                    seen[index] = proxy.fired
                    proxy.drop_reply(self.marker, nth=self.every)

    def __enter__(self) -> ReplyDropper:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._armer.join(5)
        for proxy in self.proxies:
            proxy.close()


def audit(
    report: LoadReport,
    backend: str,
    url: str,
    prefix: str,
    plan: dict[int, list[str]],
    events: list[dict[str, Any]],
) -> None:
    """Every stored conversation against what the workers acknowledged; no worker is alive."""
    store = open_store(backend, url, prefix)
    turns = store.turn_store()
    acknowledged: dict[str, list[str]] = {}
    started: dict[str, set[str]] = {}
    for event in events:
        if event["event"] == "end":
            acknowledged.setdefault(event["conversation"], []).extend(event["messages"])
        if event["event"] == "start":
            started.setdefault(event["conversation"], set()).add(event["turn"])
    try:
        leases = [turns.open_turn(cid) for cids in plan.values() for cid in cids]
        expiries = [lease.expires_at or 0.0 for lease in leases if lease is not None]
        last_expiry = max(expiries, default=0.0)
        time.sleep(max(0.0, last_expiry - time.time()) + 0.05)  # audit dead leases past expiry
        for cids in plan.values():
            for cid in cids:
                audit_conversation(
                    report, store, cid, acknowledged.get(cid, []), started.get(cid, set())
                )
    finally:
        close_store(store)


def audit_conversation(
    report: LoadReport, store: Any, cid: str, acknowledged: list[str], started: set[str]
) -> None:
    stored = store.chat_memory(cid).get_messages()
    ids = [m.message_id for m in stored]
    present = set(ids)
    report.messages_lost += sum(message_id not in present for message_id in acknowledged)
    report.messages_duplicated += len(ids) - len(present)
    requests = Counter(k for k in map(request_index, stored) if k is not None)
    report.messages_duplicated += sum(n - 1 for n in requests.values())
    results = Counter(m.tool_call_id for m in stored if isinstance(m, ToolMessage))
    report.messages_duplicated += sum(n - 1 for n in results.values())
    report.requests_missing += report.config.turns - len(requests)
    if validate_tool_protocol(stored):
        report.invalid_protocol_histories += 1
    turns = store.turn_store()
    lease = turns.open_turn(cid)
    if lease is not None and lease.status is TurnStatus.RUNNING and lease.expired(time.time()):
        report.dead_leases_after_expiry += 1
    statuses = {}
    for turn_id in started | {m.turn_id for m in stored if m.turn_id}:
        snapshot = turns.load_turn(cid, turn_id)
        statuses[turn_id] = None if snapshot is None else snapshot.status
        if snapshot is not None and snapshot.status is TurnStatus.RUNNING:
            report.running_turns_without_owner += 1  # every worker has exited
    for message in stored:
        if request_index(message) is not None:
            if statuses.get(message.turn_id) is TurnStatus.COMPLETED:
                report.requests_completed += 1
            else:  # the model never fails: only the kill ends a turn otherwise
                report.requests_interrupted += 1


# -- servers and the command line ---------------------------------------------------------------


@contextmanager
def servers(args: argparse.Namespace) -> Iterator[dict[str, str]]:
    """The URLs of the backends: given, or servers started (and stopped) here."""
    urls: dict[str, str] = {}
    with ExitStack() as stack:
        wanted = args.backends.split(",")
        if "postgresql" in wanted:
            urls["postgresql"] = args.postgres or _start(stack, "PostgresServer").url
        if "redis-cluster" in wanted:
            urls["redis-cluster"] = args.redis_cluster or _start(stack, "RedisClusterServer").url
        yield urls


def _start(stack: ExitStack, name: str) -> Any:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    import servers as test_servers

    server = getattr(test_servers, name)(
        **({"max_connections": 200} if name == "PostgresServer" else {})
    )
    return stack.enter_context(server)


def format_report(report: LoadReport) -> str:
    c = report.config
    lines = [
        f"== {report.backend} ({report.driver}): {c.workers} workers x {c.conversations} "
        f"conversations x {c.turns} turns, model {c.model_seconds * 1e3:.0f} ms, "
        f"lease {c.lease_seconds:g} s",
        f"turns completed            {report.completed_turns} in {report.seconds:.1f} s",
        f"turns per second           {report.turns_per_second:.1f}",
        f"runner overhead per turn   p50 {report.overhead_p50_ms:.1f} ms, "
        f"p99 {report.overhead_p99_ms:.1f} ms (model waits excluded)",
        f"killed mid-turn            {report.interrupted_turns} turns in flight; "
        f"{report.requests_interrupted} stored requests closed FAILED or CANCELLED after it, "
        f"{report.requests_completed} completed",
        f"paused past its lease      {report.paused_turns} turns in flight; "
        f"{report.lost_leases} writes refused once continued (lease lost)",
        f"replies lost               {report.lost_replies} (dropped by the proxies after the "
        "server acted)",
        f"messages lost              {report.messages_lost}",
        f"messages duplicated        {report.messages_duplicated}",
        f"requests missing           {report.requests_missing}",
        f"invalid tool protocol      {report.invalid_protocol_histories} histories",
        f"dead leases after expiry   {report.dead_leases_after_expiry}",
        f"RUNNING turns, no owner    {report.running_turns_without_owner}",
    ]
    lines += [f"worker failure             {failure}" for failure in report.failed_workers]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    defaults = LoadConfig()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=defaults.workers)
    parser.add_argument("--conversations", type=int, default=defaults.conversations)
    parser.add_argument("--turns", type=int, default=defaults.turns)
    parser.add_argument("--model-ms", type=float, default=defaults.model_seconds * 1e3)
    parser.add_argument("--lease-seconds", type=float, default=defaults.lease_seconds)
    parser.add_argument("--kill-at", type=float, default=defaults.kill_at)
    parser.add_argument("--pause-seconds", type=float, default=defaults.pause_seconds)
    parser.add_argument("--drop-every", type=int, default=defaults.drop_every)
    parser.add_argument("--driver", choices=("async", "threads"), default=defaults.driver)
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--postgres", help="a PostgreSQL URL (else a server is started)")
    parser.add_argument("--redis-cluster", help="a startup node's redis:// URL")
    parser.add_argument("--json", action="store_true", help="print the reports as JSON")
    args = parser.parse_args(argv)
    if args.worker:
        spec = json.loads(args.worker)
        if spec["driver"] == "threads":
            serve_threads(spec)
        else:
            asyncio.run(serve(spec))
        return 0
    config = replace(
        defaults,
        workers=args.workers,
        conversations=args.conversations,
        turns=args.turns,
        model_seconds=args.model_ms / 1e3,
        lease_seconds=args.lease_seconds,
        kill_at=args.kill_at,
        pause_seconds=args.pause_seconds,
        drop_every=args.drop_every,
        driver=args.driver,
    )
    reports = []
    with servers(args) as urls, tempfile.TemporaryDirectory(prefix="bench-load-") as workdir:
        for backend, url in urls.items():
            logs = Path(workdir) / backend
            logs.mkdir()
            report = run_load(backend, url, config, logs)
            reports.append(report)
            if not args.json:
                print(format_report(report), flush=True)
    if args.json:
        print(json.dumps([asdict(r) for r in reports], indent=2))
    return 0 if all(r.audit_is_clean() for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
