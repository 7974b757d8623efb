"""Argument checks shared by the stores."""

from __future__ import annotations

import re

from agentctx_fast.errors import InvalidArgumentError

_TABLE_PREFIX = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_KEY_PREFIX_FORBIDDEN = re.compile(r"[\s*?\[\]\\]|[\x00-\x1f\x7f]")
MAX_TABLE_PREFIX = 40  # leaves room for the table and index names under PostgreSQL's 63 bytes


def check_table_prefix(prefix: object) -> str:
    """A table prefix: ``[A-Za-z_][A-Za-z0-9_]*``, at most 40 characters."""
    if (
        not isinstance(prefix, str)
        or not _TABLE_PREFIX.fullmatch(prefix)
        or len(prefix) > MAX_TABLE_PREFIX
    ):
        raise InvalidArgumentError(
            f"table_prefix must match [A-Za-z_][A-Za-z0-9_]* (at most {MAX_TABLE_PREFIX} "
            f"characters), got {prefix!r}"
        )
    return prefix


def check_key_prefix(prefix: object) -> str:
    """A Redis key prefix: 1 to 128 characters, no whitespace, wildcards or control characters."""
    if (
        not isinstance(prefix, str)
        or not 1 <= len(prefix) <= 128
        or _KEY_PREFIX_FORBIDDEN.search(prefix)
    ):
        raise InvalidArgumentError(
            f"key_prefix must be 1-128 characters without whitespace, wildcards (* ? [ ]), "
            f"backslashes or control characters, got {prefix!r}"
        )
    return prefix


def check_conversation_id(conversation_id: object) -> str:
    """A conversation id: a non-empty str of valid Unicode."""
    if not isinstance(conversation_id, str) or not conversation_id:
        raise InvalidArgumentError(
            f"conversation_id must be a non-empty str, got {conversation_id!r}"
        )
    try:
        conversation_id.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgumentError(
            f"conversation_id {conversation_id!r} is not valid Unicode text"
        ) from None
    return conversation_id
