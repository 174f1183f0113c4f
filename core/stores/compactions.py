"""Thread memory's durable compaction state (`CompactionLedger`): what must survive losing the
derived state (a Redis wipe) and the compaction requests on their way (a broker restart). The
adapter is `sinks.postgres.compactions.PostgresCompactions`.

One record per thread (`ThreadScope`) keeps:
- The compaction in flight: `thresholds` records the request (`record_requests`) BEFORE producing
  it, the summarizer settles it (`settle`) once a summary covers its `to_offset` or it gave up on
  it. An open request is therefore either on its way or lost, and `processors.compaction_recovery`
  requests it again (`open_compactions`, `rerequested`). A newer request (larger `to_offset`)
  replaces an older one; an older one never replaces a newer one.
- A crossing while a request was in flight (`record_crossings`): the guard kept `thresholds` from
  requesting, so the latest such message offset is kept and the recovery re-evaluates the thread
  once the request in flight is settled (instead of waiting for another message).

Storage errors are the adapter's and propagate (processors let them fail the batch, which is
retried).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from core.stores.thresholds import ThreadScope


@dataclass(frozen=True, slots=True)
class OpenCompaction:
    """An open record: a request in flight (`request`, `to_offset`, when and how often it was
    requested again) and/or a crossing to re-evaluate (`crossed_offset`)."""

    scope: ThreadScope
    request: dict[str, Any] | None
    to_offset: int | None
    requested_at: datetime | None
    rerequests: int
    crossed_offset: int | None


class CompactionLedger(Protocol):
    async def record_requests(self, requests: Sequence[tuple[ThreadScope, Mapping[str, Any]]]) -> None:
        """Record each `compaction.requested` value (its `to_offset`) as its thread's request in
        flight, unless a request with a larger `to_offset` is already in flight. A crossing at or
        before the request's `to_offset` is covered by it and forgotten."""
        ...

    async def record_crossings(self, crossings: Mapping[ThreadScope, int]) -> None:
        """Remember, per thread, the latest message offset that crossed a threshold while a
        request was in flight (ignored when that request already reaches it)."""
        ...

    async def settle(self, scope: ThreadScope, up_to: int) -> None:
        """The compaction up to offset `up_to` is over (a summary covers it, or it was given up):
        a request in flight with `to_offset <= up_to` is closed and a crossing at or before
        `up_to` forgotten. A newer request in flight is left alone."""
        ...

    async def forget_crossing(self, scope: ThreadScope, up_to: int) -> None:
        """The crossing at `up_to` (or before) was re-evaluated: forget it."""
        ...

    async def open_compactions(
        self, *, requested_before: datetime | None, limit: int = 1000
    ) -> list[OpenCompaction]:
        """Requests in flight that were (re-)requested before `requested_before` (every one when
        None), and crossings to re-evaluate (no request in flight), oldest first."""
        ...

    async def rerequested(self, requests: Sequence[tuple[ThreadScope, int]]) -> None:
        """The requests in flight up to these offsets were produced again (confirmed by the broker)."""
        ...

    async def get(self, scope: ThreadScope) -> OpenCompaction | None:
        """The thread's record (open or not), or None: for tests and operators."""
        ...
