"""Fencing, approvals taken back once, and re-sent calls (SPEC §20), on every store.

A runner that lost its lease (paused, slow, its clock behind) writes nothing more: every write
of a turn carries its lease token and the store checks it in the write's own script or
transaction. A suspension is taken back by one resume only. A store call re-sent after a lost
reply finds its own effect and answers as the first call did.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from agentctx_fast import (
    Agent,
    AgentConversationBusyError,
    AgentCtxError,
    AgentFormMessage,
    AgentRunner,
    AgentTurn,
    AgentTurnSnapshot,
    AiMessage,
    ChatMemory,
    Fence,
    LeaseLostError,
    ScriptedChatModel,
    StoreUnavailableError,
    Tool,
    ToolCall,
    ToolMessage,
    TurnStateError,
    TurnStatus,
    UserMessage,
    validate_tool_protocol,
)
from async_bridge import runner_for
from store_fixtures import ASYNC_STORE_KINDS, STORE_KINDS, make_store, new_conversation_id


@pytest.fixture(params=STORE_KINDS + ASYNC_STORE_KINDS)
def any_store(request: pytest.FixtureRequest) -> Iterator[Any]:
    """Every store, blocking and async (the async ones behind a blocking bridge)."""
    opened = make_store(str(request.param), request)
    try:
        yield opened
    finally:
        opened.close()


def _snapshot(conversation_id: str, turn_id: str, **fields: Any) -> AgentTurnSnapshot:
    fields.setdefault("status", TurnStatus.RUNNING)
    return AgentTurnSnapshot(conversation_id, turn_id, "support", **fields)


def test_a_runner_that_lost_its_lease_writes_nothing(any_store: Any) -> None:
    store = any_store
    turns = store.turn_store()
    cid = new_conversation_id()
    assert turns.acquire_conversation(cid, "t1", "owner-a", 1.0, now=100.0) is None
    memory = store.chat_memory(cid)
    held = memory.fenced(Fence("t1", "owner-a"))
    assert held.add_message_if_absent(UserMessage("hi", message_id="t1:user", turn_id="t1"))
    assert turns.save_turn(_snapshot(cid, "t1"), 0, Fence("t1", "owner-a"))
    form = AgentFormMessage({"kind": "tool_approval"}, status="pending", message_id="t1:form")
    assert held.add_message_if_absent(form)

    # owner-a pauses past its lease; another runner takes the conversation over
    assert turns.acquire_conversation(cid, "t2", "owner-b", 1.0, now=102.0) == "t1"
    before = memory.get_messages()
    late = AiMessage("late reply", message_id="t1:ai:1", turn_id="t1")
    with pytest.raises(LeaseLostError, match="lease"):
        held.add_message_if_absent(late)
    with pytest.raises(LeaseLostError):
        held.add_messages_if_absent([late, UserMessage("x", message_id="t1:x")])
    with pytest.raises(LeaseLostError):
        held.update_message(replace(form, status="approved"), form.version)
    with pytest.raises(LeaseLostError):
        turns.save_turn(_snapshot(cid, "t1", step_count=1), 1, Fence("t1", "owner-a"))
    assert memory.get_messages() == before
    assert turns.load_turn(cid, "t1").version == 1

    # the new holder writes, under its own token
    taken = memory.fenced(Fence("t2", "owner-b"))
    assert taken.add_message_if_absent(UserMessage("next", message_id="t2:user", turn_id="t2"))
    assert taken.update_message(replace(form, status="expired"), form.version).version == 1
    assert turns.save_turn(_snapshot(cid, "t1", step_count=1), 1, Fence("t2", "owner-b"))


def test_one_resume_takes_a_suspension_back(any_store: Any) -> None:
    store = any_store
    turns = store.turn_store()
    cid = new_conversation_id()
    assert turns.acquire_conversation(cid, "t1", "owner-a", 30.0, now=100.0) is None
    assert turns.save_turn(_snapshot(cid, "t1", status=TurnStatus.SUSPENDED), 0)
    assert turns.suspend_conversation(cid, "t1", "owner-a")
    read_by_both = turns.load_turn(cid, "t1").version

    assert turns.reacquire_conversation(cid, "t1", "owner-b", 30.0, 101.0, read_by_both)
    assert not turns.reacquire_conversation(cid, "t1", "owner-c", 30.0, 101.0, read_by_both)
    # the winner suspends the turn again: a stale resume still cannot take it
    fence_b = Fence("t1", "owner-b")
    assert turns.save_turn(_snapshot(cid, "t1", status=TurnStatus.SUSPENDED), read_by_both, fence_b)
    assert turns.suspend_conversation(cid, "t1", "owner-b")
    assert not turns.reacquire_conversation(cid, "t1", "owner-c", 30.0, 102.0, read_by_both)
    assert turns.reacquire_conversation(cid, "t1", "owner-c", 30.0, 102.0, read_by_both + 1)


def test_re_sent_calls_find_their_own_effect(any_store: Any) -> None:
    store = any_store
    """What a client library's retry sends again after the reply was lost."""
    turns = store.turn_store()
    cid = new_conversation_id()
    assert turns.acquire_conversation(cid, "t1", "owner-a", 1.0, now=100.0) is None
    assert turns.acquire_conversation(cid, "t1", "owner-a", 1.0, now=100.0) is None
    assert turns.acquire_conversation(cid, "t2", "owner-b", 1.0, now=105.0) == "t1"
    assert turns.acquire_conversation(cid, "t2", "owner-b", 1.0, now=105.0) == "t1"

    fence = Fence("t2", "owner-b")
    snapshot = _snapshot(cid, "t2", status=TurnStatus.SUSPENDED)
    assert turns.save_turn(snapshot, 0, fence)
    assert turns.save_turn(snapshot, 0, fence)  # re-sent: found applied
    assert not turns.save_turn(snapshot, 0)  # a plain compare-and-set is not a retry
    assert turns.load_turn(cid, "t2").version == 1

    memory = store.chat_memory(cid).fenced(fence)
    form = AgentFormMessage({"kind": "tool_approval"}, status="pending", message_id="t2:form")
    assert memory.add_message_if_absent(form)
    decided = replace(form, status="approved")
    assert memory.update_message(decided, 0).version == 1
    assert memory.update_message(decided, 0).version == 1  # re-sent: found applied
    assert store.chat_memory(cid).get_message("t2:form").version == 1

    assert turns.suspend_conversation(cid, "t2", "owner-b")
    assert turns.reacquire_conversation(cid, "t2", "owner-c", 30.0, 106.0, 1)
    assert turns.reacquire_conversation(cid, "t2", "owner-c", 30.0, 106.0, 1)  # re-sent
    assert not turns.reacquire_conversation(cid, "t2", "owner-d", 30.0, 106.0, 1)


