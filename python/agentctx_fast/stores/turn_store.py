"""Turn records, snapshots and conversation leases: what the runner persists.

A turn *snapshot* (`AgentTurnSnapshot`) is everything needed to continue a turn in another
process: status, step count, the ids of the turn's messages (the messages themselves live in
chat memory), pending tool calls and approvals, and serialisable metadata. Snapshots are saved
with compare-and-set on ``version``, like compression states.

A conversation *lease* (`ConversationLease`) is the per-conversation busy protection: at most
one open turn per conversation. A `RUNNING` turn holds it with an owner token and an expiry
that the running process renews, so a crashed process cannot hold a conversation for ever; a
`SUSPENDED` turn holds it without expiry until it is resumed to its end or cancelled. Every
lease operation is one atomic step on the store's server; times are wall-clock seconds passed
in by the caller (the runner's clock), so all processes must share a clock within a fraction of
the lease length.

A database store implements the protocol once, as coroutines over its I/O port: its blocking
turn store is that implementation driven by a blocking port (`BlockingAgentTurnStore`), and an
in-process store, which never waits, is offered to asyncio code as it is
(`AwaitableAgentTurnStore`), as chat memories (`agentctx_fast.memory`) and compression states
(`agentctx_fast.compression.coordinator`) are beside their own protocols.

>>> store = InMemoryAgentTurnStore()
>>> store.acquire_conversation("c1", "t1", "owner-a", 30.0, now=100.0) is None
True
>>> try:
...     store.acquire_conversation("c1", "t2", "owner-b", 30.0, now=101.0)
... except AgentConversationBusyError as error:
...     error.turn_id
't1'
>>> store.acquire_conversation("c1", "t2", "owner-b", 30.0, now=131.0)  # t1's lease expired
't1'
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, Protocol, runtime_checkable

from agentctx_fast._blocking import (
    AwaitableAdapter,
    BlockingAdapter,
    awaitable,
    blocking,
    implementation,
)
from agentctx_fast._ids import check_conversation_id
from agentctx_fast.core.messages import ToolCall
from agentctx_fast.core.turns import TurnStatus
from agentctx_fast.errors import (
    AgentConversationBusyError,  # noqa: F401 (the example above)
    SerializationError,
)
from agentctx_fast.stores.turn_types import (
    OPEN_STATUSES,
    AgentTurnSnapshot,
    ConversationLease,
    Fence,
    LeaseRenewal,
    PendingApproval,
    busy_error,
    check_lease_arguments,
    check_snapshot_save,
    check_turn_ids,
    lease_lost,
)

__all__ = [
    "OPEN_STATUSES",
    "AgentTurnSnapshot",
    "AgentTurnStore",
    "AsyncAgentTurnStore",
    "AwaitableAgentTurnStore",
    "BlockingAgentTurnStore",
    "ConversationLease",
    "Fence",
    "InMemoryAgentTurnStore",
    "LeaseRenewal",
    "PendingApproval",
    "awaitable_turn_store",
    "busy_error",
    "check_lease_arguments",
    "check_snapshot_save",
    "check_turn_ids",
    "dump_snapshot",
    "lease_lost",
    "load_snapshot",
]


@runtime_checkable
class AgentTurnStore(Protocol):
    """Turn snapshots (compare-and-set) and conversation leases (atomic on the server)."""

    def load_turn(self, conversation_id: str, turn_id: str) -> AgentTurnSnapshot | None:
        """The stored snapshot, or None."""
        ...

    def save_turn(
        self, snapshot: AgentTurnSnapshot, expected_version: int, fence: Fence | None = None
    ) -> bool:
        """Store ``snapshot`` as version ``expected_version + 1`` if the stored version (0 when
        absent) is ``expected_version``; False, and nothing written, otherwise. A re-sent save
        that finds itself applied (the version one past ``expected_version`` holding the same
        data) is True. With a ``fence``, `LeaseLostError` unless it holds the lease."""
        ...

    def open_turn(self, conversation_id: str) -> ConversationLease | None:
        """The conversation's open turn, expired or not, or None."""
        ...

    def acquire_conversation(
        self, conversation_id: str, turn_id: str, owner: str, lease_seconds: float, now: float
    ) -> str | None:
        """Open ``turn_id`` as the running turn of the conversation, held by ``owner`` until
        ``now + lease_seconds``.

        Raises `AgentConversationBusyError` (with the open turn's id) while another turn is
        suspended or running with a live lease. A running turn whose lease expired is taken
        over: its id is returned so the caller can close it; otherwise None.
        """
        ...

    def renew_lease(
        self, conversation_id: str, turn_id: str, owner: str, lease_seconds: float, now: float
    ) -> LeaseRenewal:
        """Extend ``owner``'s lease; says whether a cancel was requested or the lease was lost."""
        ...

    def suspend_conversation(self, conversation_id: str, turn_id: str, owner: str) -> bool:
        """Turn ``owner``'s running lease into a suspended hold without expiry."""
        ...

    def reacquire_conversation(
        self,
        conversation_id: str,
        turn_id: str,
        owner: str,
        lease_seconds: float,
        now: float,
        expected_version: int | None = None,
    ) -> bool:
        """Take the suspended ``turn_id`` back as running, held by ``owner``, if its record is
        still at ``expected_version`` (when given: the version read with it); False when the
        conversation's open turn is not ``turn_id`` suspended at that version (another resume
        won). True again for a re-sent call that finds ``owner`` already holding it."""
        ...

    def request_cancel(self, conversation_id: str, turn_id: str, now: float) -> bool:
        """Flag the live running ``turn_id`` for cancellation at its next step."""
        ...

    def release_conversation(
        self, conversation_id: str, turn_id: str, owner: str | None, now: float
    ) -> bool:
        """Free the conversation. With an ``owner``, only that owner's lease on ``turn_id``;
        with None, ``turn_id`` only when it is suspended or its lease expired."""
        ...


