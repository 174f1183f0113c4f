"""The summary interfaces (`core.summaries.models`) in memory: `InMemorySummaryStore` (a
`SummaryStore`: reader and writer), `InMemorySummaryCache` and `InMemoryVersionFloor`.

What the contract suite (`tests/core/stores/test_summaries.py`) asserts of every implementation
holds here. The store: summaries are per (environment, account, agent, thread); a write succeeds
only when the stored version is `expected_version` and the new one is
`max(expected_version or 0, floor) + 1`, else SummaryVersionConflict (with the stored version)
and nothing is written; the same write again (the latest summary equal to `new`) returns it. The
cache keeps the highest version it was given (a miss after `invalidate`). The floor only rises.

Test hooks: `summaries` (every version written, per thread), `entries` (the cache's), `marks`
(the floor's).
"""

from __future__ import annotations

from datetime import datetime

from core.journal.models import ThreadRef
from core.summaries.models import Summary, SummaryVersionConflict, in_force_then

SummaryKey = tuple[str, str, str, str]


def _key(thread: ThreadRef, agent_id: str) -> SummaryKey:
    return (thread.environment, thread.account_id, agent_id, thread.thread_id)


class InMemorySummaryStore:
    """See the module doc."""

    def __init__(self) -> None:
        self.summaries: dict[SummaryKey, list[Summary]] = {}

    async def read(self, thread: ThreadRef, agent_id: str) -> Summary | None:
        written = self.summaries.get(_key(thread, agent_id))
        return written[-1] if written else None

    async def current(self, thread: ThreadRef, agent_id: str) -> Summary | None:
        return await self.read(thread, agent_id)

    async def as_of(
        self, thread: ThreadRef, agent_id: str, *, last_offset: int, written_before: datetime | None
    ) -> Summary | None:
        fitting = [
            s
            for s in self.summaries.get(_key(thread, agent_id), [])
            if in_force_then(s, last_offset, written_before)
        ]
        return fitting[-1] if fitting else None

    async def write(
        self,
        thread: ThreadRef,
        agent_id: str,
        new: Summary,
        *,
        expected_version: int | None,
        floor: int = 0,
    ) -> Summary:
        key = _key(thread, agent_id)
        latest = await self.read(thread, agent_id)
        if latest is not None and latest == new:  # the same write again
            return new
        current = latest.version if latest is not None else None
        wanted = max(expected_version or 0, floor) + 1
        if current != expected_version or new.version != wanted:
            raise SummaryVersionConflict(
                f"summary of {'/'.join(key)}: expected version {expected_version}, stored version "
                f"{current}, new version {new.version} (must be {wanted})",
                current_version=current,
            )
        self.summaries.setdefault(key, []).append(new)
        return new


class InMemorySummaryCache:
    """See the module doc."""

    def __init__(self) -> None:
        self.entries: dict[SummaryKey, Summary] = {}

    async def get(self, thread: ThreadRef, agent_id: str) -> Summary | None:
        return self.entries.get(_key(thread, agent_id))

    async def put(self, thread: ThreadRef, agent_id: str, summary: Summary) -> None:
        key = _key(thread, agent_id)
        held = self.entries.get(key)
        if held is None or held.version < summary.version:
            self.entries[key] = summary

    async def invalidate(self, thread: ThreadRef, agent_id: str) -> None:
        self.entries.pop(_key(thread, agent_id), None)


class InMemoryVersionFloor:
    """See the module doc."""

    def __init__(self) -> None:
        self.marks: dict[SummaryKey, int] = {}

    async def highest(self, thread: ThreadRef, agent_id: str) -> int:
        return self.marks.get(_key(thread, agent_id), 0)

    async def record(self, thread: ThreadRef, agent_id: str, version: int) -> None:
        key = _key(thread, agent_id)
        self.marks[key] = max(self.marks.get(key, 0), version)
