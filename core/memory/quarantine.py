"""Where retroactive screening keeps quarantined entries (`QuarantineStore`), and its records.

The adapter is `sinks.postgres.quarantine.PostgresQuarantineStore` (table `memory_quarantine`,
migration 0013); the rules live in `core.memory.rescreen`. A quarantined entry is MOVED out of the
entries store, so no read of `core.memory.store.MemoryStore` (recall, pinned facts, browse) can
answer it, for any tenant, and its move publishes a tombstone so the index drops it.

Contract (on top of `MemoryWrites`, whose statements a `QuarantineWrites` also has):
- `scan` pages through the stored entries of one environment (optionally one account) by
  entry_id ascending, strictly after `after` (keyset, no OFFSET), expired ones included; `count`
  is how many there are (a snapshot: for progress only).
- `lock(entry_id)` is the entry as stored now, locked for update (None when it is gone).
- `quarantine(record)` removes the entry from the entries store and keeps `record` (open, i.e.
  not released); the caller publishes the tombstone in the same block. An entry has at most one
  open record (ValueError / a unique violation otherwise).
- `open_record(environment, entry_id)` is the entry's open record, locked for update;
  `find_open` the same without a lock (to learn the entry's agent before taking its lock).
- `restore(record, at)` puts the entry back exactly as it was stored, its version bumped, marks
  the record released at `at` and returns the restored entry (the caller publishes the upsert).
  The key's visibility scope must be free (the caller checks with `find_by_key`).
- `released(environment, entry_ids)` is the most recent released record of each entry that has one.
- `open_records` pages through the open records of one environment (optionally one account) by
  entry_id ascending, strictly after `after`.
- Blocks commit when they exit normally and roll back otherwise, entries, records and outbox
  together.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from core.memory.store import MemoryWrites, StoredEntry


@dataclass(frozen=True)
class QuarantineRecord:
    """An entry taken out of memory by rescreening, with why."""

    stored: StoredEntry
    """The entry as it was stored when it was quarantined (its version then)."""
    reason: str
    """Outcome code: `screening_rejected`, `sensitive_without_user`, `sensitive_key_taken`."""
    rule: str
    """The screening pattern that decided (`ignore_instructions`, `email`, ...)."""
    field: str
    """`key` or `content`."""
    detail: str
    """A sentence for the operator."""
    quarantined_at: datetime
    released_at: datetime | None = None


class QuarantineWrites(MemoryWrites, Protocol):
    """Statements of one block of `QuarantineStore.writing` (module contract)."""

    async def lock(self, entry_id: uuid.UUID) -> StoredEntry | None: ...

    async def quarantine(self, record: QuarantineRecord) -> None: ...

    async def open_record(self, environment: str, entry_id: uuid.UUID) -> QuarantineRecord | None: ...

    async def restore(self, record: QuarantineRecord, at: datetime) -> StoredEntry: ...


class QuarantineStore(Protocol):
    def writing(
        self, environment: str, account_id: str, agent_id: str
    ) -> AbstractAsyncContextManager[QuarantineWrites]:
        """One block holding the agent's write lock (as `MemoryStore.writing`)."""
        ...

    async def count(self, environment: str, account_id: str | None, *, after: uuid.UUID | None) -> int:
        """How many entries `scan` would page through from `after` (for progress)."""
        ...

    async def scan(
        self, environment: str, account_id: str | None, *, after: uuid.UUID | None, limit: int
    ) -> Sequence[StoredEntry]: ...

    async def open_records(
        self, environment: str, account_id: str | None, *, after: uuid.UUID | None, limit: int
    ) -> Sequence[QuarantineRecord]: ...

    async def find_open(self, environment: str, entry_id: uuid.UUID) -> QuarantineRecord | None: ...

    async def released(
        self, environment: str, entry_ids: Sequence[uuid.UUID]
    ) -> dict[uuid.UUID, QuarantineRecord]:
        """The most recent released record of each of `entry_ids` that has one."""
        ...
