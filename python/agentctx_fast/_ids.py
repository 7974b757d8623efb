"""Identifier rules shared by the messages, the compression states and every store.

Identifiers (message, turn, tool call and conversation ids, tool names) are keys in the stores
and ids in model APIs, so they must be valid Unicode text without NUL: PostgreSQL text columns
cannot hold NUL, and refusing it everywhere keeps every store's behaviour the same.
"""

from __future__ import annotations

from agentctx_fast.errors import InvalidArgumentError, InvalidMessageTypeError


def require_str(value: object, what: str) -> None:
    """`InvalidMessageTypeError` unless ``value`` is a str."""
    if not isinstance(value, str):
        raise InvalidMessageTypeError(f"{what} must be a str, got {type(value).__name__}")


def check_identifier(value: object, what: str) -> None:
    """`InvalidArgumentError` unless ``value`` is a str of valid Unicode without NUL."""
    require_str(value, what)
    assert isinstance(value, str)
    if "\x00" in value:
        raise InvalidArgumentError(f"{what} must not contain NUL (\\x00), got {value!r}")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidArgumentError(
                f"{what} must be valid Unicode text, got {value!r} with a lone surrogate"
            ) from None


def check_conversation_id(conversation_id: object) -> str:
    """A conversation id: a non-empty identifier (see `check_identifier`)."""
    if not isinstance(conversation_id, str) or not conversation_id:
        raise InvalidArgumentError(
            f"conversation_id must be a non-empty str, got {conversation_id!r}"
        )
    check_identifier(conversation_id, "conversation_id")
    return conversation_id
