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
    entry under a race costs one recomputation, never a wrong value).

    With ``max_weight``, a generation also rotates once the weights ``put`` gave its entries
    add up to ``max_weight`` (e.g. bytes), so the cache holds at most about twice that.
    """

    __slots__ = ("_max_weight", "_old", "_size", "_young", "_young_weight")

    def __init__(self, size: int, max_weight: int | None = None) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise InvalidArgumentError(f"cache_size must be an int >= 1, got {size!r}")
        self._size = size
        self._max_weight = max_weight
        self._young: dict[K, tuple[V, int]] = {}
        self._old: dict[K, tuple[V, int]] = {}
        self._young_weight = 0

    def get(self, key: K) -> V | None:
        hit = self._young.get(key)
        if hit is None:
            hit = self._old.get(key)
            if hit is None:
                return None
            self.put(key, *hit)  # promoted: in use, so it survives the next rotation
        return hit[0]

    def put(self, key: K, value: V, weight: int = 1) -> None:
        if len(self._young) >= self._size or (
            self._max_weight is not None and self._young_weight >= self._max_weight
        ):
            self._old, self._young, self._young_weight = self._young, {}, 0
        self._young[key] = (value, weight)
        self._young_weight += weight

    def __len__(self) -> int:
        return len(self._young) + len(self._old)
