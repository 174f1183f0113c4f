"""The further steps of a thread deletion (`core.thread_deletion.DeletionStep`), over the node's
adapters, in the order the node runs them (`deletion_steps`):

- `summaries`: every summary object of the thread (the pointer and every version, for each agent
  of the thread: its row's agent and those with compaction state) and the Redis summary cache,
  holding the summarizer's lock of the thread meanwhile (`locks`): a summarizer that read the
  messages before the journal step writes its summary first, and one after cannot read them;
- `redis`: the threshold counters and guard of each of those agents;
- `memory`: the agent-memory entries whose provenance is the thread (`source.thread_id`: the
  facts the flush extracted from it), through the memory service (one transaction with a tombstone
  each in the outbox, so the Qdrant projection drops them; pinned-fact caches evicted by NOTIFY),
  and their quarantine rows;
- `compactions`: the thread's `thread_compactions` rows (the compaction ledger and the summary
  version mark; their NOTIFY evicts every node's cached summaries). Last, because the earlier
  steps find the thread's agents there.

Each is idempotent: run again after a crash, it deletes what is left and reports that.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from core.errors import StoreUnavailable
from core.journal.models import ThreadRef
from core.memory.service import MemoryService
from core.stores.deletions import DeletionRecord
from core.stores.locks import Lease
from core.stores.thresholds import ThreadScope
from core.summaries.models import summarization_lock_name
from core.thread_deletion import DeletionStep
from sinks.objectstore.summaries import ObjectStoreSummaryWriter
from sinks.postgres.compactions import PostgresCompactions
from sinks.redis.locks import RedisLocks
from sinks.redis.summary_cache import RedisSummaryCache
from sinks.redis.thresholds import RedisThresholdStore


async def _agents(record: DeletionRecord, compactions: PostgresCompactions) -> list[str]:
    found = set(await compactions.agents_of(record.environment, record.account_id, record.thread_id))
    if record.agent_id is not None:
        found.add(record.agent_id)
    return sorted(found)


def _ref(record: DeletionRecord) -> ThreadRef:
    return ThreadRef(environment=record.environment, account_id=record.account_id, thread_id=record.thread_id)


LOCK_WAIT_S = 60.0
"""The longest the summaries step waits for a summarizer to release the thread's lock."""
LOCK_TTL_S = 30.0


class SummariesStep:
    name = "summaries"

    def __init__(
        self,
        writer: ObjectStoreSummaryWriter,
        compactions: PostgresCompactions,
        cache: RedisSummaryCache | None = None,
        locks: RedisLocks | None = None,
        lock_wait_s: float = LOCK_WAIT_S,
    ) -> None:
        self.writer = writer
        self.compactions = compactions
        self.cache = cache
        self.locks = locks
        self.lock_wait_s = lock_wait_s

    async def run(self, record: DeletionRecord) -> Mapping[str, Any]:
        agents = await _agents(record, self.compactions)
        objects = 0
        for agent_id in agents:
            lease = await self._lock(_ref(record), agent_id)
            try:
                objects += await self.writer.delete_thread(_ref(record), agent_id)
                if self.cache is not None:
                    await self.cache.invalidate(_ref(record), agent_id)
            finally:
                if lease is not None and self.locks is not None:
                    await self.locks.release(lease)
        return {"objects": objects, "agents": agents}

    async def _lock(self, thread: ThreadRef, agent_id: str) -> Lease | None:
        if self.locks is None:
            return None
        name = summarization_lock_name(thread, agent_id)
        deadline = time.monotonic() + self.lock_wait_s
        while (lease := await self.locks.acquire(name, LOCK_TTL_S)) is None:
            if time.monotonic() >= deadline:
                raise StoreUnavailable(f"a summarizer held {name!r} for {self.lock_wait_s:g}s")
            await asyncio.sleep(0.1)
        return lease


class RedisStep:
    name = "redis"

    def __init__(self, thresholds: RedisThresholdStore, compactions: PostgresCompactions) -> None:
        self.thresholds = thresholds
        self.compactions = compactions

    async def run(self, record: DeletionRecord) -> Mapping[str, Any]:
        keys = 0
        for agent_id in await _agents(record, self.compactions):
            scope = ThreadScope(record.environment, record.account_id, agent_id, record.thread_id)
            keys += await self.thresholds.forget(scope)
        return {"keys": keys}


class MemoryStep:
    name = "memory"

    def __init__(self, service: MemoryService) -> None:
        self.service = service

    async def run(self, record: DeletionRecord) -> Mapping[str, Any]:
        entries, quarantined = await self.service.forget_thread(
            record.environment, record.account_id, record.thread_id
        )
        return {"entries": entries, "quarantined": quarantined}


class CompactionsStep:
    name = "compactions"

    def __init__(self, compactions: PostgresCompactions) -> None:
        self.compactions = compactions

    async def run(self, record: DeletionRecord) -> Mapping[str, Any]:
        rows = await self.compactions.forget_thread(record.environment, record.account_id, record.thread_id)
        return {"rows": rows}


def deletion_steps(
    writer: ObjectStoreSummaryWriter,
    thresholds: RedisThresholdStore,
    compactions: PostgresCompactions,
    memory: MemoryService,
    cache: RedisSummaryCache | None = None,
    locks: RedisLocks | None = None,
) -> list[DeletionStep]:
    """The steps in the order a deletion runs them (module doc)."""
    return [
        SummariesStep(writer, compactions, cache, locks),
        RedisStep(thresholds, compactions),
        MemoryStep(memory),
        CompactionsStep(compactions),
    ]
