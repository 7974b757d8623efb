"""`agentctx doctor`: what is wrong with a store's conversations, and the repairs that are safe.

One logic over the async stores (`AsyncSqlAgentStore`, `AsyncRedisAgentStore`); the CLI drives
it with `asyncio.run`. Per conversation it reports:

- ``corrupt``: a message, turn or lease record that does not decode;
- ``protocol``: a tool-protocol violation in the stored history (`validate_tool_protocol` over
  the messages that decode);
- ``expired-lease``: a running lease past its expiry (its process died);
- ``stuck-turn``: a turn left in transition: its record says ``suspended`` while the lease says
  ``running`` for it with an expired expiry, or its record says ``running`` with no lease for it.

`repair` quarantines corrupt records (moved out of every read, kept for inspection: see
`quarantined`) and frees dead leases and stuck turns by closing their turn as `cancel` does
(open calls answered, the record ended, the lease released), then looks again. Protocol
violations are reported, never rewritten: a history is the record of what happened.

>>> import asyncio
>>> from agentctx_fast.stores.sql import AsyncSqlAgentStore
>>> async def check() -> list[str]:
...     store = AsyncSqlAgentStore("sqlite://")
...     await store.schema.initialize()
...     report = await diagnose(store)
...     await store.aclose()
...     return [finding.line() for finding in report]
>>> asyncio.run(check())
[]
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentctx_fast._ids import check_conversation_id
from agentctx_fast.core.messages import Message
from agentctx_fast.core.protocol import validate_tool_protocol
from agentctx_fast.core.turns import TurnStatus
from agentctx_fast.errors import (
    AgentCtxError,
    InvalidArgumentError,
    SerializationError,
    TurnStateError,
)
from agentctx_fast.stores._records import (
    QuarantinedRecord,
    StoredRecord,
    decode_lease,
    naming,
)
from agentctx_fast.stores.serializer import load_message
from agentctx_fast.stores.turn_store import (
    OPEN_STATUSES,
    AgentTurnSnapshot,
    ConversationLease,
    load_snapshot,
)

__all__ = ["Finding", "QuarantinedRecord", "diagnose", "quarantined", "repair"]

if TYPE_CHECKING:  # each store's extra is needed only to use that store
    from agentctx_fast.stores.redis import AsyncRedisAgentStore
    from agentctx_fast.stores.sql import AsyncSqlAgentStore

    DoctorStore = AsyncSqlAgentStore | AsyncRedisAgentStore


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem of one conversation. ``problem``: ``corrupt``, ``protocol``,
    ``expired-lease`` or ``stuck-turn``; ``record``: ``message 'm1'``, ``turn 't1'``,
    ``lease``; ``repairable``: what `repair` fixes."""

    conversation_id: str
    problem: str
    record: str
    detail: str
    repairable: bool
    stored: StoredRecord | None = None
    turn_id: str | None = None

    def line(self) -> str:
        """The finding as one line of the doctor's report."""
        return f"conversation {self.conversation_id!r}: {self.problem} {self.record}: {self.detail}"


def _records(store: Any) -> Any:
    """The raw-record access of ``store`` (an async SQL or Redis store). A store's module is
    loaded once the store exists, so neither database's extra is needed for the other's."""
    sql = sys.modules.get("agentctx_fast.stores.sql")
    if sql is not None and isinstance(store, sql.AsyncSqlAgentStore):
        from agentctx_fast.stores._sql_records import SqlRecords

        return SqlRecords(store)
    redis = sys.modules.get("agentctx_fast.stores.redis")
    if redis is not None and isinstance(store, redis.AsyncRedisAgentStore):
        from agentctx_fast.stores._redis_records import RedisRecords

        return RedisRecords(store)
    raise InvalidArgumentError(
        f"agentctx doctor needs an async SQL or Redis store, got {type(store).__name__}"
    )


async def diagnose(
    store: DoctorStore, conversation_ids: Sequence[str] | None = None, *, now: float | None = None
) -> list[Finding]:
    """Every problem of ``conversation_ids`` (all the store's conversations when None)."""
    records = _records(store)
    when = time.time() if now is None else now
    if conversation_ids is None:
        ids = await records.conversations()
    else:
        ids = [check_conversation_id(conversation_id) for conversation_id in conversation_ids]
    findings: list[Finding] = []
    for conversation_id in ids:
        findings.extend(await _conversation(store, records, conversation_id, when))
    return findings


