"""Stored message records to message objects, each distinct record decoded once.

The runner reads the tail of a conversation before every turn, so the same records come back
again and again. A record's bytes are its identity (an update writes new bytes), so the object
decoded from the same bytes of the same conversation before is reused: no JSON parse and no
field checks, and it keeps the core view and token count cached on it, so the window built over
it does not count it again. As with `InMemoryChatMemory`, later reads of a conversation hand out
the same message object: messages are immutable, and their ``metadata`` and ``payload`` dicts
must be treated so. Objects are never shared between conversations.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from agentctx_fast._cache import GenerationCache
from agentctx_fast.errors import InvalidArgumentError
from agentctx_fast.messages import Message
from agentctx_fast.stores.serializer import AgentStoreSerializer, load_message

DEFAULT_MESSAGE_CACHE_SIZE = 16_384
"""Messages per cache generation: a store keeps at most twice as many decoded, the recent
tails (about 100 messages each) of some 300 conversations."""

GENERATION_BYTES = 32 * 1024 * 1024
"""Record bytes per cache generation: the cache keeps at most about twice as many."""

MAX_CACHED_RECORD_BYTES = 256 * 1024
"""Larger records (a big tool result) are decoded on every read instead of kept."""


class MessageLoader:
    """Decodes a store's message records with its current serializer, reusing the object of a
    record of the same conversation read before. ``cache_size=0`` decodes every time."""

    __slots__ = ("_cache", "_cache_size", "_serializer", "_store", "hits", "misses")

    def __init__(self, store: Any, cache_size: int) -> None:
        if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 0:
            raise InvalidArgumentError(
                f"message_cache_size must be an int >= 0, got {cache_size!r}"
            )
        self._store = store
        self._cache_size = cache_size
        self._serializer: AgentStoreSerializer = store.serializer
        self._cache = self._new_cache()
        self.hits = 0
        self.misses = 0

    def _new_cache(self) -> GenerationCache[tuple[str, bytes], Message] | None:
        if self._cache_size == 0:
            return None
        return GenerationCache(self._cache_size, GENERATION_BYTES)

    def __call__(self, conversation_id: str, data: bytes) -> Message:
        """The message of one record of ``conversation_id``."""
        return self.load_all(conversation_id, (data,))[0]

    def load_all(self, conversation_id: str, records: Iterable[bytes]) -> list[Message]:
        """The messages of ``records`` of ``conversation_id``, in order (a page of a
        conversation's tail: mostly hits, so the per-page work is done once)."""
        serializer = self._store.serializer
        if serializer is not self._serializer:
            self._serializer, self._cache = serializer, self._new_cache()
        cache = self._cache
        if cache is None:
            return [load_message(serializer, data) for data in records]
        get, put = cache.get, cache.put
        messages: list[Message] = []
        append = messages.append
        hits = 0
        try:
            for data in records:
                size = len(data)
                if size > MAX_CACHED_RECORD_BYTES:
                    append(load_message(serializer, data))
                    continue
                if type(data) is not bytes:  # a driver's buffer type: a key must be immutable
                    data = bytes(data)
                key = (conversation_id, data)
                message = get(key)
                if message is None:
                    self.misses += 1
                    message = load_message(serializer, data)
                    put(key, message, size)
                else:
                    hits += 1
                append(message)
        finally:
            self.hits += hits
        return messages

    def info(self) -> MessageCacheInfo:
        """What the cache holds and how often it answered."""
        cache = self._cache
        return MessageCacheInfo(self.hits, self.misses, 0 if cache is None else len(cache))


@dataclass(frozen=True, slots=True)
class MessageCacheInfo:
    """The decoded-record cache of a store: ``hits`` and ``misses`` since the store was made
    (records over the size cap and reads with the cache off are neither), and ``entries``."""

    hits: int
    misses: int
    entries: int

    @property
    def hit_rate(self) -> float:
        """``hits / (hits + misses)``, 0.0 before the first read."""
        total = self.hits + self.misses
        return self.hits / total if total else 0.0
