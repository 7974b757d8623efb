"""The exception hierarchy: every error the library raises derives from `AgentCtxError`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentctx_fast.core.protocol import ProtocolViolation


class AgentCtxError(Exception):
    """Base class of every error raised by agentctx_fast."""


class InvalidArgumentError(AgentCtxError, ValueError):
    """An option or argument has a value outside its domain (a negative limit, an unsafe prefix)."""


class InvalidMessageTypeError(AgentCtxError, TypeError):
    """A value that should be a message (or another library type) is not."""


class ToolProtocolError(AgentCtxError):
    """A message list breaks the tool-call protocol; `violations` lists every break."""

    def __init__(self, violations: Sequence[ProtocolViolation]) -> None:
        self.violations = list(violations)
        first = self.violations[0] if self.violations else None
        detail = (
            f"; first: {first.kind} at message {first.message_id!r} "
            f"(tool_call_id {first.tool_call_id!r})"
            if first
            else ""
        )
        super().__init__(f"{len(self.violations)} tool protocol violation(s){detail}")


class CompressorOutputError(AgentCtxError):
    """A context compressor returned messages that cannot be sent to a model."""


class CompressionError(AgentCtxError):
    """A context compressor (or its summary model) failed; the stored history is untouched."""


class CoveredMessageNotFoundError(AgentCtxError):
    """The message a compression state says it covered is not in the history it was given."""


class CompressionStateConflictError(AgentCtxError):
    """A compare-and-set save of a compression state lost against another writer."""


class VersionConflictError(AgentCtxError):
    """A compare-and-set update of a stored message found another version."""


class MessageNotFoundError(AgentCtxError):
    """No stored message has the given id."""


class AgentConversationBusyError(AgentCtxError):
    """The conversation has an open (running or suspended) turn."""

    def __init__(self, message: str, turn_id: str) -> None:
        super().__init__(message)
        self.turn_id = turn_id


class SerializationError(AgentCtxError):
    """Stored data could not be serialised or deserialised."""


class TurnNotFoundError(AgentCtxError):
    """No turn with the given id exists."""


class TurnStateError(AgentCtxError):
    """The turn is not in a state that allows the operation."""


class LeaseLostError(TurnStateError):
    """A write of a turn was refused because its runner no longer holds the conversation's
    lease (it was paused or slow past the lease, and another runner took the conversation):
    the turn is left to the new holder or to ``resume``."""


class ContentTooLargeError(AgentCtxError, ValueError):
    """Inline content over `MAX_INLINE_BYTES`; store it elsewhere and pass a reference."""


class DuplicateMessageError(AgentCtxError, ValueError):
    """`add_message` was given a message whose id the chat memory already holds."""


class StoreError(AgentCtxError):
    """A store operation failed; nothing was half-written."""


class StoreUnavailableError(StoreError):
    """Retry later: the store's server could not be reached, dropped the connection, did not
    answer in time, is failing over, or a cluster slot is moving. A permanent database error
    (a constraint, a value too long, a missing table) is a plain `StoreError`."""


class StoreBusyError(StoreUnavailableError):
    """Retry later, not at once: the call waited its whole bound for a lock or a connection
    (a SQLite database locked by another writer past its busy timeout, a PostgreSQL lock or
    statement timeout, a pool with no free connection in time), so an immediate retry would
    most likely wait as long again. The runner writes nothing more in that call."""


class SchemaNotInitializedError(StoreError):
    """The store's tables are missing: create them with ``store.schema.initialize()`` (or
    the DDL ``agentctx schema`` prints)."""


class ModelCallError(AgentCtxError):
    """A model API call failed; ``status_code`` is the HTTP status when there is one."""

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class MissingDependencyError(AgentCtxError, ImportError):
    """An optional extra is not installed; the message names the extra to install."""


class BackendUnavailableError(AgentCtxError):
    """The requested feature needs a backend (the Rust extension, or a package) that is missing."""
