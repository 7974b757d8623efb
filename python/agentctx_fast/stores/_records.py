"""Naming a stored record that does not decode (SPEC §20: bad stored data is named).

A record written straight into a database (not JSON, a wrong type, a missing field, an unknown
status, a version or expiry that is no number) must surface as a `SerializationError` that says
which conversation and which record (``message 'm1'``, ``turn 't1'``, ``lease``), so an operator
can find it and `agentctx doctor` can quarantine it; never as a bare `ValueError` or `KeyError`
from deep inside a decoder.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from agentctx_fast.core.turns import TurnStatus
from agentctx_fast.errors import SerializationError
from agentctx_fast.stores.turn_store import ConversationLease

# What a decoder may raise on a value of the wrong shape (an unknown status, float("x"), a
# missing hash field, a version too large for an int column).
_DECODING = (ValueError, TypeError, KeyError, AttributeError, OverflowError, IndexError)


def record_error(conversation_id: str, record: str, problem: object) -> SerializationError:
    """The error of ``record`` of ``conversation_id`` (``problem``: the decoder's error)."""
    if isinstance(problem, SerializationError):
        text = str(problem)
    elif isinstance(problem, BaseException):
        text = f"{type(problem).__name__}: {problem}"
    else:
        text = str(problem)
    return SerializationError(f"conversation {conversation_id!r}, {record}: {text}")


@contextmanager
def naming(conversation_id: str, record: str) -> Iterator[None]:
    """Decoding ``record`` of ``conversation_id``: any decoding error (a `SerializationError`
    too) becomes a `SerializationError` naming both."""
    try:
        yield
    except SerializationError as error:
        if _named(error, conversation_id):
            raise
        raise record_error(conversation_id, record, error) from error
    except _DECODING as error:
        raise record_error(conversation_id, record, error) from error


def _named(error: SerializationError, conversation_id: str) -> bool:
    return str(error).startswith(f"conversation {conversation_id!r}, ")


class UndecodableRecord(SerializationError):
    """A message record of ``conversation_id`` that did not decode, with its bytes, so the
    store that read it can say which message it is (a page read holds only the records)."""

    def __init__(self, conversation_id: str, data: bytes, error: SerializationError) -> None:
        super().__init__(f"conversation {conversation_id!r}, a message record: {error}")
        self.conversation_id = conversation_id
        self.data = data
        self.problem = str(error)

    def named(self, message_id: str | None) -> SerializationError:
        """The error naming the message (its id, when the store's index still has it)."""
        record = "a message record" if message_id is None else f"message {message_id!r}"
        return SerializationError(
            f"conversation {self.conversation_id!r}, {record}: {self.problem}"
        )


def decode_lease(
    conversation_id: str,
    turn_id: object,
    status: object,
    owner: object,
    expires_at: object,
    cancel_requested: bool,
    previous_turn_id: object = None,
) -> ConversationLease:
    """A lease from its stored fields, each checked: a running lease has a finite numeric
    expiry, a suspended one none; anything else names the conversation's lease."""
    with naming(conversation_id, "lease"):
        if not isinstance(turn_id, str) or not turn_id:
            raise SerializationError(f"turn_id {turn_id!r} is not a turn id")
        if not isinstance(status, str) or status not in _LEASE_STATUSES:
            raise SerializationError(f"status {status!r} is not running or suspended")
        if owner is not None and not isinstance(owner, str):
            raise SerializationError(f"owner {owner!r} is not a str")
        if previous_turn_id is not None and not isinstance(previous_turn_id, str):
            raise SerializationError(f"previous turn {previous_turn_id!r} is not a str")
        expiry = _expiry(expires_at)
        if (expiry is None) != (status == TurnStatus.SUSPENDED.value):
            raise SerializationError(f"a {status} lease with expires_at {expires_at!r}")
        return ConversationLease(
            conversation_id, turn_id, TurnStatus(status), owner, expiry, cancel_requested,
            previous_turn_id,
        )  # fmt: skip


_LEASE_STATUSES = frozenset((TurnStatus.RUNNING.value, TurnStatus.SUSPENDED.value))


def _expiry(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str, bytes)):
        raise SerializationError(f"expires_at {value!r} is not a number")
    try:
        expiry = float(value)
    except ValueError:
        raise SerializationError(f"expires_at {value!r} is not a number") from None
    if not math.isfinite(expiry):
        raise SerializationError(f"expires_at {value!r} is not a finite number")
    return expiry


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """One record as stored: ``kind`` is ``message``, ``turn`` or ``lease``; ``record_id`` the
    message or turn id (None when unknown); ``key`` what identifies the row or entry;
    ``version`` the stored version field as stored (turns)."""

    kind: str
    record_id: str | None
    data: bytes
    key: Any = None
    version: Any = None


@dataclass(frozen=True, slots=True)
class QuarantinedRecord:
    """A record moved out of every read, kept for inspection."""

    conversation_id: str
    kind: str
    record_id: str | None
    data: bytes
    problem: str
