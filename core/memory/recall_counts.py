"""Recall counters written behind the answer (`RecallCounts`).

A recall counts itself on the entries it returned (`record_recall`: recall_count + 1,
last_recalled_at never moved back). The counters steer decay and hygiene only; they are not part
of any answer, and they were already committed without waiting for the WAL flush (a crash may
lose the last of them). Waiting for their transaction was about a fifth of a recall's time, so
the recall notes them here and answers at once.

Contract:
- `note(scope, ids, at)` never waits and never raises. A writer task, started on the running loop
  by the first note and ended when nothing is left, applies the notes in note order, one
  transaction at a time, each with the time `at` of its recall (so a late write counts the same).
- A note whose write fails is logged and dropped, as is a note made while `max_pending` notes
  wait (the database down or far behind: recalls must not pile up work for it); both are counted
  in `dropped`.
- `drain()` returns once every note made before the call was applied or dropped (tests; the
  owner at shutdown, before closing the database).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from core.memory.models import MemoryScope

log = logging.getLogger("memstream.memory.recall")

MAX_PENDING = 10_000


class CountingStore(Protocol):
    """What writes the counters (`MemoryService.record_recall`)."""

    async def record_recall(
        self, scope: MemoryScope, entry_ids: Sequence[str], *, at: datetime | None = None
    ) -> int: ...


class RecallCounts:
    """Recall counters applied in the background, in note order (module doc)."""

    def __init__(self, store: CountingStore, *, max_pending: int = MAX_PENDING) -> None:
        if max_pending < 1:
            raise ValueError("max_pending must be >= 1")
        self._store = store
        self._max_pending = max_pending
        self._pending: deque[tuple[MemoryScope, tuple[str, ...], datetime]] = deque()
        self._writer: asyncio.Task[None] | None = None
        self.written = 0
        """Notes applied so far."""
        self.dropped = 0
        """Notes dropped so far (write failed, or too many waiting)."""

    def note(self, scope: MemoryScope, entry_ids: Sequence[str], at: datetime) -> None:
        """Count one recall of `entry_ids` in `scope` at `at`, soon (module doc). Call it on the loop."""
        if not entry_ids:
            return
        if len(self._pending) >= self._max_pending:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 1000 == 0:
                waiting = len(self._pending)
                log.warning("recall counters: %d waiting, dropped %d so far", waiting, self.dropped)
            return
        self._pending.append((scope, tuple(entry_ids), at))
        if self._writer is None:
            self._writer = asyncio.get_running_loop().create_task(self._write(), name="recall-counts")

    async def drain(self) -> None:
        """Wait until every note made so far was applied or dropped."""
        while self._writer is not None:
            await asyncio.shield(self._writer)

    async def _write(self) -> None:
        try:
            while self._pending:
                scope, ids, at = self._pending[0]
                try:
                    await self._store.record_recall(scope, ids, at=at)
                    self.written += 1
                except Exception as exc:
                    self.dropped += 1
                    log.warning("recall counters: could not count a recall of %d entries: %r", len(ids), exc)
                finally:
                    self._pending.popleft()
        finally:
            self._writer = None
