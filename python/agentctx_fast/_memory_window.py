"""`ChatMemory.window` and its async twin, written once: the window of a conversation built
from the tail of its history alone.

The tail is the runner's read (`read_history`: pages from the newest message back until the
core proves where the window's reach starts, or the history starts), asked for one turn more
than ``max_attached_turns``, so that a window cut by that limit sees a turn past it and says so
(``cut_by``) as the whole history's window does. Without a ``system`` argument a window takes
the history's leading system message (the first `SystemMessage` before the first
`UserMessage`): when the tail does not reach the start (`read_history` says whether it did), the
head is read for it in one query (`get_first_messages`), read again longer while it holds no
user message. The window is then `build_window` over that tail, the one the whole history
gives (its ``dropped_turns`` counts only the turns of the tail read).
"""

from __future__ import annotations

from dataclasses import replace

from agentctx_fast._reads import read_history
from agentctx_fast.core.messages import Message, SystemMessage, UserMessage
from agentctx_fast.core.types import ContextWindow, WindowOptions
from agentctx_fast.core.window import build_window
from agentctx_fast.errors import InvalidArgumentError
from agentctx_fast.memory import AsyncChatMemory

# The first read of the head: a history starts with a user message, or a system message and
# one; the read is made four times longer while it holds no user message.
_HEAD_PAGE = 4


async def memory_window(
    memory: AsyncChatMemory,
    options: WindowOptions | None,
    system: SystemMessage | str | None,
) -> ContextWindow:
    """The window of ``memory``'s whole history, read from its tail (see the module)."""
    if options is None:
        options = WindowOptions()
    elif type(options) is not WindowOptions:
        raise InvalidArgumentError(
            f"options must be a WindowOptions or None, got {type(options).__name__}"
        )
    history, whole = await read_history(
        memory,
        replace(options, max_attached_turns=options.max_attached_turns + 1),
        current_stored=options.current_turn == "last",
    )
    # A tail short of the start opens with a user message (turns start with one), so it has
    # no leading system message of its own to pass for the history's.
    if system is None and not whole:
        system = await _leading_system(memory)
    return build_window(history, options, system=system)


async def _leading_system(memory: AsyncChatMemory) -> SystemMessage | None:
    """The history's leading system message, read from its oldest message: one read of its
    first messages, read again four times longer while no user message is among them."""
    size = _HEAD_PAGE
    while True:
        page = await memory.get_first_messages(size)
        found = _leading_system_of(page)
        if found is not None or len(page) < size or any(isinstance(m, UserMessage) for m in page):
            return found
        size *= 4


def _leading_system_of(messages: list[Message]) -> SystemMessage | None:
    """The first `SystemMessage` of ``messages`` before their first `UserMessage`."""
    for message in messages:
        if isinstance(message, UserMessage):
            return None
        if isinstance(message, SystemMessage):
            return message
    return None
