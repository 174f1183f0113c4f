"""Summaries through a cache: cache-aside reads and write-through writes.

`CachedSummaryReader(cache, reader)` is a `SummaryReader`: a cache hit is returned as is; on a miss
the reader (the object store) answers and a summary it returns is put into the cache. Errors of the
reader propagate unchanged (SummaryUnavailable); the cache never raises.

`CachedSummaryWriter(cache, store)` is a `SummaryStore`: a `SummaryWriter` and a `SummaryReader`
(reading from the cache first): `write` invalidates the thread's entry, writes to the store (the
authority), then puts the result into the cache; `current` resolves in the store and refreshes
the cache with what it found (repairing an entry left behind by a writer that died after its
commit).

The cache only ever receives versions read from or written to the store, and it keeps the highest
it was given, so a cached entry is never older than what the store showed when the entry was put.

`MonotonicSummaryStore(store, floor)` is a `SummaryStore` whose versions never go backwards, not
even when the store loses its objects (a deleted folder): `write` numbers the new summary above
every version known anywhere - the store's (`expected_version`), the durable high-water mark
(`floor`, Postgres) and what `store.read` shows (the Redis cache in front of the store) - and
raises the mark once the summary is durable. While nothing was lost it changes nothing:
`new.version` is already `expected_version + 1`.
"""

from __future__ import annotations

import logging

from core.journal.models import ThreadRef
from core.summaries.models import Summary, SummaryCache, SummaryReader, SummaryStore, SummaryVersionFloor

log = logging.getLogger("memstream.summary_store")


class CachedSummaryReader:
    def __init__(self, cache: SummaryCache, reader: SummaryReader) -> None:
        self._cache = cache
        self._reader = reader

    async def read(self, thread: ThreadRef, agent_id: str) -> Summary | None:
        cached = await self._cache.get(thread, agent_id)
        if cached is not None:
            return cached
        summary = await self._reader.read(thread, agent_id)
        if summary is not None:
            await self._cache.put(thread, agent_id, summary)
        return summary


class CachedSummaryWriter(CachedSummaryReader):
    def __init__(self, cache: SummaryCache, store: SummaryStore) -> None:
        super().__init__(cache, store)
        self._writer = store

    async def current(self, thread: ThreadRef, agent_id: str) -> Summary | None:
        summary = await self._writer.current(thread, agent_id)
        if summary is not None:
            await self._cache.put(thread, agent_id, summary)
        return summary

    async def write(
        self,
        thread: ThreadRef,
        agent_id: str,
        new: Summary,
        *,
        expected_version: int | None,
        floor: int = 0,
    ) -> Summary:
        await self._cache.invalidate(thread, agent_id)
        written = await self._writer.write(
            thread, agent_id, new, expected_version=expected_version, floor=floor
        )
        await self._cache.put(thread, agent_id, written)
        return written


class MonotonicSummaryStore:
    """See the module doc. `store` is ideally a `CachedSummaryWriter` (its `read` then shows the
    cached version too)."""

    def __init__(self, store: SummaryStore, floor: SummaryVersionFloor) -> None:
        self._store = store
        self._floor = floor

    async def read(self, thread: ThreadRef, agent_id: str) -> Summary | None:
        return await self._store.read(thread, agent_id)

    async def current(self, thread: ThreadRef, agent_id: str) -> Summary | None:
        return await self._store.current(thread, agent_id)

    async def write(
        self,
        thread: ThreadRef,
        agent_id: str,
        new: Summary,
        *,
        expected_version: int | None,
        floor: int = 0,
    ) -> Summary:
        """Write `new` as the next version: `new.version` is raised above every version known
        anywhere when the store lost some (module doc); the mark is raised after the write."""
        shown = await self._store.read(thread, agent_id)
        known = max(
            floor,
            await self._floor.highest(thread, agent_id),
            shown.version if shown is not None else 0,
        )
        if known > (expected_version or 0) and new.version <= known:
            log.warning(
                "summary of %s/%s/%s/%s: the store holds version %s but version %d is known (its "
                "objects were lost, or another writer just wrote it): writing version %d",
                thread.environment,
                thread.account_id,
                agent_id,
                thread.thread_id,
                expected_version,
                known,
                known + 1,
            )
            new = new.model_copy(update={"version": known + 1})
        written = await self._store.write(
            thread, agent_id, new, expected_version=expected_version, floor=known
        )
        await self._floor.record(thread, agent_id, written.version)
        return written
