"""A bounded cache for long-running services: two generations of at most ``size`` entries.

When the young generation is full it becomes the old one and the previous old one is dropped;
a hit in the old generation is promoted, so what is in use survives a rotation. Memory stays
below ``2 * size`` entries and no entry costs bookkeeping beyond a dict slot.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from agentctx_fast.errors import InvalidArgumentError

K = TypeVar("K")
V = TypeVar("V")


class GenerationCache(Generic[K, V]):
    """``get``/``put`` with the two-generation bound; safe to share between threads (a lost
    entry under a race costs one recomputation, never a wrong value)."""

    __slots__ = ("_old", "_size", "_young")

    def __init__(self, size: int) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise InvalidArgumentError(f"cache_size must be an int >= 1, got {size!r}")
        self._size = size
        self._young: dict[K, V] = {}
        self._old: dict[K, V] = {}

    def get(self, key: K) -> V | None:
        hit = self._young.get(key)
        if hit is None and (hit := self._old.get(key)) is not None:
            self.put(key, hit)
        return hit

    def put(self, key: K, value: V) -> None:
        if len(self._young) >= self._size:
            self._old, self._young = self._young, {}
        self._young[key] = value

    def __len__(self) -> int:
        return len(self._young) + len(self._old)
