"""The stores' data lifecycle (SPEC §21): `Purged`, what `purge` reports (exported as
``agentctx_fast.stores.Purged``), and what every store's lifecycle calls share: argument checks
and the page of `list_conversations`.

Conversation ids are listed in code-point order (UTF-8 byte order: PostgreSQL compares them
under the ``"C"`` collation, SQLite's ``BINARY`` is that already), so ``after`` means the same
on every store.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from agentctx_fast._ids import check_conversation_id, is_positive_seconds
from agentctx_fast.errors import InvalidArgumentError

__all__ = ["Purged"]  # the checks below are the stores' own

MAX_PAGE = 10_000
MAX_BATCH = 1_000
"""The most conversations `purge` takes in one transaction: each is seven parameters of one
statement (its lease row, held), well within PostgreSQL's 65,535 and SQLite's 32,766."""


@dataclass(frozen=True, slots=True)
class Purged:
    """What `SqlAgentStore.purge` removed: whole conversations, and finished turn records
    pruned beyond ``keep_turn_records`` in the conversations it kept."""

    conversations: int
    turn_records: int


def check_delete(conversation_id: object, force: object) -> tuple[str, bool]:
    """The arguments of `delete_conversation`, checked before any I/O: ``force`` overrides
    the busy check, so only True forces (a truthy string is refused, not read as yes)."""
    if not isinstance(force, bool):
        raise InvalidArgumentError(f"force must be a bool, got {force!r}")
    return check_conversation_id(conversation_id), force


def check_listing(prefix: object, limit: object, after: object) -> tuple[str, int, str | None]:
    """The arguments of `list_conversations`, checked before any I/O."""
    if prefix is None:
        prefix = ""
    if not isinstance(prefix, str):
        raise InvalidArgumentError(f"prefix must be a str or None, got {prefix!r}")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise InvalidArgumentError(f"limit must be an int from 1 to {MAX_PAGE}, got {limit!r}")
    return prefix, limit, None if after is None else check_conversation_id(after)


def page_of(ids: Iterable[str], prefix: str, limit: int, after: str | None) -> list[str]:
    """The first ``limit`` of ``ids`` starting with ``prefix`` and after ``after``, in order."""
    chosen = {i for i in ids if i.startswith(prefix) and (after is None or i > after)}
    return sorted(chosen)[:limit]


def check_ttl(ttl_seconds: object) -> int | None:
    """``ttl_seconds`` (None: no expiry) as whole milliseconds for ``PEXPIRE``."""
    if ttl_seconds is None:
        return None
    if is_positive_seconds(ttl_seconds):
        return max(1, round(ttl_seconds * 1000))
    raise InvalidArgumentError(f"ttl_seconds must be a number > 0 or None, got {ttl_seconds!r}")


def check_purge(older_than: object, keep_turn_records: object, batch_size: object) -> float:
    """The arguments of `purge`; ``older_than`` as epoch seconds."""
    if isinstance(older_than, datetime):
        if older_than.tzinfo is None:
            raise InvalidArgumentError("older_than must be an aware datetime (with a tzinfo)")
        cutoff = older_than.timestamp()
    elif isinstance(older_than, (int, float)) and not isinstance(older_than, bool):
        cutoff = float(older_than)
    else:
        raise InvalidArgumentError(
            f"older_than must be epoch seconds or an aware datetime, got {older_than!r}"
        )
    if not math.isfinite(cutoff):
        raise InvalidArgumentError(f"older_than must be finite, got {older_than!r}")
    for name, value, least in (
        ("keep_turn_records", keep_turn_records, 0),
        ("batch_size", batch_size, 1),
    ):
        if value is None and name == "keep_turn_records":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise InvalidArgumentError(f"{name} must be an int >= {least}, got {value!r}")
    if isinstance(batch_size, int) and batch_size > MAX_BATCH:
        raise InvalidArgumentError(
            f"batch_size must be an int from 1 to {MAX_BATCH}, got {batch_size!r}"
        )
    return cutoff
