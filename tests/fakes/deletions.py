"""`InMemoryDeletions`: the `DeletionRegister` (`core.stores.deletions`) in memory, for unit tests.
The contract suite `tests/core/stores/test_deletions.py` runs it beside Postgres."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from core.stores.deletions import (
    DeletionRecord,
    JournalDeletion,
    SeqRanges,
    ThreadScope,
    Tombstone,
    merge_ranges,
    merged_outcome,
)


class InMemoryDeletions:
    """See the module doc."""

    def __init__(self) -> None:
        self.records: dict[int, DeletionRecord] = {}

    async def open(
        self, environment: str, account_id: str, thread_id: str, agent_id: str | None, user_id: str | None
    ) -> DeletionRecord:
        for record in self.records.values():
            if (record.environment, record.account_id, record.thread_id) == (
                environment,
                account_id,
                thread_id,
            ) and record.completed_at is None:
                return record
        deletion_id = len(self.records) + 1
        record = DeletionRecord(
            deletion_id, environment, account_id, thread_id, agent_id, user_id, requested_at=datetime.now(UTC)
        )
        self.records[deletion_id] = record
        return record

    async def latest(self, environment: str, account_id: str, thread_id: str) -> DeletionRecord | None:
        found = [
            r
            for r in self.records.values()
            if (r.environment, r.account_id, r.thread_id) == (environment, account_id, thread_id)
        ]
        return max(found, key=lambda r: r.deletion_id, default=None)

    async def get(self, deletion_id: int) -> DeletionRecord | None:
        return self.records.get(deletion_id)

    def _update(self, deletion_id: int, **changes: Any) -> DeletionRecord:
        if deletion_id not in self.records:
            raise LookupError(f"no thread deletion {deletion_id}")
        record = dataclasses.replace(self.records[deletion_id], **changes)
        self.records[deletion_id] = record
        return record

    async def record_journal(self, deletion_id: int, deleted: JournalDeletion) -> DeletionRecord:
        record = self.records.get(deletion_id)
        if record is None:
            raise LookupError(f"no thread deletion {deletion_id}")
        merged = merged_outcome(record, deleted)
        report = {**record.report, "journal": {"messages": merged.messages, "up_to_seq": merged.up_to_seq}}
        return self._update(deletion_id, up_to_seq=merged.up_to_seq, seqs=merged.seqs, report=report)

    async def record_step(self, deletion_id: int, step: str, report: Mapping[str, Any]) -> DeletionRecord:
        current = dict(self.records[deletion_id].report) if deletion_id in self.records else {}
        return self._update(deletion_id, report={**current, step: dict(report)})

    async def complete(self, deletion_id: int) -> DeletionRecord:
        record = self.records.get(deletion_id)
        if record is not None and record.completed_at is not None:
            return record
        return self._update(deletion_id, completed_at=datetime.now(UTC))

    async def incomplete(self) -> list[DeletionRecord]:
        return [r for _, r in sorted(self.records.items()) if r.completed_at is None]

    async def tombstones(self) -> list[Tombstone]:
        best: dict[tuple[str, str, str], int] = {}
        for r in self.records.values():
            if r.up_to_seq is not None:
                scope = (r.environment, r.account_id, r.thread_id)
                best[scope] = max(best.get(scope, 0), r.up_to_seq)
        return [Tombstone(*scope, up_to_seq) for scope, up_to_seq in best.items()]

    async def deleted_seqs(self) -> dict[ThreadScope, SeqRanges]:
        merged: dict[ThreadScope, SeqRanges] = {}
        for r in self.records.values():
            if r.seqs is not None:
                scope = (r.environment, r.account_id, r.thread_id)
                merged[scope] = merge_ranges(merged.get(scope, ()), r.seqs)
        return merged