@runtime_checkable
class AsyncAgentTurnStore(Protocol):
    """`AgentTurnStore` for asyncio programs: the same operations, awaited."""

    async def load_turn(self, conversation_id: str, turn_id: str) -> AgentTurnSnapshot | None:
        """The stored snapshot, or None."""
        ...

    async def save_turn(
        self, snapshot: AgentTurnSnapshot, expected_version: int, fence: Fence | None = None
    ) -> bool:
        """Compare-and-set save of ``snapshot`` (see `AgentTurnStore.save_turn`)."""
        ...

    async def open_turn(self, conversation_id: str) -> ConversationLease | None:
        """The conversation's open turn, expired or not, or None."""
        ...

    async def acquire_conversation(
        self, conversation_id: str, turn_id: str, owner: str, lease_seconds: float, now: float
    ) -> str | None:
        """Open ``turn_id`` as the running turn (see `AgentTurnStore.acquire_conversation`)."""
        ...

    async def renew_lease(
        self, conversation_id: str, turn_id: str, owner: str, lease_seconds: float, now: float
    ) -> LeaseRenewal:
        """Extend ``owner``'s lease."""
        ...

    async def suspend_conversation(self, conversation_id: str, turn_id: str, owner: str) -> bool:
        """Turn ``owner``'s running lease into a suspended hold."""
        ...

    async def reacquire_conversation(
        self,
        conversation_id: str,
        turn_id: str,
        owner: str,
        lease_seconds: float,
        now: float,
        expected_version: int | None = None,
    ) -> bool:
        """Take the suspended ``turn_id`` back as running (see `AgentTurnStore`)."""
        ...

    async def request_cancel(self, conversation_id: str, turn_id: str, now: float) -> bool:
        """Flag the live running ``turn_id`` for cancellation."""
        ...

    async def release_conversation(
        self, conversation_id: str, turn_id: str, owner: str | None, now: float
    ) -> bool:
        """Free the conversation."""
        ...


class BlockingAgentTurnStore(BlockingAdapter[AsyncAgentTurnStore], AgentTurnStore):
    """The blocking `AgentTurnStore` over a store's one implementation: a database store's
    coroutines driven by `run_sync` over a blocking port (see `agentctx_fast._blocking`)."""

    load_turn = blocking(AsyncAgentTurnStore.load_turn)
    save_turn = blocking(AsyncAgentTurnStore.save_turn)
    open_turn = blocking(AsyncAgentTurnStore.open_turn)
    acquire_conversation = blocking(AsyncAgentTurnStore.acquire_conversation)
    renew_lease = blocking(AsyncAgentTurnStore.renew_lease)
    suspend_conversation = blocking(AsyncAgentTurnStore.suspend_conversation)
    reacquire_conversation = blocking(AsyncAgentTurnStore.reacquire_conversation)
    request_cancel = blocking(AsyncAgentTurnStore.request_cancel)
    release_conversation = blocking(AsyncAgentTurnStore.release_conversation)


