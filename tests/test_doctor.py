"""Bad stored data is named and recoverable (SPEC §20), on real servers.

Corrupt bytes are written straight into the SQL tables and the Redis keys of a message, a turn
and a lease record. Reads (`get_messages`, `load_turn`, `open_turn`) and the runner (`run`,
`resume`) then raise `SerializationError` naming the conversation and the record;
`agentctx doctor` reports it, ``--repair`` quarantines it (still readable in quarantine) and
`run` works again.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from agentctx_fast import (
    Agent,
    AgentRunner,
    AiMessage,
    AsyncAgentRunner,
    AsyncScriptedChatModel,
    ScriptedChatModel,
    SerializationError,
    Tool,
    ToolCall,
    TurnStatus,
    UserMessage,
    validate_tool_protocol,
)
from agentctx_fast.cli.main import main
from agentctx_fast.stores import doctor
from agentctx_fast.stores._redis_io import conversation_key
from agentctx_fast.stores.turn_store import AgentTurnSnapshot
from store_fixtures import make_async_store, make_store, new_conversation_id, store_url

KINDS = ("sqlite", "postgresql", "redis", "redis-cluster")


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store(kind: str, request: pytest.FixtureRequest) -> Iterator[Any]:
    opened = make_store(kind, request)
    try:
        yield opened
    finally:
        opened.close()


def _agent(*replies: AiMessage) -> Agent:
    tools = [
        Tool("lookup", lambda **kwargs: "found"),
        Tool("refund", lambda **kwargs: "refunded", requires_approval=True),
    ]
    return Agent("shop", ScriptedChatModel(list(replies)), tools=tools)


def _plain_turn(store: Any, conversation: str) -> str:
    """One completed turn; the id of its answer."""
    turn = AgentRunner(store).run(_agent(AiMessage("hello")), conversation, "hi")
    assert turn.status is TurnStatus.COMPLETED
    assert turn.final_message is not None
    return turn.final_message.message_id


def _suspended_turn(store: Any, conversation: str) -> str:
    """A turn waiting for an approval (its lease held suspended); its id."""
    ask = AiMessage(None, (ToolCall("call-1", "refund", '{"order": "ORD-1"}'),))
    turn = AgentRunner(store).run(_agent(ask), conversation, "refund ORD-1")
    assert turn.status is TurnStatus.SUSPENDED
    return turn.turn_id


# -- writing corrupt bytes straight into the database ------------------------------------------


def _sql(store: Any, statement: str, **params: Any) -> None:
    import sqlalchemy as sa

    with store.engine.begin() as connection:
        connection.execute(sa.text(statement.format(p=store.table_prefix)), params)


def _corrupt_message(store: Any, conversation: str, message_id: str, data: bytes) -> None:
    if hasattr(store, "engine"):
        _sql(
            store,
            "UPDATE {p}messages SET data = :data WHERE conversation_id = :c AND message_id = :m",
            data=data, c=conversation, m=message_id,
        )  # fmt: skip
        return
    keys = conversation_key(store.key_prefix, "conv", conversation)
    position = int(store.client.hget(keys + ":i", message_id).split()[0])
    store.client.lset(keys + ":r", position, data)


def _corrupt_turn(store: Any, conversation: str, turn_id: str, data: bytes) -> None:
    if hasattr(store, "engine"):
        _sql(
            store,
            "UPDATE {p}turns SET data = :data WHERE conversation_id = :c AND turn_id = :t",
            data=data, c=conversation, t=turn_id,
        )  # fmt: skip
        return
    key = conversation_key(store.key_prefix, "turn", conversation, turn_id)
    store.client.hset(key, "data", data)


def _corrupt_turn_version(store: Any, conversation: str, turn_id: str) -> None:
    if hasattr(store, "engine"):
        if store.engine.dialect.name != "sqlite":
            pytest.skip("a PostgreSQL BIGINT column holds only numbers")
        _sql(
            store,
            "UPDATE {p}turns SET version = 'two' WHERE conversation_id = :c AND turn_id = :t",
            c=conversation, t=turn_id,
        )  # fmt: skip
        return
    key = conversation_key(store.key_prefix, "turn", conversation, turn_id)
    store.client.hset(key, "version", "two")


def _corrupt_lease(store: Any, conversation: str, field: str, value: str) -> None:
    if hasattr(store, "engine"):
        if field == "expires_at" and store.engine.dialect.name != "sqlite":
            pytest.skip("a PostgreSQL float column holds only numbers")
        _sql(
            store,
            f"UPDATE {{p}}conversation_leases SET {field} = :v WHERE conversation_id = :c",
            v=value, c=conversation,
        )  # fmt: skip
        return
    key = conversation_key(store.key_prefix, "lease", conversation)
    store.client.hset(key, field, value)


# -- the doctor, as the CLI and as the module --------------------------------------------------


def _doctor(
    kind: str,
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
    conversation: str,
    *,
    repair: bool = False,
) -> tuple[int, str]:
    """``agentctx doctor --store URL [--cluster] [--repair] CONVERSATION``: status and output."""
    url = store_url(kind, request)
    assert url is not None
    options = ["--cluster"] if kind == "redis-cluster" else []
    options += ["--repair"] if repair else []
    capsys.readouterr()
    status = main(["doctor", "--store", url, *options, conversation])
    return status, capsys.readouterr().out


def _quarantined(kind: str, request: pytest.FixtureRequest, conversation: str) -> list[Any]:
    url = store_url(kind, request)

    async def body() -> list[Any]:
        async_store = await make_async_store(kind, url)
        try:
            return await doctor.quarantined(async_store, conversation)
        finally:
            await async_store.aclose()

    return asyncio.run(body())


def _names(conversation: str, record: str) -> str:
    return re.escape(f"conversation {conversation!r}, {record}: ")


def _raises_named(call: Callable[[], Any], conversation: str, record: str) -> None:
    with pytest.raises(SerializationError, match=_names(conversation, record)):
        call()


# -- the tests ---------------------------------------------------------------------------------


@pytest.mark.parametrize("data", [b"not json {", b'{"type": "ai", "message_id": 7}', b"\xff"])
def test_a_corrupt_message_is_named_reported_and_quarantined(
    store: Any, kind: str, request: pytest.FixtureRequest, capsys: Any, data: bytes
) -> None:
    conversation = new_conversation_id()
    answer = _plain_turn(store, conversation)
    _corrupt_message(store, conversation, answer, data)
    memory = store.chat_memory(conversation)
    record = f"message {answer!r}"
    _raises_named(memory.get_messages, conversation, record)
    _raises_named(lambda: memory.get_message(answer), conversation, record)
    _raises_named(
        lambda: AgentRunner(store).run(_agent(AiMessage("again")), conversation, "hi"),
        conversation,
        record,
    )

    status, out = _doctor(kind, request, capsys, conversation)
    assert status == 1
    assert f"conversation {conversation!r}: corrupt {record}: " in out

    status, out = _doctor(kind, request, capsys, conversation, repair=True)
    assert f"repaired: conversation {conversation!r}: quarantined {record}" in out
    assert status == 0, out
    assert [m.text for m in memory.get_messages()] == ["hi"]
    turn = AgentRunner(store).run(_agent(AiMessage("welcome back")), conversation, "hello?")
    assert turn.status is TurnStatus.COMPLETED
    assert [m.text for m in memory.get_messages()] == ["hi", "hello?", "welcome back"]
    (kept,) = _quarantined(kind, request, conversation)
    assert (kept.kind, kept.record_id, kept.data) == ("message", answer, data)
    assert _doctor(kind, request, capsys, conversation)[0] == 0


@pytest.mark.parametrize("corruption", ["data", "missing fields", "version"])
def test_a_corrupt_turn_is_named_reported_and_quarantined(
    store: Any, kind: str, request: pytest.FixtureRequest, capsys: Any, corruption: str
) -> None:
    conversation = new_conversation_id()
    turn_id = _suspended_turn(store, conversation)
    if corruption == "version":
        _corrupt_turn_version(store, conversation, turn_id)
    else:
        data = b"\x00 not json" if corruption == "data" else b'{"type": "agent_turn"}'
        _corrupt_turn(store, conversation, turn_id, data)
    record = f"turn {turn_id!r}"
    _raises_named(lambda: store.turn_store().load_turn(conversation, turn_id), conversation, record)
    _raises_named(
        lambda: AgentRunner(store).resume(_agent(AiMessage("done")), conversation, turn_id, {}),
        conversation,
        record,
    )

    status, out = _doctor(kind, request, capsys, conversation)
    assert status == 1
    assert f"conversation {conversation!r}: corrupt {record}: " in out

    status, out = _doctor(kind, request, capsys, conversation, repair=True)
    assert f"repaired: conversation {conversation!r}: quarantined {record}" in out
    assert f"closed turn {turn_id!r} as cancelled" in out  # its call answered, lease freed
    assert status == 0, out
    closed = store.turn_store().load_turn(conversation, turn_id)  # a stand-in record, closed
    assert closed is not None and closed.status is TurnStatus.CANCELLED
    assert validate_tool_protocol(store.chat_memory(conversation).get_messages()) == []
    turn = AgentRunner(store).run(_agent(AiMessage("welcome back")), conversation, "hello?")
    assert turn.status is TurnStatus.COMPLETED
    (kept,) = _quarantined(kind, request, conversation)
    assert (kept.kind, kept.record_id) == ("turn", turn_id)


@pytest.mark.parametrize(
    ("field", "value"),
    [("status", "paused"), ("expires_at", "soon"), ("turn_id", "")],
)
def test_a_corrupt_lease_is_named_reported_and_quarantined(
    store: Any,
    kind: str,
    request: pytest.FixtureRequest,
    capsys: Any,
    field: str,
    value: str,
) -> None:
    conversation = new_conversation_id()
    turn_id = _suspended_turn(store, conversation)
    if field == "expires_at":
        _corrupt_lease(store, conversation, "status", "running")
    _corrupt_lease(store, conversation, field, value)
    _raises_named(lambda: store.turn_store().open_turn(conversation), conversation, "lease")
    _raises_named(
        lambda: AgentRunner(store).run(_agent(AiMessage("again")), conversation, "hi"),
        conversation,
        "lease",
    )

    status, out = _doctor(kind, request, capsys, conversation)
    assert status == 1
    assert f"conversation {conversation!r}: corrupt lease: " in out

    status, out = _doctor(kind, request, capsys, conversation, repair=True)
    assert f"repaired: conversation {conversation!r}: quarantined lease" in out
    # the suspended turn it held can no longer be resumed: closed, its call answered
    assert f"closed turn {turn_id!r} as cancelled" in out
    assert status == 0, out
    assert store.turn_store().open_turn(conversation) is None
    turn = AgentRunner(store).run(_agent(AiMessage("welcome back")), conversation, "hello?")
    assert turn.status is TurnStatus.COMPLETED
    (kept,) = _quarantined(kind, request, conversation)
    assert kept.kind == "lease" and value.encode() in kept.data


def test_a_dead_lease_and_a_turn_stuck_in_transition_are_repaired(
    store: Any, kind: str, request: pytest.FixtureRequest, capsys: Any
) -> None:
    conversation = new_conversation_id()
    turns = store.turn_store()
    # a turn whose process died after the model asked for a tool: no record, an expired lease
    assert turns.acquire_conversation(conversation, "dead", "gone", 30.0, now=100.0) is None
    memory = store.chat_memory(conversation)
    memory.add_message_if_absent(UserMessage("hi", message_id="u1", turn_id="dead"))
    ask = AiMessage(None, (ToolCall("call-1", "lookup", "{}"),), message_id="a1", turn_id="dead")
    memory.add_message_if_absent(ask)

    status, out = _doctor(kind, request, capsys, conversation)
    assert status == 1
    assert f"conversation {conversation!r}: expired-lease lease: turn 'dead' (no record)" in out
    assert "protocol" not in out  # the open call is the dead turn's, not a violation of its own

    status, out = _doctor(kind, request, capsys, conversation, repair=True)
    assert "closed turn 'dead' as cancelled" in out
    assert status == 0, out
    assert turns.open_turn(conversation) is None
    assert validate_tool_protocol(memory.get_messages()) == []

    # a suspended turn whose resume lost its reply: the record says suspended, the lease says
    # running, and it expired
    turn_id = _suspended_turn(store, conversation)
    assert turns.reacquire_conversation(conversation, turn_id, "lost", 30.0, now=100.0)
    status, out = _doctor(kind, request, capsys, conversation)
    assert status == 1
    assert f"stuck-turn turn {turn_id!r}: the record says suspended, the lease says running" in out
    status, out = _doctor(kind, request, capsys, conversation, repair=True)
    assert f"closed turn {turn_id!r} as cancelled" in out
    assert status == 0, out
    assert turns.load_turn(conversation, turn_id).status is TurnStatus.CANCELLED
    turn = AgentRunner(store).run(_agent(AiMessage("welcome back")), conversation, "hello?")
    assert turn.status is TurnStatus.COMPLETED


def test_a_running_turn_record_without_a_lease_is_closed(
    store: Any, kind: str, request: pytest.FixtureRequest, capsys: Any
) -> None:
    conversation = new_conversation_id()
    memory = store.chat_memory(conversation)
    memory.add_message_if_absent(UserMessage("hi", message_id="u1", turn_id="t-run"))
    ask = AiMessage(None, (ToolCall("call-1", "lookup", "{}"),), message_id="a1", turn_id="t-run")
    memory.add_message_if_absent(ask)
    record = AgentTurnSnapshot(
        conversation, "t-run", "shop", TurnStatus.RUNNING, step_count=1, message_ids=("u1", "a1")
    )
    assert store.turn_store().save_turn(record, 0)

    status, out = _doctor(kind, request, capsys, conversation)
    assert status == 1
    assert "stuck-turn turn 't-run': the record says running and no lease holds it" in out
    status, out = _doctor(kind, request, capsys, conversation, repair=True)
    assert "closed turn 't-run' as cancelled" in out
    assert status == 0, out
    assert store.turn_store().load_turn(conversation, "t-run").status is TurnStatus.CANCELLED
    assert store.turn_store().open_turn(conversation) is None
    assert validate_tool_protocol(memory.get_messages()) == []


def test_doctor_checks_every_conversation_when_none_is_named(
    kind: str, request: pytest.FixtureRequest, capsys: Any
) -> None:
    prefix = f"doc{uuid.uuid4().hex[:12]}_"
    option = "key_prefix" if kind.startswith("redis") else "table_prefix"
    store = make_store(kind, request, **{option: prefix})
    try:
        healthy, broken = new_conversation_id(), new_conversation_id()
        _plain_turn(store, healthy)
        answer = _plain_turn(store, broken)
        _corrupt_message(store, broken, answer, b"{")
        url = str(store_url(kind, request))
        capsys.readouterr()
        command = ["doctor", "--store", url, "--prefix", prefix]
        command += ["--cluster"] if kind == "redis-cluster" else []
        assert main(command) == 1
        out = capsys.readouterr().out
        assert f"conversation {broken!r}: corrupt message {answer!r}" in out
        assert healthy not in out
        assert main([*command, "--repair"]) == 0
        assert main(command) == 0
        assert capsys.readouterr().out.endswith("agentctx doctor: healthy\n")
    finally:
        store.close()


@pytest.mark.parametrize(
    "argv",
    [
        ["doctor", "--store", "ftp://example/x"],
        ["doctor", "--store", "redis://127.0.0.1:1/0"],
        ["doctor", "--store", "sqlite://", "x" * 513],
        ["doctor", "--store", "sqlite://", "--cluster"],
    ],
)
def test_doctor_bad_usage_is_one_line_and_status_2(argv: list[str], capsys: Any) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("agentctx: ") and captured.err.count("\n") == 1


def test_quarantining_an_early_message_keeps_every_later_read_right(
    store: Any, kind: str, request: pytest.FixtureRequest, capsys: Any
) -> None:
    """Redis keeps messages by position: removing the first one shifts the index and the
    visible positions of every later message, in the same script."""
    conversation = new_conversation_id()
    _plain_turn(store, conversation)
    _plain_turn(store, conversation)
    memory = store.chat_memory(conversation)
    first, *rest = memory.get_messages()
    _corrupt_message(store, conversation, first.message_id, b"[]")
    status, out = _doctor(kind, request, capsys, conversation, repair=True)
    assert status == 0, out
    assert memory.get_messages() == rest
    assert memory.get_model_messages() == rest
    assert [memory.get_message(m.message_id) for m in rest] == rest
    assert memory.get_message(first.message_id) is None
    assert memory.message_count() == len(rest)
    turn = AgentRunner(store).run(_agent(AiMessage("third")), conversation, "and now?")
    assert memory.get_messages() == [*rest, *turn.messages]
    assert memory.get_model_messages(2) == list(turn.messages)


def test_a_corrupt_redis_index_entry_names_the_conversation(store: Any, kind: str) -> None:
    if not kind.startswith("redis"):
        pytest.skip("only Redis keeps an index of positions")
    conversation = new_conversation_id()
    answer = _plain_turn(store, conversation)
    keys = conversation_key(store.key_prefix, "conv", conversation)
    store.client.hset(keys + ":i", answer, "somewhere")
    memory = store.chat_memory(conversation)
    _raises_named(lambda: memory.get_message(answer), conversation, f"message {answer!r}")


def test_the_async_runner_names_a_corrupt_record_too(
    store: Any, kind: str, request: pytest.FixtureRequest
) -> None:
    conversation = new_conversation_id()
    answer = _plain_turn(store, conversation)
    _corrupt_message(store, conversation, answer, b"\x00")
    url = store_url(kind, request)

    async def body() -> None:
        async_store = await make_async_store(kind, url)
        try:
            model = AsyncScriptedChatModel([AiMessage("again")])
            runner = AsyncAgentRunner(async_store)
            with pytest.raises(
                SerializationError, match=_names(conversation, f"message {answer!r}")
            ):
                await runner.run(Agent("shop", model), conversation, "hi")
            await runner.aclose()
        finally:
            await async_store.aclose()

    asyncio.run(body())
