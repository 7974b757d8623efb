"""The runner's reads: history page by page, only as far back as a window can reach, and turn
records.

The runner reads pages from the newest message backwards until the core proves, from the
messages it holds, where the window's reach starts (`window_reach`: the turn at which the window
stops reading, given its limits), or the history starts; the window it then builds from there is
the one the whole history would give.
"""

from __future__ import annotations

from agentctx_fast._backend import core
from agentctx_fast.agent import Agent
from agentctx_fast.errors import InvalidArgumentError, TurnNotFoundError, TurnStateError
from agentctx_fast.memory import AsyncChatMemory
from agentctx_fast.messages import Message
from agentctx_fast.runner._state import EngineState, check_turn_id
from agentctx_fast.stores.turns import AgentTurnSnapshot
from agentctx_fast.turns import TurnStatus

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
        start: int | None = core.window_reach(
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


class HistoryReads(EngineState):
    """Reads a conversation's memory and turn records for the loop (a part of `TurnEngine`)."""

    def _memory(self, conversation_id: str) -> AsyncChatMemory:
        if self._provider is None:
            raise InvalidArgumentError(
                "this runner has no chat memory: give it a store or a chat_memory_provider, "
                "or use run_history"
            )
        return self._provider(conversation_id)

    async def _history(
        self,
        agent: Agent,
        memory: AsyncChatMemory,
        conversation_id: str,
        must_include: str | None = None,
        *,
        current_stored: bool = True,
    ) -> list[Message]:
        """The history a window of ``agent`` reaches, read in about one page: the first read
        asks for what this conversation's reach was after this runner last read or wrote it,
        plus a small margin."""
        known = self._reach.get(conversation_id)
        history, _ = await read_history(
            memory,
            max_attached_turns=agent.max_attached_turns,
            max_attached_messages=agent.max_attached_messages,
            compact=agent.compact_completed_tool_turns,
            keep_recent_turns=agent.compression_keep_recent_turns,
            must_include=must_include,
            current_stored=current_stored,
            first_page=None if known is None else known + _REACH_MARGIN,
        )
        self._remember_reach(conversation_id, len(history))
        return history

    async def _split_turn(
        self,
        agent: Agent | None,
        memory: AsyncChatMemory,
        snapshot: AgentTurnSnapshot,
        *,
        missing_ok: bool = False,
    ) -> tuple[list[Message], list[Message]]:
        """The history before a stored turn, and the turn's own messages (its tail). A turn
        whose first message is not stored (its process stopped between recording the turn
        and storing the user message) has none when ``missing_ok``."""
        first = snapshot.message_ids[0] if snapshot.message_ids else None
        collected = (
            await self._history(agent, memory, snapshot.conversation_id, first)
            if agent is not None
            else (await read_history(
                memory, max_attached_turns=1, max_attached_messages=0, compact=False,
                keep_recent_turns=0, must_include=first,
            ))[0]
        )  # fmt: skip
        start = next((i for i, msg in enumerate(collected) if msg.message_id == first), None)
        if start is None and missing_ok and all(m.turn_id != snapshot.turn_id for m in collected):
            return collected, []
        if start is None:
            raise TurnStateError(
                f"turn {snapshot.turn_id!r}: its first message {first!r} is not in chat memory"
            )
        return collected[:start], collected[start:]

    async def _load(self, conversation_id: str, turn_id: str) -> AgentTurnSnapshot:
        check_turn_id(turn_id)
        snapshot = await self.turn_store.load_turn(conversation_id, turn_id)
        if snapshot is None:
            raise TurnNotFoundError(f"conversation {conversation_id!r} has no turn {turn_id!r}")
        return snapshot

    async def _suspended(self, conversation_id: str, turn_id: str) -> AgentTurnSnapshot:
        snapshot = await self._load(conversation_id, turn_id)
        if snapshot.status is not TurnStatus.SUSPENDED:
            raise TurnStateError(f"turn {turn_id!r} is {snapshot.status.value}, not suspended")
        return snapshot