def test_a_fenced_batch_of_any_size_is_one_append(any_store: Any) -> None:
    """A fenced batch over 500 messages (SQLite's limit of the selects one statement joins:
    it failed with StoreError) is written whole, found again whole when re-sent after a lost
    reply, and written not at all once the lease is lost."""
    store = any_store
    turns = store.turn_store()
    cid = new_conversation_id()
    assert turns.acquire_conversation(cid, "t1", "owner-a", 1.0, now=100.0) is None
    held = store.chat_memory(cid).fenced(Fence("t1", "owner-a"))
    batch = [UserMessage(f"m{n}", message_id=f"t1:{n}", turn_id="t1") for n in range(1_201)]
    assert held.add_messages_if_absent(batch) == [True] * len(batch)
    assert held.add_messages_if_absent(batch) == [True] * len(batch)  # re-sent: its own
    assert store.chat_memory(cid).get_messages() == batch

    assert turns.acquire_conversation(cid, "t2", "owner-b", 1.0, now=102.0) == "t1"
    late = [UserMessage(f"late{n}", message_id=f"t1:late{n}", turn_id="t1") for n in range(1_201)]
    with pytest.raises(LeaseLostError):
        held.add_messages_if_absent(late)
    assert store.chat_memory(cid).get_messages() == batch


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_fenced_batch_re_sent_over_the_servers_parameter_limit(
    kind: str, request: pytest.FixtureRequest
) -> None:
    """A re-sent fenced batch of more ids than a statement takes parameters (PostgreSQL:
    65,535, SQLite: 32,766) is found again: the check that its records are its own reads them
    in slices. Before, it failed with an error marked retryable that no retry could mend."""
    store = make_store(kind, request)
    try:
        turns = store.turn_store()
        cid = new_conversation_id()
        assert turns.acquire_conversation(cid, "t1", "owner-a", 1.0, now=100.0) is None
        held = store.chat_memory(cid).fenced(Fence("t1", "owner-a"))
        batch = [UserMessage("m", message_id=f"t1:{n}", turn_id="t1") for n in range(66_000)]
        assert held.add_messages_if_absent(batch) == [True] * len(batch)
        assert held.add_messages_if_absent(batch) == [True] * len(batch)
        assert store.chat_memory(cid).message_count() == len(batch)
    finally:
        store.close()


