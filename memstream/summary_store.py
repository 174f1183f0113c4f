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
"""

from __future__ import annotations

from memstream.journal.models import ThreadRef
from memstream.summaries import Summary, SummaryCache, SummaryReader, SummaryStore


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
        self, thread: ThreadRef, agent_id: str, new: Summary, *, expected_version: int | None
    ) -> Summary:
        await self._cache.invalidate(thread, agent_id)
        written = await self._writer.write(thread, agent_id, new, expected_version=expected_version)
        await self._cache.put(thread, agent_id, written)
        return written
