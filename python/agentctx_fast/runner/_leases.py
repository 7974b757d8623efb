"""Keeps the leases of a runner's running turns alive while a long model or tool call runs.

One keeper and one renewal loop (`LeaseKeeper._renewing`) for both runners: the turn loop
awaits `LeaseKeeper.renew` itself before each model call, and between those the loop renews in
the background, on a daemon thread for `AgentRunner` (whose stores answer at once, so the loop
is driven by `run_sync` there) and as an asyncio task for `AsyncAgentRunner`. Only how the
loop waits between rounds, and where it runs, differ.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from agentctx_fast._blocking import run_sync
from agentctx_fast.stores.turn_store import AsyncAgentTurnStore, LeaseRenewal

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
    """The leases a runner holds, renewed a third of the way to expiry in the background:
    on a daemon thread when ``threaded`` (a blocking runner), else as a task on the running
    event loop. The background renewer runs while leases are held and stops when none is."""

    def __init__(
        self,
        turn_store: AsyncAgentTurnStore,
        lease_seconds: float,
        clock: Callable[[], float],
        *,
        threaded: bool,
    ) -> None:
        self._turn_store = turn_store
        self._lease_seconds = lease_seconds
        self._clock = clock
        self._threaded = threaded
        self._held: dict[tuple[str, str], HeldLease] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._wake = threading.Event()  # set by `close`: the thread stops waiting
        self._renewer: threading.Thread | asyncio.Task[None] | None = None

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
        """Stop renewing (turns still running stop renewing)."""
        self._closed = True
        self._wake.set()
        renewer = self._renewer
        if isinstance(renewer, asyncio.Task):
            renewer.cancel()

    def _start(self) -> None:
        """Start the background renewer if it is not running (called under the lock)."""
        renewer = self._renewer
        if self._threaded:
            if renewer is None:
                wait = _thread_wait(self._wake)
                self._renewer = threading.Thread(
                    target=run_sync,
                    args=(self._renewing(wait),),
                    name="agentctx-lease-keeper",
                    daemon=True,
                )
                self._renewer.start()
            return
        loop = asyncio.get_running_loop()
        # A runner used from a new event loop (its old one closed) starts a task on it.
        if (
            not isinstance(renewer, asyncio.Task)
            or renewer.done()
            or renewer.get_loop() is not loop
        ):
            self._renewer = loop.create_task(self._renewing(_task_wait))

    async def _renewing(self, wait: Callable[[float], Awaitable[bool]]) -> None:
        """The renewal loop: every sixth of the lease, renew the leases due, until none is
        held (the next `keep` starts a new renewer) or the keeper is closed. ``wait(seconds)``
        is awaited between rounds; it returns True once the keeper is closed."""
        while not await wait(self._lease_seconds / 6):
            with self._lock:
                if not self._held or self._closed:
                    self._renewer = None  # under the lock: a `keep` now starts a new renewer
                    return
            for lease in self._due():
                try:
                    await self.renew(lease)
                except Exception as error:  # a custom store's failure too: try next round
                    _renewal_failed(lease, error)
        with self._lock:
            self._renewer = None  # closed: nothing starts another

    def _due(self) -> list[HeldLease]:
        """The leases to renew now."""
        with self._lock:
            held = list(self._held.values())
        interval = self._lease_seconds / 3
        return [lease for lease in held if self._clock() - lease.renewed_at >= interval]


def _thread_wait(wake: threading.Event) -> Callable[[float], Awaitable[bool]]:
    async def wait(seconds: float) -> bool:
        return wake.wait(seconds)  # on the keeper's own thread: blocking is its job

    return wait


async def _task_wait(seconds: float) -> bool:
    await asyncio.sleep(seconds)  # `close` cancels the task
    return False


def _renewal_failed(lease: HeldLease, error: Exception) -> None:
    log.warning(
        "conversation %r, turn %r: renewing the lease failed (%s: %s); retrying",
        lease.conversation_id, lease.turn_id, type(error).__name__, error,
        extra={"conversation_id": lease.conversation_id, "turn_id": lease.turn_id},
    )  # fmt: skip
