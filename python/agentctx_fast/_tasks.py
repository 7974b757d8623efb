"""Waiting for work that must not be cut in the middle (a store write, a closing turn)."""

from __future__ import annotations

import asyncio
from typing import Any


async def wait_uncut(task: asyncio.Future[Any]) -> bool:
    """Waits until ``task`` is done, through any cancellations of the caller meanwhile (which
    never reach ``task``); True if the caller was cancelled, which it should then raise."""
    cancelled = False
    while not task.done():
        try:
            await asyncio.wait((task,))
        except asyncio.CancelledError:
            cancelled = True
    return cancelled
