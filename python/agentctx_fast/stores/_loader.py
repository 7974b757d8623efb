"""Stored message records to message objects, each distinct record decoded once.

The runner reads the tail of a conversation before every turn, so the same records come back
again and again. A record's bytes are its identity (an update writes new bytes), and messages
are immutable, so the object decoded from the same bytes before is reused: no JSON parse and no
field checks, and it keeps the core view and token count cached on it, so the window built over
it does not recount it either.
"""

from __future__ import annotations

from agentctx_fast._cache import GenerationCache
from agentctx_fast.errors import InvalidArgumentError
from agentctx_fast.messages import Message
from agentctx_fast.stores.serializer import AgentStoreSerializer, load_message

DEFAULT_MESSAGE_CACHE_SIZE = 4096


class MessageLoader:
    """Decodes message records with ``serializer``, reusing the object of a record seen before
    (at most ``2 * cache_size`` kept; ``cache_size=0`` decodes every time)."""

    __slots__ = ("_cache", "_serializer")

    def __init__(self, serializer: AgentStoreSerializer, cache_size: int) -> None:
        if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 0:
            raise InvalidArgumentError(
                f"message_cache_size must be an int >= 0, got {cache_size!r}"
            )
        self._serializer = serializer
        self._cache: GenerationCache[bytes, Message] | None = (
            GenerationCache(cache_size) if cache_size != 0 else None
        )

    def __call__(self, data: bytes) -> Message:
        cache = self._cache
        if cache is None:
            return load_message(self._serializer, data)
        if type(data) is not bytes:  # a driver's buffer type: a key must be immutable
            data = bytes(data)
        message = cache.get(data)
        if message is None:
            message = load_message(self._serializer, data)
            cache.put(data, message)
        return message