def _pause_at_the_append(engine: Any, wait: Any) -> None:
    """``wait()`` called once, where the fenced append, its lease checked, sends its insert."""
    import sqlalchemy as sa

    waited: list[bool] = []

    def hook(*args: Any) -> None:
        if args[2].startswith("INSERT INTO agent_messages") and not waited:
            waited.append(True)
            wait()

    sa.event.listen(engine, "before_cursor_execute", hook)


def test_a_takeover_by_another_store_on_one_in_memory_engine_waits_for_a_fenced_append() -> None:
    """Two stores on one in-memory SQLite engine share its one connection. A takeover by the
    second, while the first's fenced append is between its lease check and its insert, waits
    for the append to commit. Before, each store took turns on the connection only with its own
    calls: the takeover ran and committed inside the append's transaction, and the append then
    wrote after losing its lease and answered True."""
    import sqlalchemy as sa

    from agentctx_fast import SqlAgentStore

    connect_args = {"check_same_thread": False}
    engine = sa.create_engine("sqlite://", poolclass=sa.pool.StaticPool, connect_args=connect_args)
    one, two = SqlAgentStore(engine), SqlAgentStore(engine)
    one.schema.initialize()
    assert one.turn_store().acquire_conversation("c1", "t1", "owner-a", 1.0, now=100.0) is None
    order: list[str] = []

    def take_over() -> None:
        two.turn_store().acquire_conversation("c1", "t2", "owner-b", 1.0, now=200.0)
        order.append("taken over")

    taker = threading.Thread(target=take_over)

    def wait() -> None:
        taker.start()
        taker.join(1.0)  # it cannot end while the append holds the connection
        order.append("appended")

    _pause_at_the_append(engine, wait)
    held = one.chat_memory("c1").fenced(Fence("t1", "owner-a"))
    message = UserMessage("x", message_id="t1:1", turn_id="t1")
    assert held.add_messages_if_absent([message]) == [True]
    taker.join(60)
    assert order == ["appended", "taken over"]
    assert two.chat_memory("c1").get_messages() == [message]


def _refund_agent(
    calls: list[str],
    started: threading.Event,
    release: threading.Event,
    *,
    resumed: bool = True,
    then: str | None = None,
) -> Agent:
    """An agent whose model asks for the refund of o1 (unless ``resumed``), then for the
    refund of ``then`` if given (call c2), then answers."""

    def refund(order: str) -> str:
        calls.append(order)
        started.set()
        assert release.wait(20)
        return "refunded"

    def ask(call_id: str, order: str) -> AiMessage:
        return AiMessage(tool_calls=(ToolCall(call_id, "refund", f'{{"order": "{order}"}}'),))

    asks = [] if resumed else [ask("c1", "o1")]
    if then is not None:
        asks.append(ask("c2", then))
    model = ScriptedChatModel([*asks, AiMessage("done")])
    tool = Tool("refund", refund, requires_approval=True)
    return Agent("support", model, tools=[tool])


