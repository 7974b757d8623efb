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

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agentctx_fast.core.messages import Message
from agentctx_fast.errors import InvalidArgumentError, SerializationError
from agentctx_fast.stores._records import UndecodableRecord
from agentctx_fast.stores.serializer import AgentStoreSerializer, load_message

DEFAULT_MESSAGE_CACHE_SIZE = 16_384
"""Messages per cache generation: a store keeps at most twice as many decoded, the recent
tails (about 100 messages each) of some 300 conversations."""

DEFAULT_MESSAGE_CACHE_BYTES = 64 * 1024 * 1024
"""Record bytes a store's cache keeps at most (about; half per generation): the ~100-message
tails of some 300 tool-heavy conversations."""

MAX_CACHED_RECORD_BYTES = 256 * 1024
"""Larger records (a big tool result) are decoded on every read instead of kept."""


class MessageLoader:
    """Decodes a store's message records with its current serializer, reusing the object of a
    record of the same conversation read before. ``cache_size=0`` decodes every time.

    The cache has two generations (as `GenerationCache`: a full young generation becomes the old
    one, the previous old one is dropped, and a hit in the old generation is promoted), each a
    dict of conversation id to a dict of record bytes to message: a page whose records are all
    in its conversation's young dict is answered by one lookup per record, with no key to
    build. A generation holds at most ``cache_size`` records and about half ``cache_bytes`` of
    records.
    """

    __slots__ = (
        "_cache_size",
        "_generation_bytes",
        "_old",
        "_old_entries",
        "_serializer",
        "_store",
        "_young",
        "_young_bytes",
        "_young_entries",
        "hits",
        "misses",
    )

    def __init__(
        self, store: Any, cache_size: int, cache_bytes: int = DEFAULT_MESSAGE_CACHE_BYTES
    ) -> None:
        size, weight = (_limit(name, value) for name, value in (
            ("message_cache_size", cache_size), ("message_cache_bytes", cache_bytes)
        ))  # fmt: skip
        self._store = store
        # Either limit at 0 turns the cache off.
        self._cache_size = size if weight else 0
        self._generation_bytes = max(1, weight // 2)
        self._serializer: AgentStoreSerializer = store.serializer
        self._clear()
        self.hits = 0
        self.misses = 0

    def _clear(self) -> None:
        self._young: dict[str, dict[bytes, Message]] = {}
        self._old: dict[str, dict[bytes, Message]] = {}
        self._young_entries = self._old_entries = self._young_bytes = 0

    def __call__(self, conversation_id: str, data: bytes) -> Message:
        """The message of one record of ``conversation_id``."""
        return self.load_all(conversation_id, (data,))[0]

    def load_all(
        self,
        conversation_id: str,
        records: Sequence[Any],
        convert: Callable[[Any], bytes] | None = None,
    ) -> list[Message]:
        """The messages of ``records`` of ``conversation_id``, in order (a page of a
        conversation's tail: mostly hits). ``convert`` turns a driver's reply into the record's
        bytes (raising `SerializationError` for a reply that is not a record); the replies are
        tried as they are first, as keys of the conversation's young generation."""
        serializer = self._store.serializer
        if serializer is not self._serializer:
            self._serializer = serializer
            self._clear()
        if self._cache_size == 0:
            if convert is not None:
                records = [convert(data) for data in records]
            return [_decoded(serializer, conversation_id, data) for data in records]
        young = self._young.get(conversation_id)
        # Replies are tried as keys only when they are bytes (a str reply hashes like its bytes
        # and would be compared with them).
        if young is not None and (convert is None or (records and type(records[0]) is bytes)):
            try:  # every record a hit: no conversion, no key, no bookkeeping per record
                messages = list(map(young.__getitem__, records))
            except (KeyError, TypeError, ValueError):  # a miss, or a reply that is no key
                pass
            else:
                self.hits += len(messages)
                return messages
        return self._load_each(conversation_id, records, convert, serializer)

    def _load_each(
        self,
        conversation_id: str,
        records: Sequence[Any],
        convert: Callable[[Any], bytes] | None,
        serializer: AgentStoreSerializer,
    ) -> list[Message]:
        young = self._young.get(conversation_id) or {}
        old = self._old.get(conversation_id) or {}
        messages: list[Message] = []
        append = messages.append
        hits = 0
        try:
            for data in records:
                if convert is not None:
                    data = convert(data)
                size = len(data)
                if size > MAX_CACHED_RECORD_BYTES:
                    append(_decoded(serializer, conversation_id, data))
                    continue
                if type(data) is not bytes:  # a driver's buffer type: a key must be immutable
                    data = bytes(data)
                message = young.get(data)
                if message is None:
                    message = old.get(data)
                    if message is None:
                        self.misses += 1
                        message = _decoded(serializer, conversation_id, data)
                    else:
                        hits += 1
                    young = self._put(conversation_id, data, message, size)
                else:
                    hits += 1
                append(message)
        finally:
            self.hits += hits
        return messages

    def _put(
        self, conversation_id: str, data: bytes, message: Message, size: int
    ) -> dict[bytes, Message]:
        """Keeps ``message`` in the young generation (rotating it first when full); returns the
        conversation's young dict."""
        if self._young_entries >= self._cache_size or self._young_bytes >= self._generation_bytes:
            self._old, self._young = self._young, {}
            self._old_entries, self._young_entries, self._young_bytes = self._young_entries, 0, 0
        young = self._young.get(conversation_id)
        if young is None:
            young = self._young[conversation_id] = {}
        young[data] = message
        self._young_entries += 1
        self._young_bytes += size
        return young

    def info(self) -> MessageCacheInfo:
        """What the cache holds and how often it answered."""
        return MessageCacheInfo(self.hits, self.misses, self._young_entries + self._old_entries)


def _decoded(serializer: AgentStoreSerializer, conversation_id: str, data: bytes) -> Message:
    """One record decoded; one that does not decode is an `UndecodableRecord` holding its
    bytes, which the store turns into an error naming the message."""
    try:
        return load_message(serializer, data)
    except SerializationError as error:
        raise UndecodableRecord(conversation_id, bytes(data), error) from error


def _limit(name: str, value: object) -> int:
    """An int >= 0 as its exact value (an int subclass's own comparisons are not asked)."""
    if type(value) is not bool and isinstance(value, int):
        exact = int.__index__(value)
        if exact >= 0:
            return exact
    raise InvalidArgumentError(f"{name} must be an int >= 0, got {value!r}")


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
