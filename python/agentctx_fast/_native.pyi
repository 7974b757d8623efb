"""The Rust core (`rust/py/`): the same functions, results and errors as
`agentctx_fast._reference.api`. Checked against the built extension by ``mypy.stubtest``."""

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, final

from agentctx_fast._core_types import (
    AgentContextCompressor,
    ContextWindow,
    TurnStatus,
    WindowLimits,
)
from agentctx_fast.messages import Message, SystemMessage
from agentctx_fast.tokens import TokenEstimator

__all__ = [
    "MessageCore",
    "__version__",
    "bpe_count_text",
    "bpe_count_texts",
    "build_window",
    "count_text",
    "count_texts",
    "count_turns",
    "decode_message",
    "message_tokens",
    "register_build_window",
    "segment",
    "select",
    "validate",
    "window",
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

def window(
    messages: Sequence[object],
    system: Message | None,
    limits: WindowLimits,
    turn_statuses: Mapping[str, object] | None,
) -> ContextWindow: ...
def build_window(
    messages: Sequence[Message],
    *,
    system: SystemMessage | str | None = None,
    max_attached_turns: int = 10,
    max_attached_messages: int = 100,
    compact_completed_tool_turns: bool = False,
    compression_keep_recent_turns: int = 2,
    context_compressor: AgentContextCompressor | None = None,
    max_attached_tokens: int | None = None,
    token_estimator: TokenEstimator | None = None,
    turn_statuses: Mapping[str, TurnStatus] | None = None,
    current_turn: Literal["last", "none"] = "last",
    current_turn_tool_results_kept: int | None = None,
) -> ContextWindow:
    """`agentctx_fast.window.build_window` on the Rust backend: the plain call built here,
    every other call handed to the registered Python implementation."""

def register_build_window(
    fallback: Callable[..., ContextWindow], system_message: Callable[[str], SystemMessage], /
) -> bool: ...
def select(
    messages: Sequence[object],
    system: Message | None,
    use_leading_system: bool,
    limits: WindowLimits,
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
    messages: Sequence[object],
    max_attached_turns: int,
    max_attached_messages: int,
    compact_completed_tool_turns: bool,
    compression_keep_recent_turns: int,
    has_current_turn: bool,
) -> int | None: ...
def validate(messages: Sequence[object]) -> list[tuple[str, str, str]]: ...
def count_text(text: str, encoding: str | None = None) -> int: ...
def count_texts(texts: Iterable[str], encoding: str | None = None) -> list[int]: ...
def message_tokens(messages: Sequence[object]) -> list[int]: ...
def decode_message(data: bytes, /) -> Message | None:
    """The message a stored record holds when it is well formed, else None (the caller decodes
    it on the checked path, which names the error)."""

def bpe_count_text(encoding: str, text: str) -> int: ...
def bpe_count_texts(encoding: str, texts: Iterable[str]) -> list[int]: ...
