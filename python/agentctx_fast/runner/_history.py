"""What a turn reads of its conversation: the history a window needs, a stored turn's own
messages, and turn records (the page-by-page reads themselves are
`agentctx_fast._reads`, shared with `ChatMemory.window`)."""

from __future__ import annotations

from agentctx_fast._reads import NEWEST_TURN, REACH_MARGIN, read_history
from agentctx_fast.core.messages import Message
from agentctx_fast.errors import InvalidArgumentError, TurnNotFoundError, TurnStateError
from agentctx_fast.memory import AsyncChatMemory
from agentctx_fast.runner._state import Engine, check_turn_id, remember_reach
from agentctx_fast.runner.agent import Agent
from agentctx_fast.stores.turn_store import AgentTurnSnapshot


def memory_of(eng: Engine, conversation_id: str) -> AsyncChatMemory:
    """The chat memory of ``conversation_id`` (`InvalidArgumentError` without a provider)."""
    if eng.provider is None:
        raise InvalidArgumentError(
            "this runner has no chat memory: give it a store or a chat_memory_provider, "
            "or use run_history"
        )
    return eng.provider(conversation_id)


async def history(
    eng: Engine,
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
    known = eng.reach.get(conversation_id)
    tail, _ = await read_history(
        memory,
        agent.window_options,
        must_include=must_include,
        current_stored=current_stored,
        first_page=None if known is None else known + REACH_MARGIN,
    )
    remember_reach(eng, conversation_id, len(tail))
    return tail


async def split_turn(
    eng: Engine,
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
        await history(eng, agent, memory, snapshot.conversation_id, first)
        if agent is not None
        else (await read_history(memory, NEWEST_TURN, must_include=first))[0]
    )
    start = next((i for i, msg in enumerate(collected) if msg.message_id == first), None)
    if start is None and missing_ok and all(m.turn_id != snapshot.turn_id for m in collected):
        return collected, []
    if start is None:
        raise TurnStateError(
            f"turn {snapshot.turn_id!r}: its first message {first!r} is not in chat memory"
        )
    return collected[:start], collected[start:]


async def load(eng: Engine, conversation_id: str, turn_id: str) -> AgentTurnSnapshot:
    check_turn_id(turn_id)
    snapshot = await eng.turn_store.load_turn(conversation_id, turn_id)
    if snapshot is None:
        raise TurnNotFoundError(f"conversation {conversation_id!r} has no turn {turn_id!r}")
    return snapshot