async def _conversation(
    store: Any, records: Any, conversation_id: str, now: float
) -> list[Finding]:
    findings: list[Finding] = []
    messages: list[Message] = []
    for record in await records.messages(conversation_id):
        name = "a message record" if record.record_id is None else f"message {record.record_id!r}"
        try:
            with naming(conversation_id, name):
                messages.append(load_message(store.serializer, record.data))
        except SerializationError as error:
            findings.append(_corrupt(conversation_id, name, error, record))
    statuses: dict[str, TurnStatus] = {}
    for record in await records.turns(conversation_id):
        name = f"turn {record.record_id!r}"
        try:
            with naming(conversation_id, name):
                snapshot = load_snapshot(record.data, _version(record.version))
                if snapshot.turn_id != record.record_id:
                    raise SerializationError(f"the record holds turn {snapshot.turn_id!r}")
            statuses[snapshot.turn_id] = snapshot.status
        except SerializationError as error:
            findings.append(_corrupt(conversation_id, name, error, record))
    lease = await _lease(records, conversation_id, findings)
    findings.extend(_transitions(conversation_id, lease, statuses, now))
    findings.extend(_violations(conversation_id, messages, lease, statuses))
    return findings


def _violations(
    conversation_id: str,
    messages: list[Message],
    lease: ConversationLease | None,
    statuses: dict[str, TurnStatus],
) -> list[Finding]:
    """Tool-protocol violations, but for calls still waiting in an open turn (a suspended or
    running turn has calls without results until it ends: its own finding covers a dead one)."""
    open_turns = {turn_id for turn_id, status in statuses.items() if status in OPEN_STATUSES}
    if lease is not None:
        open_turns.add(lease.turn_id)
    turn_of = {message.message_id: message.turn_id for message in messages}
    return [
        Finding(
            conversation_id,
            "protocol",
            f"message {v.message_id!r}",
            f"{v.kind} (tool call {v.tool_call_id!r})",
            False,
        )
        for v in validate_tool_protocol(messages)
        if not (v.kind == "missing_result" and turn_of.get(v.message_id) in open_turns)
    ]


def _corrupt(
    conversation_id: str, name: str, error: SerializationError, record: StoredRecord
) -> Finding:
    detail = str(error).removeprefix(f"conversation {conversation_id!r}, {name}: ")
    return Finding(conversation_id, "corrupt", name, detail, True, record)


def _version(value: object) -> int:
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise SerializationError(f"stored version {value!r} is not a number")
    try:
        return int(value)
    except ValueError:
        raise SerializationError(f"stored version {value!r} is not a number") from None


async def _lease(
    records: Any, conversation_id: str, findings: list[Finding]
) -> ConversationLease | None:
    record = await records.lease(conversation_id)
    if record is None:
        return None
    fields = record.key
    try:
        return decode_lease(
            conversation_id,
            fields.get("turn_id"),
            fields.get("status"),
            fields.get("owner"),
            fields.get("expires_at"),
            fields.get("cancel_requested") in (True, 1, "1"),
        )
    except SerializationError as error:
        findings.append(_corrupt(conversation_id, "lease", error, record))
        return None


def _transitions(
    conversation_id: str,
    lease: ConversationLease | None,
    statuses: dict[str, TurnStatus],
    now: float,
) -> list[Finding]:
    findings: list[Finding] = []

    def stuck(turn_id: str, detail: str, problem: str = "stuck-turn") -> None:
        record = "lease" if problem == "expired-lease" else f"turn {turn_id!r}"
        findings.append(Finding(conversation_id, problem, record, detail, True, turn_id=turn_id))

    if lease is not None:
        status = statuses.get(lease.turn_id)
        said = "no record" if status is None else f"a {status.value} record"
        if lease.status is TurnStatus.RUNNING and lease.expired(now):
            if status is TurnStatus.SUSPENDED:
                stuck(lease.turn_id, "the record says suspended, the lease says running, expired")
            else:
                stuck(
                    lease.turn_id,
                    f"turn {lease.turn_id!r} ({said}) running, expired at {lease.expires_at!r}",
                    "expired-lease",
                )
        elif lease.status is TurnStatus.SUSPENDED and status is not TurnStatus.SUSPENDED:
            stuck(lease.turn_id, f"the lease holds it suspended, and it has {said}")
    for turn_id, status in sorted(statuses.items()):
        if status in OPEN_STATUSES and (lease is None or lease.turn_id != turn_id):
            stuck(turn_id, f"the record says {status.value} and no lease holds it")
    return findings