def test_two_resumes_of_one_suspension_run_the_tool_once(store: Any) -> None:
    runners = [AgentRunner(store), AgentRunner(store)]
    calls: list[str] = []
    started, release = threading.Event(), threading.Event()
    cid = new_conversation_id()
    asking = _refund_agent(calls, started, release, resumed=False)
    suspended = runners[0].run(asking, cid, "refund o1")
    assert suspended.status is TurnStatus.SUSPENDED
    approvals = {"c1": True}
    out: list[Any] = []

    def first() -> None:
        agent = _refund_agent(calls, started, release)
        out.append(runners[0].resume(agent, cid, suspended.turn_id, approvals))

    thread = threading.Thread(target=first)
    thread.start()
    try:
        assert started.wait(20)  # the first resume is inside the tool
        with pytest.raises(TurnStateError):
            runners[1].resume(
                _refund_agent(calls, started, release), cid, suspended.turn_id, approvals
            )
    finally:
        release.set()
        thread.join(20)
    assert [turn.status for turn in out] == [TurnStatus.COMPLETED]
    assert calls == ["o1"]
    with pytest.raises(TurnStateError):  # and after it ended
        runners[1].resume(_refund_agent(calls, started, release), cid, suspended.turn_id, approvals)
    assert calls == ["o1"]
    stored = store.chat_memory(cid).get_messages()
    assert validate_tool_protocol(stored) == []
    for runner in runners:
        runner.close()


