"""The Rust core (`rust/py/`): the same functions, results and errors as
`agentctx_fast.core._reference.api`. Checked against the built extension by ``mypy.stubtest``."""

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, final

from typing_extensions import disjoint_base

from agentctx_fast.core.messages import Message
from agentctx_fast.stores._schema import Record

__all__ = [
    "CoreOptions",
    "MessageBase",
    "__version__",
    "bpe_count_text",
    "capture_library",
    "count_text",
    "count_turns",
    "decode_message",
    "message_tokens",
    "segment",
    "select",
    "set_record_schema",
    "validate",
    "window_reach",
]

__version__: str

@disjoint_base
class MessageBase:
    """The native base of every message class: it keeps what the core read of the message
    (out of reach of Python code)."""

    def __new__(cls, *_args: Any, **_kwargs: Any) -> MessageBase: ...

def capture_library(
    message: type,
    kinds: Sequence[tuple[type, int]],
    text_part: type,
    tool_call: type,
    invalid_argument: type,
    invalid_message_type: type,
    completed: object,
) -> None:
    """Keeps the package's classes the binding relies on (the backend switch hands them over:
    ``capture_library(*core._reference.api.LIBRARY)``); the first ones handed over stay."""

@final
class CoreOptions:
    """The window limits of a `WindowOptions` in the core's form (made by its
    ``__post_init__``), immutable."""

    def __new__(
        cls,
        max_attached_turns: int,
        max_attached_messages: int,
        compact_completed_tool_turns: bool,
        compression_keep_recent_turns: int,
        max_attached_tokens: int | None,
        current_turn: str,
    ) -> CoreOptions: ...
    def __reduce__(
        self,
    ) -> tuple[type[CoreOptions], tuple[int, int, bool, int, int | None, str]]: ...

def select(
    messages: Sequence[object],
    system: Message | None,
    use_leading_system: bool,
    options: CoreOptions,
    count_tokens: Callable[[Sequence[Message]], int] | None,
    turn_statuses: Mapping[str, object] | None,
) -> tuple[
    list[Message],
    bool,
    int,
    int,
    int,
    int,
    int,
    str | None,
    list[tuple[str, str, str]],
    int,
    int,
]: ...
def segment(messages: Sequence[object]) -> tuple[list[int], list[int], list[bool]]: ...
def count_turns(messages: Sequence[object], end: int) -> int: ...
def window_reach(
    messages: Sequence[object], options: CoreOptions, has_current_turn: bool
) -> int | None: ...
def validate(messages: Sequence[object]) -> list[tuple[str, str, str]]: ...
def count_text(text: str, encoding: str | None = None) -> int: ...
def message_tokens(messages: Sequence[object]) -> list[int]: ...
def decode_message(data: bytes, /) -> Message | None:
    """The message a stored record holds when it is well formed, else None (the caller decodes
    it on the checked path, which names the error). None for every record until
    `set_record_schema` has run."""

def set_record_schema(
    messages: Iterable[Record],
    parts: Iterable[Record],
    call: Record,
    usage: Record,
    max_inline_bytes: int,
    system_roles: Sequence[str],
    image_details: Sequence[str],
) -> None:
    """The record format `decode_message` decodes by: the `stores._schema` records of messages,
    content parts, tool calls and usage, and the values the message classes allow."""

def bpe_count_text(encoding: str, text: str) -> int: ...
