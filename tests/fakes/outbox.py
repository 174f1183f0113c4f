"""`InMemoryEntriesOutbox` and `InMemoryAppliedOutbox`: the agent-memory outbox
(`core.stores.outbox`) in memory.

What the contract suite (`tests/core/stores/test_outbox.py`) asserts of every outbox holds here:
`write` is a committed transaction that wrote outbox rows (seqs rise from 1; listeners are called
after it, from the event loop); one claim at a time (another `claim` meanwhile gets None,
`republish_unapplied` waits for it); a claim's `published()` takes effect when its block ends
normally: its rows leave the outbox for the published rows, and the published rows the projection
noted applied are forgotten with their applied note (a note whose row is not published yet is kept
until it is); `republish_unapplied` moves every published row not applied back into the outbox
under its own seq (so before newer rows). Values are stored as JSON (a copy, like jsonb).

The state is public for tests: `rows` (the outbox) and `published` by seq, `applied` (the noted
seqs), `listeners`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from core.stores.outbox import OutboxRow


class InMemoryOutboxBatch:
    """The rows of one claim; `published()` is applied by the claim when its block ends normally."""

    def __init__(self, rows: Sequence[OutboxRow]) -> None:
        self.rows = rows
        self.confirmed = False

    async def published(self) -> None:
        self.confirmed = True


class InMemoryOutboxListener:
    """A subscription: usable until closed."""

    def __init__(self, on_notify: Callable[[], None]) -> None:
        self.on_notify = on_notify
        self.closed = False

    def usable(self) -> bool:
        return not self.closed

    async def close(self) -> None:
        self.closed = True


class InMemoryEntriesOutbox:
    """See the module doc."""

    def __init__(self) -> None:
        self.rows: dict[int, OutboxRow] = {}
        self.published: dict[int, OutboxRow] = {}
        self.applied: set[int] = set()
        self.listeners: list[InMemoryOutboxListener] = []
        self._last_seq = 0
        self._claim = asyncio.Lock()

    async def write(self, records: Sequence[tuple[str, Any]]) -> list[int]:
        """Commit outbox rows (record key, JSON-ready value or None); returns their seqs."""
        seqs = []
        for record_key, value in records:
            self._last_seq += 1
            self.rows[self._last_seq] = OutboxRow(self._last_seq, record_key, json.loads(json.dumps(value)))
            seqs.append(self._last_seq)
        self._notify()
        return seqs

    @asynccontextmanager
    async def claim(self, limit: int) -> AsyncIterator[InMemoryOutboxBatch | None]:
        if self._claim.locked():
            yield None
            return
        async with self._claim:
            batch = InMemoryOutboxBatch([self.rows[seq] for seq in sorted(self.rows)[:limit]])
            yield batch
            if batch.confirmed:  # the block ended normally: commit
                for row in batch.rows:
                    self.published.setdefault(row.seq, self.rows.pop(row.seq))
                self._forget_applied()

    async def republish_unapplied(self) -> int:
        async with self._claim:
            self._forget_applied()
            back = [row for seq, row in self.published.items() if seq not in self.rows]
            self.published.clear()
            self.rows.update((row.seq, row) for row in back)
        if back:
            self._notify()
        return len(back)

    async def pending(self) -> int:
        return len(self.rows)

    async def listen(self, on_notify: Callable[[], None]) -> InMemoryOutboxListener:
        listener = InMemoryOutboxListener(on_notify)
        self.listeners.append(listener)
        return listener

    def _forget_applied(self) -> None:
        for seq in self.applied & self.published.keys():
            self.applied.discard(seq)
            del self.published[seq]

    def _notify(self) -> None:
        self.listeners = [listener for listener in self.listeners if listener.usable()]
        loop = asyncio.get_running_loop()
        for listener in self.listeners:
            loop.call_soon(_deliver, listener)


def _deliver(listener: InMemoryOutboxListener) -> None:
    if listener.usable():
        listener.on_notify()


class InMemoryAppliedOutbox:
    """The qdrant-projection's notes (`core.stores.outbox.AppliedOutbox`), into `outbox.applied`."""

    def __init__(self, outbox: InMemoryEntriesOutbox) -> None:
        self.outbox = outbox
        self.started = False

    async def start(self) -> None:
        self.started = True

    async def stop(self) -> None:
        self.started = False

    async def record(self, seqs: Sequence[int]) -> None:
        self.outbox.applied.update(seqs)
