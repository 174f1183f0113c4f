"""Noticing that another writer took the journal, whatever this process is doing.

The relay notices a fence on its next journal call, but not while it waits on an unreachable
broker, and the API only when a request comes. `watch_fence(journal, stop)` asks the journal every
`interval_s` (`last_seq()`, which checks SlateDB's status without I/O) and raises `JournalFenced`
as soon as another writer opened it, so the node stops for good within about a second of SlateDB
learning of the fence (its manifest poll); it returns when `stop` is set. Other journal errors are
left to the components that use the journal.
"""

from __future__ import annotations

import asyncio
import contextlib

from core.errors import JournalFenced, MemstreamError
from core.stores.journal import Journal

FENCE_CHECK_INTERVAL_S = 0.5


async def watch_fence(
    journal: Journal, stop: asyncio.Event, interval_s: float = FENCE_CHECK_INTERVAL_S
) -> None:
    """Raise JournalFenced once another writer opened `journal`; return when `stop` is set."""
    while not stop.is_set():
        try:
            await journal.last_seq()
        except JournalFenced:
            raise
        except MemstreamError:
            pass  # closed or unavailable: not a fence; the journal's users report it
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval_s)