async def repair(
    store: DoctorStore, conversation_ids: Sequence[str] | None = None, *, now: float | None = None
) -> tuple[list[str], list[Finding]]:
    """Repair what `diagnose` finds repairable; returns one line per repair (``repaired: …``,
    or ``not repaired: …`` with the reason) and the findings left after it. Corrupt records go
    first (a quarantined lease can leave a turn stuck, which the next round closes)."""
    when = time.time() if now is None else now
    records = _records(store)
    done: list[str] = []
    for _ in range(3):
        findings = await diagnose(store, conversation_ids, now=when)
        fixable = [f for f in findings if f.repairable]
        if not fixable:
            return done, findings
        corrupt = [f for f in fixable if f.problem == "corrupt"]
        for finding in corrupt or fixable:
            line = await _repair_one(store, records, finding, when)
            if line is not None and line not in done:
                done.append(line)
    return done, await diagnose(store, conversation_ids, now=when)


async def _repair_one(store: Any, records: Any, finding: Finding, now: float) -> str | None:
    where = f"repaired: conversation {finding.conversation_id!r}"
    if finding.problem == "corrupt":
        assert finding.stored is not None
        if await records.quarantine(finding.conversation_id, finding.stored, finding.detail):
            return f"{where}: quarantined {finding.record}"
        return None
    assert finding.turn_id is not None
    conversation_id, turn_id = finding.conversation_id, finding.turn_id
    turn_store = store.turn_store()
    from agentctx_fast.runner.aio import AsyncAgentRunner

    runner = AsyncAgentRunner(store, clock=lambda: now)
    try:
        lease = await turn_store.open_turn(conversation_id)
        if lease is None:
            # No lease holds the turn: take one already expired, so that `cancel` takes it
            # over as a dead process's and answers the turn's open calls before closing it.
            await turn_store.acquire_conversation(
                conversation_id, turn_id, "agentctx-doctor", 1.0, now - 2.0
            )
            lease = await turn_store.open_turn(conversation_id)
        if await turn_store.load_turn(conversation_id, turn_id) is None:
            if not await _stand_in(store, conversation_id, turn_id, lease, now):
                released = await turn_store.release_conversation(
                    conversation_id, turn_id, None, now
                )
                return f"{where}: released the lease of turn {turn_id!r}" if released else None
        try:
            await runner.cancel(conversation_id, turn_id)
        except TurnStateError:  # the record is not open: only the lease to free
            released = await turn_store.release_conversation(conversation_id, turn_id, None, now)
            return f"{where}: released the lease of turn {turn_id!r}" if released else None
        return f"{where}: closed turn {turn_id!r} as cancelled and released its lease"
    except AgentCtxError as error:
        problem = f"{type(error).__name__}: {error}"
        return f"not repaired: conversation {conversation_id!r}: turn {turn_id!r}: {problem}"
    finally:
        await runner.aclose()


async def _stand_in(
    store: Any, conversation_id: str, turn_id: str, lease: ConversationLease | None, now: float
) -> bool:
    """A turn record in place of a lost (quarantined) one, naming the turn's stored messages, so
    that `cancel` can answer its open calls; False when the turn stored no message."""
    messages = await store.chat_memory(conversation_id).get_messages()
    ids = tuple(m.message_id for m in messages if m.turn_id == turn_id)
    if not ids:
        return False
    held = lease is not None and lease.turn_id == turn_id
    status = lease.status if held and lease is not None else TurnStatus.RUNNING
    snapshot = AgentTurnSnapshot(
        conversation_id, turn_id, "agentctx-doctor", status,
        message_ids=ids, created_at=now, updated_at=now,
    )  # fmt: skip
    return bool(await store.turn_store().save_turn(snapshot, 0))


async def quarantined(store: DoctorStore, conversation_id: str) -> list[QuarantinedRecord]:
    """The records `repair` moved out of ``conversation_id``, oldest first."""
    result: list[QuarantinedRecord] = await _records(store).quarantined(conversation_id)
    return result
