"""Keeps the leases of a runner's running turns alive while a long model or tool call runs."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from agentctx_fast.errors import AgentCtxError
from agentctx_fast.stores.turns import AgentTurnStore, LeaseRenewal


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
    """One daemon thread per runner renews every held lease a third of the way to expiry."""

    def __init__(
        self, turn_store: AgentTurnStore, lease_seconds: float, clock: Callable[[], float]
    ) -> None:
        self._turn_store = turn_store
        self._lease_seconds = lease_seconds
        self._clock = clock
        self._held: dict[tuple[str, str], HeldLease] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False

    def hold(self, conversation_id: str, turn_id: str, owner: str) -> HeldLease:
        lease = HeldLease(conversation_id, turn_id, owner, self._clock())
        with self._lock:
            self._held[(conversation_id, turn_id)] = lease
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(
                    target=self._run, name="agentctx-lease-keeper", daemon=True
                )
                self._thread.start()
        return lease

    def drop(self, lease: HeldLease) -> None:
        with self._lock:
            if self._held.get((lease.conversation_id, lease.turn_id)) is lease:
                del self._held[(lease.conversation_id, lease.turn_id)]

    def find(self, conversation_id: str, turn_id: str) -> HeldLease | None:
        with self._lock:
            return self._held.get((conversation_id, turn_id))

    def renew(self, lease: HeldLease) -> None:
        """Renew now (the runner does this before each model call)."""
        now = self._clock()
        lease.observe(
            self._turn_store.renew_lease(
                lease.conversation_id, lease.turn_id, lease.owner, self._lease_seconds, now
            )
        )
        lease.renewed_at = now

    def close(self) -> None:
        self._closed = True
        self._wake.set()

    def _run(self) -> None:
        interval = self._lease_seconds / 3
        while not self._wake.wait(interval / 2):
            with self._lock:
                held = list(self._held.values())
                if not held:  # idle: exit; the next `hold` starts a new thread
                    self._thread = None
                    return
            for lease in held:
                if self._clock() - lease.renewed_at < interval:
                    continue
                try:
                    self.renew(lease)
                except AgentCtxError:
                    pass  # the store is unreachable now; the next round tries again
        with self._lock:
            self._thread = None
