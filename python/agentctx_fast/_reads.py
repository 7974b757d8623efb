"""History read page by page, only as far back as a window can reach: the runner's reads and
`ChatMemory.window`'s (`agentctx_fast._memory_window`).

The reader reads pages from the newest message backwards until the core proves, from the
messages it holds, where the window's reach starts (`window_reach`: the turn at which the window
stops reading, given its limits), or the history starts; the window it then builds from there is
the one the whole history would give.
"""

from __future__ import annotations

from agentctx_fast.core.messages import Message
from agentctx_fast.core.types import WindowOptions
from agentctx_fast.core.window import window_reach
from agentctx_fast.memory import AsyncChatMemory

_FIRST_PAGE_MIN = 64
# Past what a conversation's reach was when this runner last read or wrote it: the message
# before the reach (proof that its first turn is whole) and a few more, for a turn another
# process added or an older turn that compaction now lets in. A read that falls short reads on.
REACH_MARGIN = 4
# The window that attaches the newest turn only: its reach is that turn's start.
NEWEST_TURN = WindowOptions(
    max_attached_turns=1,
    max_attached_messages=0,
    compact_completed_tool_turns=False,
    compression_keep_recent_turns=0,
)


async def read_history(
    memory: AsyncChatMemory,
    options: WindowOptions,
    *,
    must_include: str | None = None,
    current_stored: bool = True,
    first_page: int | None = None,
) -> tuple[list[Message], bool]:
    """The tail of ``memory`` a window of ``options`` over the whole conversation depends on,
    oldest first, and whether it is the whole history (its last page was short: no read past
    it needed).

    ``must_include`` is a message id the result must reach back to (a resumed turn's first
    message). ``current_stored=False`` says the current turn is not written yet (a new turn
    reads before it stores its user message), so the newest stored turn is a history turn;
    it is also the reach of a ``current_turn="none"`` window (a finished conversation): it
    stands for ``options``' current turn.
    ``current_turn_tool_results_kept`` changes no reach (it only shortens the current turn).
    ``first_page`` sizes the first read (the runner passes what the conversation's last read
    needed, plus a margin); without it the first read covers the agent's message limit.
    The result starts at a turn boundary unless it is the whole history.
    """
    page = first_page or max(_FIRST_PAGE_MIN, options.max_attached_messages + 16)
    collected: list[Message] = []
    while True:
        chunk = await memory.get_messages(page, offset=len(collected))
        collected = chunk + collected
        if len(chunk) < page:
            return collected, True  # the start of the history
        start = window_reach(collected, options, has_current_turn=current_stored)
        if must_include is not None and start is not None:
            found = next((i for i, m in enumerate(collected) if m.message_id == must_include), None)
            start = None if found is None else min(start, found)
        if start is not None:
            return collected[start:], False  # it starts at a turn: a user message
        page = len(collected)  # as much again: a read just short (a turn another process
        # added) costs one more page of its size, and a long history doubles what is held
