"""The runner's reads: history page by page, only as far back as a window can reach, and turn
records.

A window attaches at most ``max_attached_turns`` whole history turns, and never more history
messages than ``max_attached_messages`` (after compaction, which leaves at least two messages
of a turn). So the runner reads pages from the newest message backwards until the whole turns
it holds already exceed one of those limits, or the history starts; the window it then builds
is the one the whole history would give.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentctx_fast.core._backend import core
from agentctx_fast.core.messages import AiMessage, Message, ToolMessage
from agentctx_fast.memory import AsyncChatMemory

_FIRST_PAGE_MIN = 64
# Past what a conversation's reach was when this runner last read or wrote it: the message
# before the reach (proof that its first turn is whole) and a few more, for a turn another
# process added or an older turn that compaction now lets in. A read that falls short reads on.
_REACH_MARGIN = 4


async def read_history(
    memory: AsyncChatMemory,
    *,
    max_attached_turns: int,
    max_attached_messages: int,
    compact: bool,
    keep_recent_turns: int,
    must_include: str | None = None,
    current_stored: bool = True,
    first_page: int | None = None,
) -> tuple[list[Message], bool]:
    """The tail of ``memory`` a window over the whole conversation depends on, oldest first,
    and whether it is the whole history (its last page was short: no read past it needed).

    ``must_include`` is a message id the result must reach back to (a resumed turn's first
    message). ``current_stored=False`` says the current turn is not written yet (a new turn
    reads before it stores its user message), so the newest stored turn is a history turn;
    it is also the reach of a ``current_turn="none"`` window (a finished conversation).
    ``current_turn_tool_results_kept`` changes no reach (it only shortens the current turn).
    ``first_page`` sizes the first read (the runner passes what the conversation's last read
    needed, plus a margin); without it the first read covers the agent's message limit.
    The result starts at a turn boundary unless it is the whole history.
    """
    page = first_page or max(_FIRST_PAGE_MIN, max_attached_messages + 16)
    collected: list[Message] = []
    while True:
        chunk = await memory.get_messages(page, offset=len(collected))
        collected = chunk + collected
        if len(chunk) < page:
            return collected, True  # the start of the history
        start = _window_reach(
            collected,
            max_attached_turns,
            max_attached_messages,
            compact,
            keep_recent_turns,
            current_stored,
        )
        if must_include is not None and start is not None:
            found = next((i for i, m in enumerate(collected) if m.message_id == must_include), None)
            start = None if found is None else min(start, found)
        if start is not None:
            return collected[start:], False  # it starts at a turn: a user message
        page = len(collected)  # as much again: a read just short (a turn another process
        # added) costs one more page of its size, and a long history doubles what is held


def _window_reach(
    messages: Sequence[Message],
    max_turns: int,
    max_messages: int,
    compact: bool,
    keep_recent: int,
    current_stored: bool,
) -> int | None:
    """Where the window's reach starts in ``messages``, or None if it may reach further back.

    The first segment may be the tail of an older turn, so only later segments count as whole.
    When ``current_stored``, the last segment is the current turn; otherwise every later
    segment is a history turn.
    """
    segments: tuple[list[int], list[int], list[bool]] = core.segment(messages)
    starts, ends = [*segments[0], len(messages)], segments[1]  # `segment_turns`, no arrays
    count = len(ends)
    if count < 2:
        return None
    newest = count - 2 if current_stored else count - 1  # the newest history turn
    if newest >= max_turns:  # segments 1..newest are whole history turns
        return starts[newest + 1 - max_turns]
    total = 0
    for age, index in enumerate(range(newest, 0, -1)):
        total += _least_size(messages[starts[index] : ends[index]], compact and age >= keep_recent)
        if total > max_messages:
            return starts[index]
    return None


def _least_size(turn: Sequence[Message], compactable: bool) -> int:
    """A lower bound of the messages ``turn`` takes in a window.

    Repairs can leave tool results out (orphans) and a turn with a repeated open call id out
    whole, so only user and AI messages count, and a turn that repeats a call id counts 0.
    """
    call_ids = [c.id for m in turn if isinstance(m, AiMessage) for c in m.tool_calls]
    if len(set(call_ids)) < len(call_ids):
        return 0
    size = sum(1 for m in turn if m.model_visible and not isinstance(m, ToolMessage))
    return min(size, 2) if compactable and call_ids else size
