"""`InMemoryQuarantineStore`: `InMemoryMemoryStore` that also keeps quarantined entries
(`core.memory.quarantine.QuarantineStore`), as `sinks.postgres.quarantine` does beside
`memory_entries` in the same database. A quarantine moves the entry out of `entries` into the
records (`quarantine`, public for tests), a release moves it back (version + 1) and stamps the
record released; both commit or roll back with the block, like the adapter's transaction.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime

from core.memory.quarantine import QuarantineRecord
from core.memory.store import StoredEntry
from tests.fakes.memory import InMemoryMemoryStore, InMemoryMemoryWrites


def _in_scope(record_or_entry: StoredEntry, environment: str, account_id: str | None) -> bool:
    e = record_or_entry.entry
    return e.environment == environment and (account_id is None or e.account_id == account_id)


def _uid(stored: StoredEntry) -> uuid.UUID:
    return uuid.UUID(stored.entry.entry_id)


class InMemoryQuarantineWrites(InMemoryMemoryWrites):
    """`InMemoryMemoryWrites` plus the quarantine statements, on the block's copy."""

    @property
    def records(self) -> list[QuarantineRecord]:
        return self.state.quarantine

    async def lock(self, entry_id: uuid.UUID) -> StoredEntry | None:
        return self.state.entries.get(str(entry_id))

    async def quarantine(self, record: QuarantineRecord) -> None:
        entry_id = record.stored.entry.entry_id
        current = self.state.entries.get(entry_id)
        if current is None:
            raise LookupError(f"memory entry {entry_id} vanished inside its write transaction")
        if any(r.stored.entry.entry_id == entry_id and r.released_at is None for r in self.records):
            raise ValueError(f"memory entry {entry_id} is already quarantined")
        await self.delete(entry_id)
        self.records.append(dataclasses.replace(record, stored=current, released_at=None))

    async def open_record(self, environment: str, entry_id: uuid.UUID) -> QuarantineRecord | None:
        for record in self.records:
            e = record.stored.entry
            if (e.environment, e.entry_id, record.released_at) == (environment, str(entry_id), None):
                return record
        return None

    async def restore(self, record: QuarantineRecord, at: datetime) -> StoredEntry:
        current = await self.open_record(record.stored.entry.environment, _uid(record.stored))
        if current is None:
            raise LookupError(f"quarantined entry {record.stored.entry.entry_id} was released meanwhile")
        self.records[self.records.index(current)] = dataclasses.replace(current, released_at=at)
        entry = current.stored.entry
        self._check_key(entry)
        stored = StoredEntry(entry=entry, version=current.stored.version + 1)
        self.state.entries[entry.entry_id] = stored
        return stored


class InMemoryQuarantineStore(InMemoryMemoryStore):
    """See the module doc."""

    @property
    def quarantine(self) -> list[QuarantineRecord]:
        return self._state.quarantine

    @asynccontextmanager
    async def writing(
        self, environment: str, account_id: str, agent_id: str
    ) -> AsyncIterator[InMemoryQuarantineWrites]:
        async with self._lock:
            writes = InMemoryQuarantineWrites(self._state.copy())
            yield writes
            self._state = writes.state

    async def count(self, environment: str, account_id: str | None, *, after: uuid.UUID | None) -> int:
        return len(await self.scan(environment, account_id, after=after, limit=len(self._state.entries)))

    async def scan(
        self, environment: str, account_id: str | None, *, after: uuid.UUID | None, limit: int
    ) -> list[StoredEntry]:
        found = [
            s
            for s in self._state.entries.values()
            if _in_scope(s, environment, account_id) and (after is None or _uid(s) > after)
        ]
        return sorted(found, key=_uid)[:limit]

    async def open_records(
        self, environment: str, account_id: str | None, *, after: uuid.UUID | None, limit: int
    ) -> list[QuarantineRecord]:
        found = [
            r
            for r in self.quarantine
            if r.released_at is None
            and _in_scope(r.stored, environment, account_id)
            and (after is None or _uid(r.stored) > after)
        ]
        return sorted(found, key=lambda r: _uid(r.stored))[:limit]

    async def find_open(self, environment: str, entry_id: uuid.UUID) -> QuarantineRecord | None:
        return await InMemoryQuarantineWrites(self._state).open_record(environment, entry_id)

    async def released(
        self, environment: str, entry_ids: Sequence[uuid.UUID]
    ) -> dict[uuid.UUID, QuarantineRecord]:
        wanted = set(entry_ids)
        out: dict[uuid.UUID, QuarantineRecord] = {}
        for record in self.quarantine:
            uid = _uid(record.stored)
            if (
                record.released_at is None
                or uid not in wanted
                or record.stored.entry.environment != environment
            ):
                continue
            best = out.get(uid)
            if best is None or (best.released_at or record.released_at) <= record.released_at:
                out[uid] = record
        return out
