"""Identifier and version rules shared by the messages, the compression states and every store.

Identifiers (message, turn, tool call and conversation ids, tool names) are keys in the stores
and ids in model APIs, so they must be valid Unicode text without NUL: PostgreSQL text columns
cannot hold NUL, and refusing it everywhere keeps every store's behaviour the same. They are at
most `MAX_ID_BYTES` bytes in UTF-8: a longer key is refused as an argument before any I/O, where a
database would otherwise refuse it (PostgreSQL's index rows) or take it (Redis, SQLite), so every
store behaves the same. Versions are kept in signed 64-bit columns, so they stay below 2**63 on
every store. A participant name (a message's ``name``) is an identifier that model APIs also
accept as a name.
"""

from __future__ import annotations

import math
import re
from typing import TypeGuard

from agentctx_fast.errors import InvalidArgumentError, InvalidMessageTypeError

MAX_ID_BYTES = 512
"""The longest identifier, in UTF-8 bytes (SPEC §20: limits are arguments, not outages)."""
MAX_VERSION = 2**63 - 1
"""The largest version a message, compression state or turn snapshot may carry (SQL BIGINT)."""


def require_str(value: object, what: str) -> None:
    """`InvalidMessageTypeError` unless ``value`` is a str."""
    if not isinstance(value, str):
        raise InvalidMessageTypeError(f"{what} must be a str, got {type(value).__name__}")


def check_identifier(value: object, what: str) -> None:
    """`InvalidArgumentError` unless ``value`` is a str of valid Unicode without NUL, at most
    `MAX_ID_BYTES` bytes in UTF-8."""
    require_str(value, what)
    assert isinstance(value, str)
    if "\x00" in value:
        raise InvalidArgumentError(f"{what} must not contain NUL (\\x00), got {value!r}")
    if value.isascii():
        size = len(value)
    else:
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError:
            raise InvalidArgumentError(
                f"{what} must be valid Unicode text, got {value!r} with a lone surrogate"
            ) from None
    if size > MAX_ID_BYTES:
        raise InvalidArgumentError(
            f"{what} must be at most {MAX_ID_BYTES} bytes in UTF-8, got {size} bytes "
            f"({value[:32]!r}…)"
        )


PARTICIPANT_NAME = re.compile(r"[^\s<|\\/>]+")
"""What the OpenAI API accepts as a participant name: no whitespace and none of ``<|\\/>``."""


def check_participant_name(name: object, message_id: str) -> None:
    """`InvalidArgumentError` unless ``name`` (message ``message_id``'s) is None or an
    identifier that is a `PARTICIPANT_NAME`."""
    if name is None:
        return
    check_identifier(name, f"message {message_id!r} name")
    assert isinstance(name, str)
    if not PARTICIPANT_NAME.fullmatch(name):
        raise InvalidArgumentError(
            f"message {message_id!r}: name must be non-empty, without whitespace or any of "
            f"<|\\/>, got {name!r}"
        )


def is_unicode_text(value: str) -> bool:
    """False when ``value`` holds a lone surrogate (it cannot be encoded, stored or sent)."""
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_conversation_id(conversation_id: object) -> str:
    """A conversation id: a non-empty identifier (see `check_identifier`)."""
    if not isinstance(conversation_id, str) or not conversation_id:
        raise InvalidArgumentError(
            f"conversation_id must be a non-empty str, got {conversation_id!r}"
        )
    check_identifier(conversation_id, "conversation_id")
    return conversation_id


def check_version(value: object, what: str) -> None:
    """`InvalidArgumentError` unless ``value`` is an int from 0 to `MAX_VERSION`."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_VERSION:
        raise InvalidArgumentError(f"{what} must be an int from 0 to 2**63 - 1, got {value!r}")


def check_expected_version(expected_version: object) -> int:
    """The ``expected_version`` of a compare-and-set write: the stored version becomes
    ``expected_version + 1``, so it is an int from 0 to ``MAX_VERSION - 1``."""
    if (
        isinstance(expected_version, bool)
        or not isinstance(expected_version, int)
        or not 0 <= expected_version < MAX_VERSION
    ):
        raise InvalidArgumentError(
            f"expected_version must be an int from 0 to 2**63 - 2 (the stored version becomes "
            f"expected_version + 1), got {expected_version!r}"
        )
    return expected_version


def is_positive_seconds(value: object) -> TypeGuard[int | float]:
    """Whether ``value`` is a duration a store accepts: a finite int or float > 0 (not a bool)."""
    return (
        not isinstance(value, bool)
        and isinstance(value, (int, float))
        and math.isfinite(value)
        and value > 0
    )