@pytest.mark.parametrize("round_", range(3))
def test_threads_resuming_and_cancelling_one_suspension(store: Any, round_: int) -> None:
    """32 threads resume (approving or refusing the refund of o1) and cancel one suspended
    turn at once; the turn that resumes asks for a second refund and suspends again, so a
    resume that read the first suspension must not take the second. Then the audit: o1
    refunded at most once, o2 never, the stored protocol whole once the turn is closed, no
    form left pending, the conversation free."""
    runner = AgentRunner(store)
    calls: list[str] = []
    started, release = threading.Event(), threading.Event()
    release.set()
    cid = new_conversation_id()
    suspended = runner.run(_refund_agent(calls, started, release, resumed=False), cid, "refund")
    assert suspended.status is TurnStatus.SUSPENDED
    barrier = threading.Barrier(32)
    outcomes: list[str] = []

    def act(index: int) -> None:
        agent = _refund_agent(calls, started, release, then="o2")
        barrier.wait(20)
        try:
            if index % 3 == round_ % 3:
                turn = runner.cancel(cid, suspended.turn_id)
            else:
                turn = runner.resume(agent, cid, suspended.turn_id, {"c1": index % 2 == 0})
            outcomes.append(turn.status.value)
        except AgentCtxError as error:  # lost the race: changes nothing
            outcomes.append(type(error).__name__)

    threads = [threading.Thread(target=act, args=(index,)) for index in range(32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(outcomes) == 32
    assert calls.count("o1") <= 1 and "o2" not in calls
    final = runner.turn(cid, suspended.turn_id)
    if final.status is TurnStatus.SUSPENDED:  # suspended again on o2: close it
        final = runner.cancel(cid, suspended.turn_id)
    runner.close()
    assert final.status in (TurnStatus.COMPLETED, TurnStatus.CANCELLED)
    stored = store.chat_memory(cid).get_messages()
    assert validate_tool_protocol(stored) == []
    results = [m.tool_call_id for m in stored if isinstance(m, ToolMessage)]
    assert sorted(results) in (["c1"], ["c1", "c2"])  # one answer each, no orphan
    forms = [m for m in stored if isinstance(m, AgentFormMessage)]
    assert forms and all(form.status != "pending" for form in forms)
    assert store.turn_store().open_turn(cid) is None


def test_a_suspension_left_in_transition_is_resumed_once_its_lease_expires(
    any_store: Any,
) -> None:
    """A resume took the turn back and its reply was lost (the client gave up): the record
    still says suspended, the lease says running. Resuming again is refused while that lease
    lives and completes the turn once it has expired; the tool runs once."""
    store = any_store
    clock = [1_000.0]
    runner = AgentRunner(store, lease_seconds=5.0, clock=lambda: clock[0])
    calls: list[str] = []
    started, release = threading.Event(), threading.Event()
    release.set()
    cid = new_conversation_id()
    suspended = runner.run(_refund_agent(calls, started, release, resumed=False), cid, "refund")
    assert suspended.status is TurnStatus.SUSPENDED
    version = runner.turn_store.load_turn(cid, suspended.turn_id).version
    # the lost resume: applied on the server, never heard of by its caller
    assert runner.turn_store.reacquire_conversation(
        cid, suspended.turn_id, "lost-owner", 5.0, clock[0], version
    )
    agent = _refund_agent(calls, started, release)
    with pytest.raises(TurnStateError):
        runner.resume(agent, cid, suspended.turn_id, {"c1": True})
    clock[0] += 6.0  # past the lost resume's lease
    turn = runner.resume(agent, cid, suspended.turn_id, {"c1": True})
    runner.close()
    assert turn.status is TurnStatus.COMPLETED
    assert calls == ["o1"]
    stored = store.chat_memory(cid).get_messages()
    assert validate_tool_protocol(stored) == []
    assert all(m.status != "pending" for m in stored if isinstance(m, AgentFormMessage))


class _LosingTurnStore:
    """A turn store whose reply to reading one turn is lost, once (a read changes nothing on
    the server, so the lost reply is the error its caller sees)."""

    def __init__(self, inner: Any, turn_id: str) -> None:
        self._inner = inner
        self.turn_id: str | None = turn_id

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def load_turn(self, conversation_id: str, turn_id: str) -> Any:
        if turn_id == self.turn_id:
            self.turn_id = None
            raise StoreUnavailableError(f"reply to loading turn {turn_id!r} lost")
        return self._inner.load_turn(conversation_id, turn_id)


class _Losing:
    """``store`` with `_LosingTurnStore` as its turn store."""

    def __init__(self, store: Any, turn_id: str) -> None:
        self.store, self.turns = store, _LosingTurnStore(store.turn_store(), turn_id)

    def chat_memory_provider(self) -> Any:
        return self.store.chat_memory_provider()

    def turn_store(self) -> Any:
        return self.turns


def test_a_takeover_that_failed_closing_the_expired_turn_leaves_it_to_the_next(
    any_store: Any,
) -> None:
    """A run took over the lease of a turn whose process died, and the read of that turn
    failed (a lost reply): the run fails and keeps the lease. Once that lease expires, its
    retry closes the dead turn (its lease no longer names it) and runs; no record stays
    `RUNNING`."""
    store = any_store
    clock = [1_000.0]
    cid = new_conversation_id()
    turns = store.turn_store()
    assert turns.acquire_conversation(cid, "dead", "dead-owner", 5.0, clock[0]) is None
    assert turns.save_turn(_snapshot(cid, "dead"), 0, Fence("dead", "dead-owner"))
    held = store.chat_memory(cid).fenced(Fence("dead", "dead-owner"))
    assert held.add_messages_if_absent([
        UserMessage("refund", message_id="dead:user", turn_id="dead"),
        AiMessage("", tool_calls=(ToolCall("c1", "refund", "{}"),), message_id="dead:ai:1",
                  turn_id="dead"),
    ])  # fmt: skip
    clock[0] += 6.0  # the dead process's lease has expired

    losing = _Losing(store, "dead")
    runner = AgentRunner(losing, lease_seconds=5.0, clock=lambda: clock[0])
    agent = Agent("support", ScriptedChatModel([AiMessage("done")]))
    with pytest.raises(StoreUnavailableError):
        runner.run(agent, cid, "hello", turn_id="next")
    assert turns.load_turn(cid, "dead").status is TurnStatus.RUNNING  # not closed yet

    clock[0] += 6.0  # the failed run's lease has expired too
    turn = runner.run(agent, cid, "hello", turn_id="next")
    runner.close()
    assert turn.status is TurnStatus.COMPLETED
    assert turns.load_turn(cid, "dead").status is TurnStatus.FAILED
    stored = store.chat_memory(cid).get_messages()
    assert validate_tool_protocol(stored) == []
    assert [m.message_id for m in stored][-2:] == ["next:user", turn.messages[-1].message_id]


class _Stepper:
    """Counts a runner's store calls and holds the ``at``-th one (before it is sent) until
    ``go`` is set."""

    def __init__(self, at: int) -> None:
        self.at, self.count = at, 0
        self.paused, self.go = threading.Event(), threading.Event()

    def step(self) -> None:
        self.count += 1
        if self.count == self.at:
            self.paused.set()
            assert self.go.wait(20)


class _SteppedMemory(ChatMemory):
    def __init__(self, inner: Any, stepper: _Stepper) -> None:
        self.inner, self.stepper = inner, stepper

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        self.stepper.step()
        return getattr(self.inner, name)(*args, **kwargs)

    def add_message_if_absent(self, message: Any) -> bool:
        return bool(self._call("add_message_if_absent", message))

    def add_messages_if_absent(self, messages: Any) -> list[bool]:
        return list(self._call("add_messages_if_absent", messages))

    def get_messages(self, count: int | None = None, *, offset: int = 0) -> list[Any]:
        return list(self._call("get_messages", count, offset=offset))

    def get_model_messages(self, count: int | None = None) -> list[Any]:
        return list(self._call("get_model_messages", count))

    def get_message(self, message_id: str) -> Any:
        return self._call("get_message", message_id)

    def update_message(self, message: Any, expected_version: int) -> Any:
        return self._call("update_message", message, expected_version)

    def message_count(self) -> int:
        return int(self._call("message_count"))

    def clear(self) -> None:
        self._call("clear")

    def fenced(self, fence: Fence) -> ChatMemory:
        return _SteppedMemory(self.inner.fenced(fence), self.stepper)


class _SteppedTurns:
    def __init__(self, inner: Any, stepper: _Stepper) -> None:
        self.inner, self.stepper = inner, stepper

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            self.stepper.step()
            return method(*args, **kwargs)

        return call


class _Stepped:
    """``store`` seen through a `_Stepper`: its memories and its turn store."""

    def __init__(self, store: Any, stepper: _Stepper) -> None:
        self.store, self.stepper = store, stepper

    def chat_memory_provider(self) -> Any:
        provider = self.store.chat_memory_provider()
        return lambda cid: _SteppedMemory(provider(cid), self.stepper)

    def turn_store(self) -> Any:
        return _SteppedTurns(self.store.turn_store(), self.stepper)


@pytest.mark.parametrize("then", [None, "o2"])
def test_two_resumes_interleaved_at_each_store_step(store: Any, then: str | None) -> None:
    """Resume A is held before each of its store calls in turn while resume B runs whole,
    then A goes on. With ``then``, the turn that wins asks for a second refund and suspends
    again, which the loser, holding the first approval, must not take. Whichever wins, the
    refund runs once, the loser raises (or returns the finished turn) and changes nothing,
    and the conversation ends whole and free."""
    clock = lambda: 1_000.0  # noqa: E731  (leases never expire, never need renewing)
    calls: list[str] = []
    started, release = threading.Event(), threading.Event()
    release.set()
    approvals = {"c1": True}
    at = 0
    while True:
        at += 1
        cid = new_conversation_id()
        plain = AgentRunner(store, lease_seconds=60.0, clock=clock)
        asking = _refund_agent(calls, started, release, resumed=False)
        suspended = plain.run(asking, cid, "refund o1")
        assert suspended.status is TurnStatus.SUSPENDED
        calls.clear()
        stepper = _Stepper(at)
        held = AgentRunner(_Stepped(store, stepper), lease_seconds=60.0, clock=clock)
        out: dict[str, Any] = {}

        def first(
            runner: AgentRunner = held,
            cid: str = cid,
            turn_id: str = suspended.turn_id,
            out: dict[str, Any] = out,
            stepper: _Stepper = stepper,
        ) -> None:
            try:
                out["a"] = runner.resume(
                    _refund_agent(calls, started, release, then=then), cid, turn_id, approvals
                )
            except AgentCtxError as error:
                out["a"] = error
            finally:
                stepper.paused.set()  # held at step ``at``, or ended before it

        thread = threading.Thread(target=first)
        thread.start()
        assert stepper.paused.wait(20)
        try:
            if "a" in out:
                thread.join(20)
                break  # A made fewer than ``at`` store calls: every step was tried
            try:
                agent = _refund_agent(calls, started, release, then=then)
                out["b"] = plain.resume(agent, cid, suspended.turn_id, approvals)
            except AgentCtxError as error:
                out["b"] = error
        finally:
            stepper.go.set()
            thread.join(20)
        held.close()
        assert not thread.is_alive()
        ended = TurnStatus.COMPLETED if then is None else TurnStatus.SUSPENDED
        finished = [o for o in out.values() if isinstance(o, AgentTurn)]
        refused = [o for o in out.values() if not isinstance(o, AgentTurn)]
        assert finished and all(t.status is ended for t in finished), (at, out)
        if then is not None:  # suspended again on o2: closed here
            assert plain.cancel(cid, suspended.turn_id).status is TurnStatus.CANCELLED
        plain.close()
        assert all(isinstance(e, TurnStateError | AgentConversationBusyError) for e in refused), (
            at, out,
        )  # fmt: skip
        assert calls == ["o1"], (at, out)
        stored = store.chat_memory(cid).get_messages()
        assert validate_tool_protocol(stored) == [], at
        results = [m.tool_call_id for m in stored if isinstance(m, ToolMessage)]
        assert results == (["c1"] if then is None else ["c1", "c2"]), at
        assert all(f.status != "pending" for f in stored if isinstance(f, AgentFormMessage)), at
        assert store.turn_store().open_turn(cid) is None, at
    assert at > 5  # the resume does make several store calls, each one was interleaved


def test_a_compression_state_saved_after_a_takeover_is_refused(any_store: Any) -> None:
    """A runner whose compressor outlived its lease (paused in the compressor until another
    runner took the conversation over and finished its turn) saves no compression state: the
    state a turn writes is fenced like its messages (SPEC §20)."""
    from agentctx_fast.compression import compressors

    store = any_store
    conversation = new_conversation_id()
    entered, release = threading.Event(), threading.Event()
    excerpt = compressors.text_excerpt(500)

    def paused_compressor(messages: list[Any]) -> list[Any]:
        entered.set()
        assert release.wait(30)
        return excerpt(messages)

    agent = Agent(
        "support",
        ScriptedChatModel([AiMessage("answer")], cycle=True),
        context_compressor=paused_compressor,
        compression_trigger=lambda _: True,
        compression_keep_recent_turns=0,
    )
    plain = Agent("b", ScriptedChatModel([AiMessage("fresh")], cycle=True))
    paused = runner_for(store, lease_seconds=5.0)
    paused.run(plain, conversation, "first question", turn_id="t0")
    outcome: list[object] = []

    def run_paused() -> None:
        try:
            outcome.append(paused.run(agent, conversation, "second", turn_id="paused"))
        except AgentCtxError as error:
            outcome.append(error)

    thread = threading.Thread(target=run_paused)
    thread.start()
    try:
        assert entered.wait(30)
        ahead = runner_for(store, lease_seconds=5.0, clock=lambda: time.time() + 60.0)
        try:
            taken = ahead.run(plain, conversation, "third", turn_id="taker")
            assert taken.status is TurnStatus.COMPLETED
        finally:
            ahead.close()
    finally:
        release.set()
        thread.join(30)
        paused.close()
    assert len(outcome) == 1 and isinstance(outcome[0], LeaseLostError), outcome
    assert store.compression_state_store().load(conversation) is None


def test_a_fenced_compression_state_save_needs_the_lease(store: Any) -> None:
    from agentctx_fast.compression.coordinator import CompressionState

    turns, states = store.turn_store(), store.compression_state_store()
    cid = new_conversation_id()
    assert turns.acquire_conversation(cid, "t1", "owner-a", 1.0, now=100.0) is None
    held = states.fenced(Fence("t1", "owner-a"))
    first = CompressionState(cid, compression_version=1, covered_until_message_id="m1")
    assert held.save(first, 0)
    assert not held.save(first, 0)  # still a compare-and-set
    assert turns.acquire_conversation(cid, "t2", "owner-b", 1.0, now=102.0) == "t1"
    late = replace(first, compression_version=2, covered_until_message_id="m2")
    with pytest.raises(LeaseLostError):
        held.save(late, 1)
    assert states.load(cid) == replace(first, version=1)
    taken = states.fenced(Fence("t2", "owner-b"))
    assert taken.save(late, 1)
    assert states.load(cid) == replace(late, version=2)
