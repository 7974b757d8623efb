"""The turn store contract (snapshots by compare-and-set, conversation leases) on every store."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from multiprocessing import get_context
from typing import Any

import pytest

from agentctx_fast import (
    AgentConversationBusyError,
    AgentTurnSnapshot,
    InvalidArgumentError,
    LeaseRenewal,
    PendingApproval,
    SerializationError,
    ToolCall,
    TurnStatus,
)
from agentctx_fast.stores.turn_store import dump_snapshot
from store_fixtures import (
    every_store_kind,  # noqa: F401  (store_kind: every store)
    new_conversation_id,
)
from turn_store_workers import acquire_worker


def _snapshot(conversation_id: str, turn_id: str = "t1", **fields: Any) -> AgentTurnSnapshot:
    fields.setdefault("status", TurnStatus.RUNNING)
    return AgentTurnSnapshot(conversation_id, turn_id, "support", **fields)


def test_snapshot_round_trip(store: Any) -> None:
    turns = store.turn_store()
    cid = new_conversation_id()
    snapshot = _snapshot(
        cid,
        status=TurnStatus.SUSPENDED,
        step_count=3,
        message_ids=("t1:user", "t1:ai:1", "t1:approval:1:c1"),
        pending_tool_calls=(ToolCall("c1", "refund", '{"order_id": "ORD-1"}'),),
        pending_approvals=(PendingApproval("c1", "refund", '{"order_id": "ORD-1"}', "f1"),),
        decisions={"c0": False},
        metadata={"tenant": "商户-7", "ids": ["ORD-1", 2], "nested": {"ok": True}},
        created_at=1_700_000_000.25,
        updated_at=1_700_000_001.5,
    )
    assert turns.load_turn(cid, "t1") is None
    assert turns.save_turn(snapshot, 0)
    loaded = turns.load_turn(cid, "t1")
    assert loaded == AgentTurnSnapshot(**{**_fields(snapshot), "version": 1})


def _fields(snapshot: AgentTurnSnapshot) -> dict[str, Any]:
    return {name: getattr(snapshot, name) for name in AgentTurnSnapshot.__dataclass_fields__}


def test_snapshot_compare_and_set(store: Any) -> None:
    turns = store.turn_store()
    cid = new_conversation_id()
    first = _snapshot(cid, step_count=1)
    assert turns.save_turn(first, 0)
    assert not turns.save_turn(_snapshot(cid, step_count=9), 0)  # already exists
    assert turns.save_turn(_snapshot(cid, step_count=2), 1)
    assert not turns.save_turn(_snapshot(cid, step_count=7), 1)  # stale version
    loaded = turns.load_turn(cid, "t1")
    assert (loaded.version, loaded.step_count) == (2, 2)
    assert turns.load_turn(cid, "other") is None


def test_snapshot_bad_input_writes_nothing(store: Any) -> None:
    turns = store.turn_store()
    cid = new_conversation_id()
    with pytest.raises(SerializationError):
        turns.save_turn(_snapshot(cid, metadata={"when": object()}), 0)
    assert turns.load_turn(cid, "t1") is None
    with pytest.raises(InvalidArgumentError):
        turns.save_turn(_snapshot(cid), -1)
    # the stored version is expected_version + 1 and must fit in 64 bits
    with pytest.raises(InvalidArgumentError, match=r"^expected_version must be an int from 0"):
        turns.save_turn(_snapshot(cid), 2**63 - 1)
    with pytest.raises(InvalidArgumentError, match=r"^version must be an int from 0"):
        replace(_snapshot(cid), version=2**63)
    # NUL cannot be stored in PostgreSQL text columns: refused on every store alike
    with pytest.raises(InvalidArgumentError, match=r"^turn_id must not contain NUL"):
        replace(_snapshot(cid), turn_id="t\x00")
    with pytest.raises(InvalidArgumentError, match=r"^conversation_id must not contain NUL"):
        replace(_snapshot(cid), conversation_id=cid + "\x00")
    with pytest.raises(InvalidArgumentError):
        turns.save_turn({"turn_id": "t1"}, 0)
    with pytest.raises(InvalidArgumentError):
        _snapshot(cid, step_count=-1)
    assert turns.load_turn(cid, "t1") is None


def _corrupt(store: Any, cid: str, turn_id: str, data: bytes) -> None:
    if hasattr(store, "engine"):
        import sqlalchemy as sa

        table = store._tables.turns
        with store.engine.begin() as connection:
            connection.execute(
                sa.update(table)
                .where(table.c.conversation_id == cid, table.c.turn_id == turn_id)
                .values(data=data)
            )
    elif hasattr(store, "client"):
        store.client.hset(store._key("turn", cid, turn_id), "data", data)
    else:
        pytest.skip("the in-memory store keeps objects, not records")


@pytest.mark.parametrize(
    "data",
    [b"{not json", b'{"type": "agent_turn"}', b"[1, 2]", b"\xff\xfe", b'{"type":"x"}'],
)
def test_corrupt_snapshot_is_a_serialization_error(store: Any, data: bytes) -> None:
    turns = store.turn_store()
    cid = new_conversation_id()
    assert turns.save_turn(_snapshot(cid), 0)
    _corrupt(store, cid, "t1", data)
    with pytest.raises(SerializationError):
        turns.load_turn(cid, "t1")


def test_snapshot_records_the_tool_calls_started(store: Any) -> None:
    """SPEC §20: the ids of the calls recorded as started before they ran, kept by every
    store; None (nothing known) is kept as well."""
    turns = store.turn_store()
    cid = new_conversation_id()
    assert _snapshot(cid).started_tool_calls == ()  # a new turn: none started
    assert turns.save_turn(_snapshot(cid, started_tool_calls=("c1", "调用-2")), 0)
    assert turns.load_turn(cid, "t1").started_tool_calls == ("c1", "调用-2")
    assert turns.save_turn(_snapshot(cid, started_tool_calls=None), 1)
    assert turns.load_turn(cid, "t1").started_tool_calls is None
    for bad in (["c1"], ("c1", 2), "c1"):
        with pytest.raises(InvalidArgumentError, match=r"^started_tool_calls must be"):
            _snapshot(cid, started_tool_calls=bad)


def test_a_snapshot_stored_before_started_tool_calls_loads_as_unknown(store: Any) -> None:
    """A record written before the field existed loads, with None: any of its unanswered
    calls may have run. A field of the wrong type is a `SerializationError`."""
    turns = store.turn_store()
    cid = new_conversation_id()
    snapshot = _snapshot(cid, started_tool_calls=("c1",))
    assert turns.save_turn(snapshot, 0)
    old = json.loads(dump_snapshot(snapshot))
    del old["started_tool_calls"]
    _corrupt(store, cid, "t1", json.dumps(old).encode())
    assert turns.load_turn(cid, "t1") == replace(snapshot, started_tool_calls=None, version=1)
    for bad in ([1], "c1", {"c1": True}):
        _corrupt(store, cid, "t1", json.dumps({**old, "started_tool_calls": bad}).encode())
        with pytest.raises(SerializationError):
            turns.load_turn(cid, "t1")


def test_lease_transitions(store: Any) -> None:
    turns = store.turn_store()
    cid = new_conversation_id()
    assert turns.open_turn(cid) is None
    assert turns.acquire_conversation(cid, "t1", "a", 30.0, now=100.0) is None
    lease = turns.open_turn(cid)
    assert (lease.turn_id, lease.status, lease.owner, lease.expires_at) == (
        "t1", TurnStatus.RUNNING, "a", 130.0,
    )  # fmt: skip
    with pytest.raises(AgentConversationBusyError) as busy:
        turns.acquire_conversation(cid, "t2", "b", 30.0, now=129.0)
    assert busy.value.turn_id == "t1"
    assert turns.renew_lease(cid, "t1", "a", 30.0, now=120.0) is LeaseRenewal.RENEWED
    assert turns.renew_lease(cid, "t1", "b", 30.0, now=120.0) is LeaseRenewal.LOST
    assert turns.renew_lease(cid, "t9", "a", 30.0, now=120.0) is LeaseRenewal.LOST
    assert turns.open_turn(cid).expires_at == 150.0
    # expired: taken over, the old turn's id returned
    assert turns.acquire_conversation(cid, "t2", "b", 30.0, now=150.0) == "t1"
    assert turns.renew_lease(cid, "t1", "a", 30.0, now=151.0) is LeaseRenewal.LOST
    # cancellation flag
    assert not turns.request_cancel(cid, "t1", now=151.0)
    assert turns.request_cancel(cid, "t2", now=151.0)
    assert turns.open_turn(cid).cancel_requested
    assert turns.renew_lease(cid, "t2", "b", 30.0, now=152.0) is LeaseRenewal.CANCEL_REQUESTED
    # suspend: only the owner; a suspended turn never expires
    assert not turns.suspend_conversation(cid, "t2", "a")
    assert turns.suspend_conversation(cid, "t2", "b")
    lease = turns.open_turn(cid)
    assert (lease.status, lease.owner, lease.expires_at, lease.cancel_requested) == (
        TurnStatus.SUSPENDED, None, None, False,
    )  # fmt: skip
    with pytest.raises(AgentConversationBusyError) as busy:
        turns.acquire_conversation(cid, "t3", "c", 30.0, now=10_000.0)
    assert busy.value.turn_id == "t2"
    assert not turns.request_cancel(cid, "t2", now=153.0)  # not running
    # reacquire: only the suspended turn itself, once
    assert not turns.reacquire_conversation(cid, "t9", "c", 30.0, now=160.0)
    assert turns.reacquire_conversation(cid, "t2", "c", 30.0, now=160.0)
    assert not turns.reacquire_conversation(cid, "t2", "d", 30.0, now=160.0)
    assert turns.open_turn(cid).owner == "c"
    # release: with the owner, or without one only when suspended or expired
    assert not turns.release_conversation(cid, "t2", "d", now=161.0)
    assert not turns.release_conversation(cid, "t2", None, now=161.0)
    assert turns.release_conversation(cid, "t2", None, now=190.0)
    assert turns.open_turn(cid) is None
    assert turns.acquire_conversation(cid, "t3", "e", 30.0, now=200.0) is None
    assert turns.release_conversation(cid, "t3", "e", now=201.0)
    assert not turns.release_conversation(cid, "t3", "e", now=201.0)
    assert turns.open_turn(cid) is None


def test_suspended_release_without_owner(store: Any) -> None:
    turns = store.turn_store()
    cid = new_conversation_id()
    turns.acquire_conversation(cid, "t1", "a", 30.0, now=0.0)
    assert turns.suspend_conversation(cid, "t1", "a")
    assert not turns.release_conversation(cid, "t2", None, now=1.0)
    assert turns.release_conversation(cid, "t1", None, now=1.0)


@pytest.mark.parametrize(
    "arguments",
    [("", "t", "o", 1.0), ("c", "", "o", 1.0), ("c", "t", "", 1.0), ("c", "t", "o", 0),
     ("c", "t", "o", float("nan")), ("c", "t", "o", True), ("c\x00", "t", "o", 1.0),
     ("c", "t\x00", "o", 1.0), ("c", "t", "o\x00", 1.0), ("c", "\ud800", "o", 1.0)],
)  # fmt: skip
def test_lease_arguments_are_checked(store: Any, arguments: tuple[Any, ...]) -> None:
    turns = store.turn_store()
    with pytest.raises(InvalidArgumentError):
        turns.acquire_conversation(*arguments, now=0.0)


def test_sixteen_threads_acquire_one_conversation(store: Any) -> None:
    turns = store.turn_store()
    cid = new_conversation_id()
    barrier = threading.Barrier(16)

    def attempt(index: int) -> str:
        barrier.wait()
        try:
            turns.acquire_conversation(cid, f"t{index}", f"o{index}", 30.0, now=1.0)
            return f"won:t{index}"
        except AgentConversationBusyError as error:
            return f"busy:{error.turn_id}"

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(attempt, range(16)))
    winners = [r for r in results if r.startswith("won:")]
    assert len(winners) == 1
    winner = winners[0].removeprefix("won:")
    assert sorted(results) == sorted([winners[0]] + [f"busy:{winner}"] * 15)
    assert turns.open_turn(cid).turn_id == winner


def test_snapshot_cas_from_eight_threads(store: Any) -> None:
    turns = store.turn_store()
    cid = new_conversation_id()
    assert turns.save_turn(_snapshot(cid), 0)
    wins = [0] * 8

    def loop(index: int) -> None:
        for _ in range(50):
            current = turns.load_turn(cid, "t1")
            bumped = AgentTurnSnapshot(**{**_fields(current), "step_count": current.step_count + 1})
            if turns.save_turn(bumped, current.version):
                wins[index] += 1

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(loop, range(8)))
    final = turns.load_turn(cid, "t1")
    assert final.version == 1 + sum(wins)
    assert final.step_count == sum(wins)


@pytest.mark.servers
@pytest.mark.parametrize("kind", ["postgresql", "redis"])
def test_eight_processes_acquire_one_conversation(
    kind: str, request: pytest.FixtureRequest
) -> None:
    server = request.getfixturevalue("redis_server" if kind == "redis" else "postgres_server")
    url = server.url
    cid = new_conversation_id()
    with get_context("spawn").Pool(8) as pool:
        pending = [pool.apply_async(acquire_worker, (kind, url, cid, i)) for i in range(8)]
        results = [p.get(timeout=120) for p in pending]
    winners = [r for r in results if r.startswith("won:")]
    assert len(winners) == 1, results
    winner = winners[0].removeprefix("won:")
    assert sorted(r for r in results if r.startswith("busy:")) == [f"busy:{winner}"] * 7
