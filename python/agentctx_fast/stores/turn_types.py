"""The values of the turn stores: `AgentTurnSnapshot`, `ConversationLease`, `LeaseRenewal`,
`Fence` and `PendingApproval` (also exported by `agentctx_fast.stores.turn_store` and the
package root), and the argument checks every turn store makes: the leaf that
`agentctx_fast.stores.turn_store` and each store's turn store build on."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from agentctx_fast._ids import (
    check_conversation_id,
    check_expected_version,
    check_identifier,
    check_version,
    is_positive_seconds,
)
from agentctx_fast.core.messages import ToolCall
from agentctx_fast.core.turns import TurnStatus
from agentctx_fast.errors import (
    AgentConversationBusyError,
    InvalidArgumentError,
    LeaseLostError,
)

__all__ = [  # the checks below are the turn stores' own
    "AgentTurnSnapshot",
    "ConversationLease",
    "Fence",
    "LeaseRenewal",
    "PendingApproval",
]

OPEN_STATUSES = frozenset({TurnStatus.RUNNING, TurnStatus.SUSPENDED})
"""Statuses of a turn that holds its conversation."""


class LeaseRenewal(StrEnum):
    """What renewing a running turn's lease found."""

    RENEWED = "renewed"
    CANCEL_REQUESTED = "cancel_requested"
    LOST = "lost"


@dataclass(frozen=True, slots=True)
class Fence:
    """The lease a turn's writes are made under: a store accepts a fenced write
    only while the conversation's lease is still ``turn_id`` held by ``owner``, checked in
    the same script or transaction as the write. ``owner`` is new for every acquisition, so
    the token changes whenever another runner takes the conversation."""

    turn_id: str
    owner: str


def lease_lost(conversation_id: str, fence: Fence) -> LeaseLostError:
    """The error of a fenced write refused because the lease moved on."""
    return LeaseLostError(
        f"conversation {conversation_id!r}: turn {fence.turn_id!r} no longer holds the "
        "lease (lease lost: another runner took the conversation); nothing was written"
    )


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """A tool call waiting for the user's decision, shown to them as ``form_message_id``."""

    tool_call_id: str
    tool_name: str
    arguments: str
    form_message_id: str


@dataclass(frozen=True, slots=True)
class ConversationLease:
    """The open turn of a conversation. ``expires_at`` is None while the turn is suspended."""

    conversation_id: str
    turn_id: str
    status: TurnStatus
    owner: str | None
    expires_at: float | None
    cancel_requested: bool = False
    previous_turn_id: str | None = None  # the expired turn this lease took over, if any

    def expired(self, now: float) -> bool:
        """True when a running turn's owner stopped renewing before ``now``."""
        return self.expires_at is not None and self.expires_at <= now


@dataclass(frozen=True, slots=True)
class AgentTurnSnapshot:
    """The persisted state of one turn; ``version`` 0 means never saved.

    Only plain data goes in: no secrets, connections or service objects. ``metadata`` must be
    JSON-serialisable; ``decisions`` are the approval results recorded so far.

    ``started_tool_calls``: the ids of the calls of non-idempotent tools recorded as started
    before they ran, so that a turn interrupted after that tells the model the tool
    may have run, never that it did not. None: a record written before this was kept, about
    which nothing is known (any unanswered call may have run).
    """

    conversation_id: str
    turn_id: str
    agent_name: str
    status: TurnStatus
    step_count: int = 0
    message_ids: tuple[str, ...] = ()
    pending_tool_calls: tuple[ToolCall, ...] = ()
    pending_approvals: tuple[PendingApproval, ...] = ()
    decisions: Mapping[str, bool] = field(default_factory=dict)
    started_tool_calls: tuple[str, ...] | None = ()
    final_message_id: str | None = None
    error: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    created_at: float = 0.0
    updated_at: float = 0.0
    version: int = 0

    def __post_init__(self) -> None:
        check_conversation_id(self.conversation_id)
        if not isinstance(self.turn_id, str) or not self.turn_id:
            raise InvalidArgumentError(f"turn_id must be a non-empty str, got {self.turn_id!r}")
        check_identifier(self.turn_id, "turn_id")
        if not isinstance(self.status, TurnStatus):
            raise InvalidArgumentError(f"status must be a TurnStatus, got {self.status!r}")
        if (
            isinstance(self.step_count, bool)
            or not isinstance(self.step_count, int)
            or self.step_count < 0
        ):
            raise InvalidArgumentError(f"step_count must be an int >= 0, got {self.step_count!r}")
        started = self.started_tool_calls
        if started is not None and (
            not isinstance(started, tuple) or not all(isinstance(i, str) for i in started)
        ):
            raise InvalidArgumentError(
                f"started_tool_calls must be a tuple of str or None, got {started!r}"
            )
        check_version(self.version, "version")


def check_lease_arguments(
    conversation_id: object, turn_id: object, owner: object, lease_seconds: object
) -> None:
    """Shared argument checks of the lease operations."""
    check_turn_ids(conversation_id, turn_id)
    _check_id(owner, "owner")
    if not is_positive_seconds(lease_seconds):
        raise InvalidArgumentError(f"lease_seconds must be a number > 0, got {lease_seconds!r}")


def check_turn_ids(conversation_id: object, turn_id: object, owner: object = None) -> None:
    """The ids a turn-store call names (``owner`` when not None), checked before any I/O: a
    read or a lease change with an id no store could hold fails as an argument on every
    store, never as a lookup that finds nothing on one and a database error on another."""
    check_conversation_id(conversation_id)
    _check_id(turn_id, "turn_id")
    if owner is not None:
        _check_id(owner, "owner")


def _check_id(value: object, name: str) -> None:
    if not isinstance(value, str) or not value:
        raise InvalidArgumentError(f"{name} must be a non-empty str, got {value!r}")
    check_identifier(value, name)


def check_snapshot_save(snapshot: object, expected_version: object) -> AgentTurnSnapshot:
    """Validates the arguments of `AgentTurnStore.save_turn`."""
    if not isinstance(snapshot, AgentTurnSnapshot):
        raise InvalidArgumentError(
            f"save_turn needs an AgentTurnSnapshot, got {type(snapshot).__name__}"
        )
    check_expected_version(expected_version)
    return snapshot


def busy_error(conversation_id: str, lease: ConversationLease) -> AgentConversationBusyError:
    """The error for a `run` on a conversation whose turn ``lease.turn_id`` is still open."""
    return AgentConversationBusyError(
        f"conversation {conversation_id!r} has an open turn {lease.turn_id!r} "
        f"({lease.status.value}); resume or cancel it first",
        lease.turn_id,
    )
