"""Keeps the leases of a runner's running turns alive while a long model or tool call runs.

The renewal is written once (`LeaseKeeper.renew`, awaited by the turn loop); what renews in
the background is a daemon thread for `AgentRunner` and an asyncio task for `AsyncAgentRunner`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from agentctx_fast._sync import run_sync
from agentctx_fast.stores.turns import AsyncAgentTurnStore, LeaseRenewal

log = logging.getLogger("agentctx_fast.runner")


@dataclass(slots=True)
class HeldLease:
    """One running turn's lease as this process holds it."""

    conversation_id: str
    turn_id: str
    owner: str
    renewed_at: float
    cancel: threading.Event = field(default_factory=threading.Event)
    lost: threading.Event = field(default_factory=threading.Event)

    def observe(self, renewal: LeaseRenewal) -> None:
        if renewal is LeaseRenewal.CANCEL_REQUESTED:
            self.cancel.set()
        elif renewal is LeaseRenewal.LOST:
            self.lost.set()


class LeaseKeeper:
    """The leases a runner holds, renewed a third of the way to expiry in the background."""

    def __init__(
        self, turn_store: AsyncAgentTurnStore, lease_seconds: float, clock: Callable[[], float]
    ) -> None:
        self._turn_store = turn_store
        self._lease_seconds = lease_seconds
        self._clock = clock
        self._held: dict[tuple[str, str], HeldLease] = {}
        self._lock = threading.Lock()
        self._closed = False

    def hold(self, conversation_id: str, turn_id: str, owner: str) -> HeldLease:
        return self.keep(HeldLease(conversation_id, turn_id, owner, self._clock()))

    def keep(self, lease: HeldLease) -> HeldLease:
        """Renew ``lease``, taken from the store, from now on."""
        with self._lock:
            self._held[(lease.conversation_id, lease.turn_id)] = lease
            if not self._closed:
                self._start()
        return lease

    def drop(self, lease: HeldLease) -> None:
        with self._lock:
            if self._held.get((lease.conversation_id, lease.turn_id)) is lease:
                del self._held[(lease.conversation_id, lease.turn_id)]

    def find(self, conversation_id: str, turn_id: str) -> HeldLease | None:
        with self._lock:
            return self._held.get((conversation_id, turn_id))

    async def renew(self, lease: HeldLease, now: float | None = None) -> None:
        """Renew now (the turn loop does this before each model call); ``now``: the clock's
        reading, if the caller took it."""
        if now is None:
            now = self._clock()
        lease.observe(
            await self._turn_store.renew_lease(
                lease.conversation_id, lease.turn_id, lease.owner, self._lease_seconds, now
            )
        )
        lease.renewed_at = now

    def close(self) -> None:
        self._closed = True

    def _start(self) -> None:
        """Start the background renewer if it is not running (called under the lock)."""
        raise NotImplementedError

    def _idle(self) -> bool:
        """True when no lease is held (the renewer then stops; called under the lock)."""
        return not self._held or self._closed

    def _due(self) -> list[HeldLease]:
        """The leases to renew now."""
        with self._lock:
            held = list(self._held.values())
        interval = self._lease_seconds / 3
        return [lease for lease in held if self._clock() - lease.renewed_at >= interval]


class ThreadLeaseKeeper(LeaseKeeper):
    """`AgentRunner`'s keeper: one daemon thread while leases are held."""

    def __init__(
        self, turn_store: AsyncAgentTurnStore, lease_seconds: float, clock: Callable[[], float]
    ) -> None:
        super().__init__(turn_store, lease_seconds, clock)
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="agentctx-lease-keeper", daemon=True
            )
            self._thread.start()

    def close(self) -> None:
        super().close()
        self._wake.set()

    def _run(self) -> None:
        while not self._wake.wait(self._lease_seconds / 6):
            with self._lock:
                if self._idle():  # the next `hold` starts a new thread
                    self._thread = None
                    return
            for lease in self._due():
                try:
                    run_sync(self.renew(lease))
                except Exception as error:  # a custom store's failure too: try next round
                    _renewal_failed(lease, error)
        with self._lock:
            self._thread = None


class TaskLeaseKeeper(LeaseKeeper):
    """`AsyncAgentRunner`'s keeper: one task on the running event loop while leases are held."""

    def __init__(
        self, turn_store: AsyncAgentTurnStore, lease_seconds: float, clock: Callable[[], float]
    ) -> None:
        super().__init__(turn_store, lease_seconds, clock)
        self._task: asyncio.Task[None] | None = None

    def _start(self) -> None:
        loop = asyncio.get_running_loop()
        # A runner used from a new event loop (its old one closed) starts a task on it.
        if self._task is None or self._task.done() or self._task.get_loop() is not loop:
            self._task = loop.create_task(self._run())

    def close(self) -> None:
        super().close()
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._lease_seconds / 6)
            with self._lock:
                if self._idle():  # the next `hold` starts a new task
                    self._task = None
                    return
            for lease in self._due():
                try:
                    await self.renew(lease)
                except Exception as error:  # a custom store's failure too: try next round
                    _renewal_failed(lease, error)


def _renewal_failed(lease: HeldLease, error: Exception) -> None:
    log.warning(
        "conversation %r, turn %r: renewing the lease failed (%s: %s); retrying",
        lease.conversation_id, lease.turn_id, type(error).__name__, error,
        extra={"conversation_id": lease.conversation_id, "turn_id": lease.turn_id},
    )  # fmt: skip
