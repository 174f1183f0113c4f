"""`InMemoryErasures`: the `ErasureRegister` (`core.stores.erasures`) in memory, for unit tests.
The contract suite `tests/core/stores/test_erasures.py` runs it beside Postgres."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from core.stores.erasures import ErasureRecord


class InMemoryErasures:
    """See the module doc."""

    def __init__(self) -> None:
        self.records: dict[int, ErasureRecord] = {}

    async def open(self, environment: str, account_id: str, user_id: str) -> ErasureRecord:
        for record in self.records.values():
            if (record.environment, record.account_id, record.user_id) == (
                environment,
                account_id,
                user_id,
            ) and record.completed_at is None:
                return record
        erasure_id = len(self.records) + 1
        record = ErasureRecord(erasure_id, environment, account_id, user_id, requested_at=datetime.now(UTC))
        self.records[erasure_id] = record
        return record

    async def latest(self, environment: str, account_id: str, user_id: str) -> ErasureRecord | None:
        found = [
            r
            for r in self.records.values()
            if (r.environment, r.account_id, r.user_id) == (environment, account_id, user_id)
        ]
        return max(found, key=lambda r: r.erasure_id, default=None)

    async def get(self, erasure_id: int) -> ErasureRecord | None:
        return self.records.get(erasure_id)

    def _update(self, erasure_id: int, **changes: Any) -> ErasureRecord:
        if erasure_id not in self.records:
            raise LookupError(f"no user erasure {erasure_id}")
        record = dataclasses.replace(self.records[erasure_id], **changes)
        self.records[erasure_id] = record
        return record

    async def add_deletion(self, erasure_id: int, deletion_id: int) -> ErasureRecord:
        current = self.records[erasure_id].deletions if erasure_id in self.records else ()
        if deletion_id in current:
            return self._update(erasure_id)
        return self._update(erasure_id, deletions=(*current, deletion_id))

    async def record_step(self, erasure_id: int, step: str, report: Mapping[str, Any]) -> ErasureRecord:
        current = dict(self.records[erasure_id].report) if erasure_id in self.records else {}
        return self._update(erasure_id, report={**current, step: dict(report)})

    async def complete(self, erasure_id: int) -> ErasureRecord:
        record = self.records.get(erasure_id)
        if record is not None and record.completed_at is not None:
            return record
        return self._update(erasure_id, completed_at=datetime.now(UTC))

    async def incomplete(self) -> list[ErasureRecord]:
        return [r for _, r in sorted(self.records.items()) if r.completed_at is None]

    async def completed(self, environment: str) -> list[ErasureRecord]:
        return [
            r
            for _, r in sorted(self.records.items())
            if r.completed_at is not None and r.environment == environment
        ]