class AwaitableAgentTurnStore(AwaitableAdapter[AgentTurnStore], AsyncAgentTurnStore):
    """An `AgentTurnStore` offered to asyncio code (in-process, or any blocking one the
    caller accepts to block on)."""

    load_turn = awaitable(AgentTurnStore.load_turn)
    save_turn = awaitable(AgentTurnStore.save_turn)
    open_turn = awaitable(AgentTurnStore.open_turn)
    acquire_conversation = awaitable(AgentTurnStore.acquire_conversation)
    renew_lease = awaitable(AgentTurnStore.renew_lease)
    suspend_conversation = awaitable(AgentTurnStore.suspend_conversation)
    reacquire_conversation = awaitable(AgentTurnStore.reacquire_conversation)
    request_cancel = awaitable(AgentTurnStore.request_cancel)
    release_conversation = awaitable(AgentTurnStore.release_conversation)


def awaitable_turn_store(store: AgentTurnStore) -> AsyncAgentTurnStore:
    """``store`` for the library's one implementation of the turn loop."""
    return implementation(store, AwaitableAgentTurnStore)


def dump_snapshot(snapshot: AgentTurnSnapshot) -> bytes:
    """The snapshot as UTF-8 JSON (without its version, which the store keeps beside it)."""
    fields = {
        "type": "agent_turn",
        "conversation_id": snapshot.conversation_id,
        "turn_id": snapshot.turn_id,
        "agent_name": snapshot.agent_name,
        "status": snapshot.status.value,
        "step_count": snapshot.step_count,
        "message_ids": list(snapshot.message_ids),
        "pending_tool_calls": [[c.id, c.name, c.arguments] for c in snapshot.pending_tool_calls],
        "pending_approvals": [
            [a.tool_call_id, a.tool_name, a.arguments, a.form_message_id]
            for a in snapshot.pending_approvals
        ],
        "decisions": dict(snapshot.decisions),
        "started_tool_calls": None
        if snapshot.started_tool_calls is None
        else list(snapshot.started_tool_calls),
        "final_message_id": snapshot.final_message_id,
        "error": snapshot.error,
        "metadata": dict(snapshot.metadata),
        "created_at": snapshot.created_at,
        "updated_at": snapshot.updated_at,
    }
    try:
        return json.dumps(
            fields, ensure_ascii=False, allow_nan=False, separators=(",", ":")
        ).encode("utf-8")
    except (TypeError, ValueError, RecursionError, UnicodeEncodeError) as error:
        raise SerializationError(
            f"turn {snapshot.turn_id!r}: snapshot is not serialisable: {error}"
        ) from None


def _refuse_constant(name: str) -> Any:
    raise SerializationError(f"stored turn snapshot holds {name}, which is not JSON")


def _str_list(value: object, what: str, width: int | None = None) -> list[Any]:
    if not isinstance(value, list):
        raise SerializationError(f"stored turn snapshot: {what} must be a list")
    for item in value:
        if width is None:
            if not isinstance(item, str):
                raise SerializationError(f"stored turn snapshot: {what} must hold strings")
        elif (
            not isinstance(item, list)
            or len(item) != width
            or not all(isinstance(x, str) for x in item)
        ):
            raise SerializationError(
                f"stored turn snapshot: {what} entries must be lists of {width} strings"
            )
    return value


