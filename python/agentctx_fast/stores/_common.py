"""Argument checks shared by the stores."""

from __future__ import annotations

import re

from agentctx_fast.errors import InvalidArgumentError

__all__ = ["check_key_prefix", "check_table_prefix"]

_TABLE_PREFIX = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Braces too: Redis Cluster hashes a key by its first {…}, which must be the conversation's tag.
_KEY_PREFIX_FORBIDDEN = re.compile(r"[\s*?\[\]\\{}]|[\x00-\x1f\x7f]")
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
    """A Redis key prefix: 1 to 128 characters, no whitespace, wildcards, braces or control
    characters."""
    if (
        not isinstance(prefix, str)
        or not 1 <= len(prefix) <= 128
        or _KEY_PREFIX_FORBIDDEN.search(prefix)
    ):
        raise InvalidArgumentError(
            f"key_prefix must be 1-128 characters without whitespace, wildcards (* ? [ ]), "
            f"braces (the conversation's cluster hash tag), backslashes or control characters, "
            f"got {prefix!r}"
        )
    return prefix
