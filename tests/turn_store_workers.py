"""Process workers for the turn store tests (module-level, so spawn can import them)."""

from __future__ import annotations

import time

from agentctx_fast import AgentConversationBusyError


def acquire_worker(kind: str, url: str, conversation_id: str, index: int) -> str:
    """Open a store of ``kind`` and try to take ``conversation_id``; 'won:…' or 'busy:…'."""
    if kind == "redis":
        from agentctx_fast.stores.redis import RedisAgentStore

        store = RedisAgentStore(url)
    else:
        from agentctx_fast.stores.sql import SqlAgentStore

        store = SqlAgentStore(url)
        store.schema.initialize()
    try:
        turns = store.turn_store()
        # Start together: wait for the next half-second boundary, shared by every worker.
        time.sleep(0.5 - time.time() % 0.5)
        try:
            turns.acquire_conversation(conversation_id, f"t{index}", f"o{index}", 30.0, 1.0)
            return f"won:t{index}"
        except AgentConversationBusyError as error:
            return f"busy:{error.turn_id}"
    finally:
        store.close()