def load_snapshot(data: bytes, version: int) -> AgentTurnSnapshot:
    """The snapshot `dump_snapshot` wrote; anything else is a `SerializationError`."""
    try:
        fields = json.loads(bytes(data).decode("utf-8"), parse_constant=_refuse_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise SerializationError(f"stored turn snapshot is not JSON: {error}") from None
    expected: dict[str, type | tuple[type, ...]] = {
        "type": str,
        "conversation_id": str,
        "turn_id": str,
        "agent_name": str,
        "status": str,
        "step_count": int,
        "message_ids": list,
        "pending_tool_calls": list,
        "pending_approvals": list,
        "decisions": dict,
        "started_tool_calls": (list, type(None)),
        "final_message_id": (str, type(None)),
        "error": (str, type(None)),
        "metadata": dict,
        "created_at": (int, float),
        "updated_at": (int, float),
    }
    if isinstance(fields, dict):
        fields.setdefault("started_tool_calls", None)  # a record older than the field
    if not isinstance(fields, dict) or set(fields) != set(expected):
        raise SerializationError("stored turn snapshot has missing or unknown fields")
    for name, kind in expected.items():
        value = fields[name]
        if isinstance(value, bool) or not isinstance(value, kind):
            raise SerializationError(f"stored turn snapshot: {name} has the wrong type")
    if fields["type"] != "agent_turn":
        raise SerializationError(f"stored turn snapshot has type tag {fields['type']!r}")
    decisions = fields["decisions"]
    if not all(isinstance(v, bool) for v in decisions.values()):
        raise SerializationError("stored turn snapshot: decisions must map ids to booleans")
    try:
        return AgentTurnSnapshot(
            conversation_id=fields["conversation_id"],
            turn_id=fields["turn_id"],
            agent_name=fields["agent_name"],
            status=TurnStatus(fields["status"]),
            step_count=fields["step_count"],
            message_ids=tuple(_str_list(fields["message_ids"], "message_ids")),
            pending_tool_calls=tuple(
                ToolCall(*call) for call in _str_list(fields["pending_tool_calls"], "calls", 3)
            ),
            pending_approvals=tuple(
                PendingApproval(*a) for a in _str_list(fields["pending_approvals"], "approvals", 4)
            ),
            decisions=decisions,
            started_tool_calls=None
            if fields["started_tool_calls"] is None
            else tuple(_str_list(fields["started_tool_calls"], "started_tool_calls")),
            final_message_id=fields["final_message_id"],
            error=fields["error"],
            metadata=fields["metadata"],
            created_at=float(fields["created_at"]),
            updated_at=float(fields["updated_at"]),
            version=version,
        )
    except (ValueError, TypeError) as error:
        raise SerializationError(f"stored turn snapshot is invalid: {error}") from None


class InMemoryAgentTurnStore:
    """Snapshots and leases in this process; thread-safe, protects threads of one process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._turns: dict[tuple[str, str], AgentTurnSnapshot] = {}
        self._leases: dict[str, ConversationLease] = {}

    def load_turn(self, conversation_id: str, turn_id: str) -> AgentTurnSnapshot | None:
        check_turn_ids(conversation_id, turn_id)
        with self._lock:
            return self._turns.get((conversation_id, turn_id))

    def save_turn(
        self, snapshot: AgentTurnSnapshot, expected_version: int, fence: Fence | None = None
    ) -> bool:
        check_snapshot_save(snapshot, expected_version)
        dump_snapshot(snapshot)  # the same serialisability rule as the database stores
        key = (snapshot.conversation_id, snapshot.turn_id)
        saved = replace(snapshot, version=expected_version + 1)
        with self.fenced(snapshot.conversation_id, fence):
            stored = self._turns.get(key)
            if (0 if stored is None else stored.version) != expected_version:
                # a fenced save re-sent (the lease its own: no other writer) found applied
                return fence is not None and stored == saved
            self._turns[key] = saved
            return True

    @contextmanager
    def fenced(self, conversation_id: str, fence: Fence | None) -> Iterator[None]:
        """Hold this store's lock for a write; `LeaseLostError` first unless ``fence`` (when
        given) holds the conversation's lease."""
        with self._lock:
            if fence is not None:
                lease = self._leases.get(conversation_id)
                if lease is None or lease.turn_id != fence.turn_id or lease.owner != fence.owner:
                    raise lease_lost(conversation_id, fence)
            yield

    def open_turn(self, conversation_id: str) -> ConversationLease | None:
        check_conversation_id(conversation_id)
        with self._lock:
            return self._leases.get(conversation_id)

    def discard(self, conversation_id: str) -> bool:
        """Forget the conversation's turn records and lease (the caller holds the lock, see
        `fenced`); True when there was any."""
        turns = [key for key in self._turns if key[0] == conversation_id]
        for key in turns:
            del self._turns[key]
        return self._leases.pop(conversation_id, None) is not None or bool(turns)

    def conversations(self) -> set[str]:
        """The conversations with a turn record or a lease."""
        with self._lock:
            return {key[0] for key in self._turns} | set(self._leases)

    def acquire_conversation(
        self, conversation_id: str, turn_id: str, owner: str, lease_seconds: float, now: float
    ) -> str | None:
        check_lease_arguments(conversation_id, turn_id, owner, lease_seconds)
        with self._lock:
            lease = self._leases.get(conversation_id)
            if lease is not None and lease.turn_id == turn_id and lease.owner == owner:
                return lease.previous_turn_id  # a re-sent call: already taken
            if lease is not None and not lease.expired(now):
                raise busy_error(conversation_id, lease)
            previous = None if lease is None else lease.turn_id
            self._leases[conversation_id] = ConversationLease(
                conversation_id, turn_id, TurnStatus.RUNNING, owner, now + lease_seconds,
                previous_turn_id=previous,
            )  # fmt: skip
            return previous

    def renew_lease(
        self, conversation_id: str, turn_id: str, owner: str, lease_seconds: float, now: float
    ) -> LeaseRenewal:
        check_lease_arguments(conversation_id, turn_id, owner, lease_seconds)
        with self._lock:
            lease = self._leases.get(conversation_id)
            if lease is None or lease.turn_id != turn_id or lease.owner != owner:
                return LeaseRenewal.LOST
            self._leases[conversation_id] = replace(lease, expires_at=now + lease_seconds)
            if lease.cancel_requested:
                return LeaseRenewal.CANCEL_REQUESTED
            return LeaseRenewal.RENEWED

    def suspend_conversation(self, conversation_id: str, turn_id: str, owner: str) -> bool:
        check_turn_ids(conversation_id, turn_id, owner)
        with self._lock:
            lease = self._leases.get(conversation_id)
            if lease is None or lease.turn_id != turn_id or lease.owner != owner:
                return False
            self._leases[conversation_id] = ConversationLease(
                conversation_id, turn_id, TurnStatus.SUSPENDED, None, None
            )
            return True

    def reacquire_conversation(
        self,
        conversation_id: str,
        turn_id: str,
        owner: str,
        lease_seconds: float,
        now: float,
        expected_version: int | None = None,
    ) -> bool:
        check_lease_arguments(conversation_id, turn_id, owner, lease_seconds)
        with self._lock:
            lease = self._leases.get(conversation_id)
            if lease is not None and lease.turn_id == turn_id and lease.owner == owner:
                return True  # a re-sent call: already taken
            if lease is None or lease.turn_id != turn_id or lease.status != TurnStatus.SUSPENDED:
                return False
            stored = self._turns.get((conversation_id, turn_id))
            if expected_version is not None and (
                stored is None or stored.version != expected_version
            ):
                return False
            self._leases[conversation_id] = ConversationLease(
                conversation_id, turn_id, TurnStatus.RUNNING, owner, now + lease_seconds
            )
            return True

    def request_cancel(self, conversation_id: str, turn_id: str, now: float) -> bool:
        check_turn_ids(conversation_id, turn_id)
        with self._lock:
            lease = self._leases.get(conversation_id)
            if (
                lease is None
                or lease.turn_id != turn_id
                or lease.status != TurnStatus.RUNNING
                or lease.expired(now)
            ):
                return False
            self._leases[conversation_id] = replace(lease, cancel_requested=True)
            return True

    def release_conversation(
        self, conversation_id: str, turn_id: str, owner: str | None, now: float
    ) -> bool:
        check_turn_ids(conversation_id, turn_id, owner)
        with self._lock:
            lease = self._leases.get(conversation_id)
            if lease is None or lease.turn_id != turn_id:
                return False
            if owner is not None:
                if lease.owner != owner:
                    return False
            elif not (lease.status == TurnStatus.SUSPENDED or lease.expired(now)):
                return False
            del self._leases[conversation_id]
            return True
