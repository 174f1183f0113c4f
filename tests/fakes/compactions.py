"""`InMemoryCompactionLedger`: the `CompactionLedger` (`core.stores.compactions`) in memory.

It keeps one record per thread and applies the rules of `sinks.postgres.compactions`'s statements,
so the contract suite (`tests/core/stores/test_compactions.py`) asserts the same of both: a newer
request (larger or equal `to_offset`) replaces the one in flight, never an older one; a request
covers the crossings at or before its `to_offset`; `settle` closes a request it reaches and forgets
the crossings it covers; a crossing is kept (the latest) only past the request in flight; open
records come crossings first, then requests by `requested_at`. Requests are stored as their JSON
round trip (what Postgres returns). `clock` gives `requested_at` (default: now, UTC). The state is
public for tests: `records`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from core.stores.compactions import OpenCompaction
from core.stores.thresholds import ThreadScope

_NEVER = datetime.min.replace(tzinfo=UTC)


class InMemoryCompactionLedger:
    """See the module doc."""

    def __init__(self, clock: Callable[[], datetime] | None = None) -> None:
        self.records: dict[ThreadScope, OpenCompaction] = {}
        self.clock = clock or (lambda: datetime.now(UTC))

    async def record_requests(self, requests: Sequence[tuple[ThreadScope, Mapping[str, Any]]]) -> None:
        for scope, payload in requests:
            to_offset = int(payload["to_offset"])
            record = self.records.get(scope)
            if record is not None and record.to_offset is not None and record.to_offset > to_offset:
                continue
            crossed = record.crossed_offset if record is not None else None
            self.records[scope] = OpenCompaction(
                scope=scope,
                request=json.loads(json.dumps(dict(payload))),
                to_offset=to_offset,
                requested_at=self.clock(),
                rerequests=0,
                crossed_offset=None if crossed is not None and crossed <= to_offset else crossed,
            )

    async def record_crossings(self, crossings: Mapping[ThreadScope, int]) -> None:
        for scope, offset in crossings.items():
            record = self.records.get(scope)
            if record is None:
                self.records[scope] = OpenCompaction(scope, None, None, None, 0, offset)
            elif record.to_offset is None or record.to_offset < offset:
                crossed = max(offset, record.crossed_offset if record.crossed_offset is not None else offset)
                self.records[scope] = replace(record, crossed_offset=crossed)

    async def settle(self, scope: ThreadScope, up_to: int) -> None:
        record = self.records.get(scope)
        if record is None or (record.to_offset is not None and record.to_offset > up_to):
            return
        crossed = record.crossed_offset
        self.records[scope] = replace(
            record,
            request=None,
            to_offset=None,
            requested_at=None,
            rerequests=0,
            crossed_offset=None if crossed is not None and crossed <= up_to else crossed,
        )

    async def forget_crossing(self, scope: ThreadScope, up_to: int) -> None:
        record = self.records.get(scope)
        if record is not None and record.crossed_offset is not None and record.crossed_offset <= up_to:
            self.records[scope] = replace(record, crossed_offset=None)

    async def open_compactions(
        self, *, requested_before: datetime | None, limit: int = 1000
    ) -> list[OpenCompaction]:
        due = [
            record
            for record in self.records.values()
            if (
                record.request is not None
                and (requested_before is None or (record.requested_at or requested_before) < requested_before)
            )
            or (record.request is None and record.crossed_offset is not None)
        ]
        due.sort(key=lambda r: (r.requested_at is not None, r.requested_at or _NEVER))
        return due[:limit]

    async def rerequested(self, requests: Sequence[tuple[ThreadScope, int]]) -> None:
        for scope, to_offset in requests:
            record = self.records.get(scope)
            if record is not None and record.to_offset == to_offset:
                self.records[scope] = replace(
                    record, requested_at=self.clock(), rerequests=record.rerequests + 1
                )

    async def get(self, scope: ThreadScope) -> OpenCompaction | None:
        return self.records.get(scope)
