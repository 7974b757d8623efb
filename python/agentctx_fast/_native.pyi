"""The Rust core (`rust/py/`): the same functions, results and errors as
`agentctx_fast.core._reference.api`. Checked against the built extension by ``mypy.stubtest``."""

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, final

from agentctx_fast.core.messages import Message
from agentctx_fast.stores._schema import Record

__all__ = [
    "CoreOptions",
    "MessageCore",
    "__version__",
    "bpe_count_text",
    "bpe_count_texts",
    "count_text",
    "count_texts",
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

@final
class MessageCore:
    """What the core read of a message, kept in its ``_core`` slot (opaque, made only by the
    extension)."""

    def __reduce__(self) -> tuple[type[dict[Any, Any]], tuple[()]]: ...
    def __copy__(self) -> MessageCore: ...
    def __deepcopy__(self, memo: Any, /) -> MessageCore: ...

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
def count_texts(texts: Iterable[str], encoding: str | None = None) -> list[int]: ...
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
def bpe_count_texts(encoding: str, texts: Iterable[str]) -> list[int]: ...
