"""A thread deletion's further steps (`memstream.deletion_steps`) on the real stores: summary objects
(every version) in a local object store, Redis threshold state and the summary cache, agent-memory
entries whose provenance is the thread (a tombstone each in the outbox), Postgres compaction rows;
and a deletion interrupted between two steps (an injected crash) finished by
`resume`, as the node does at start."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from core.auth import Principal
from core.errors import DeletionIncomplete, StoreUnavailable
from core.journal.models import NewMessage, ThreadRef
from core.memory.models import MemoryScope, Provenance
from core.memory.service import MemoryService
from core.stores.deletions import DeletionRecord, Tombstone
from core.stores.thresholds import ThreadScope
from core.summaries.models import summarization_lock_name
from core.thread_deletion import ThreadDeletion
from memstream.deletion_steps import CompactionsStep, SummariesStep, deletion_steps
from sinks.objectstore.summaries import ObjectStoreSummaryWriter, open_object_store
from sinks.postgres.compactions import PostgresCompactions
from sinks.postgres.deletions import PostgresDeletions
from sinks.postgres.memory import PostgresMemoryStore
from sinks.postgres.threads import PostgresThreadStore
from sinks.redis.client import redis_client
from sinks.redis.locks import RedisLocks
from sinks.redis.summary_cache import RedisSummaryCache
from sinks.redis.thresholds import RedisThresholdStore
from sinks.slatedb.journal import SlateJournal
from tests.summary_builders import make

ACME = Principal(account_id="acme", environment="test", key_id="k")
REF = ThreadRef(environment="test", account_id="acme", thread_id="t1")
KEPT = ThreadRef(environment="test", account_id="acme", thread_id="t2")


class Crashing(CompactionsStep):
    """The last step, crashing on its first run (a node killed between two steps)."""

    crashes = 1

    async def run(self, record: DeletionRecord) -> Mapping[str, Any]:
        if self.crashes:
            self.crashes -= 1
            raise ConnectionResetError("injected crash")
        return await super().run(record)


@pytest.fixture
async def thresholds(redis_url: str, topic_prefix: str) -> AsyncIterator[RedisThresholdStore]:
    store = RedisThresholdStore.from_url(
        redis_url, token_limit=10_000, message_limit=100, namespace=topic_prefix
    )
    yield store
    await store.aclose()


@pytest.fixture
async def cache(redis_url: str, topic_prefix: str) -> AsyncIterator[RedisSummaryCache]:
    opened = RedisSummaryCache(redis_client(redis_url), namespace=topic_prefix)
    yield opened
    await opened.aclose()


async def test_every_store_of_the_thread_is_reached_and_a_crash_midway_is_resumed(
    tmp_path: Path,
    pool: asyncpg.Pool,
    journal: SlateJournal,
    thresholds: RedisThresholdStore,
    cache: RedisSummaryCache,
) -> None:
    writer = ObjectStoreSummaryWriter(open_object_store(f"file://{tmp_path}/summaries"))
    compactions = PostgresCompactions(pool)
    threads = PostgresThreadStore(pool)
    memory = MemoryService(PostgresMemoryStore(pool))
    ada = MemoryScope(environment="test", account_id="acme", agent_id="bot", user_id="ada")
    for ref in (REF, KEPT):
        await threads.upsert("test", "acme", ref.thread_id, "bot", None, {})
        await journal.append(ref, "bot", None, [NewMessage(role="user", content="hi")])
        scope = ThreadScope("test", "acme", "bot", ref.thread_id)
        await thresholds.reset_counters(scope, 1)
        assert await thresholds.hold_guard(scope, 0)
        await writer.write(ref, "bot", make(1), expected_version=None)
        await writer.write(ref, "bot", make(2), expected_version=1)
        await cache.put(ref, "bot", make(2))
        await compactions.record_crossings({scope: 0})
        await memory.store(
            ada,
            f"fact.{ref.thread_id}",
            f"Ada said so in {ref.thread_id}.",
            "project_fact",
            scope_visibility="private",
            source=Provenance(thread_id=ref.thread_id),
        )
    await memory.store(ada, "fact.none", "Told without a thread.", "project_fact", scope_visibility="private")
    outbox_before = await pool.fetchval("SELECT count(*) FROM memory_outbox")
    published: list[Tombstone] = []

    async def publish(deletion_id: int, tombstone: Tombstone, _: object) -> None:
        published.append(tombstone)

    steps = deletion_steps(writer, thresholds, compactions, memory, cache)
    steps[-1] = Crashing(compactions)
    deletions = ThreadDeletion(threads, journal, PostgresDeletions(pool), publish, steps)
    with pytest.raises(DeletionIncomplete) as stopped:  # the API answers 503
        await deletions.delete(ACME, "t1")
    assert isinstance(stopped.value.__cause__, ConnectionResetError)
    (left,) = await PostgresDeletions(pool).incomplete()
    assert set(left.report) == {"thread", "journal", "event", "summaries", "redis", "memory"}
    assert left.report["memory"] == {"entries": 1, "quarantined": 0}
    tombstones = await pool.fetch("SELECT record_key, value FROM memory_outbox WHERE seq > $1", outbox_before)
    assert [r["value"] for r in tombstones] == [None]  # the tombstone the Qdrant projection applies
    assert left.report["summaries"] == {"objects": 3, "agents": ["bot"]}  # pointer + 2 versions
    assert left.report["redis"] == {"keys": 2}  # counters and guard

    (done,) = await deletions.resume()  # the node at its next start
    assert done.completed_at is not None and done.report["compactions"] == {"rows": 1}
    assert published == [Tombstone("test", "acme", "t1", 1)]
    assert await writer.current(REF, "bot") is None and await cache.get(REF, "bot") is None
    assert await thresholds.counters(ThreadScope("test", "acme", "bot", "t1")) is None
    assert await compactions.agents_of("test", "acme", "t1") == []
    # the other thread is untouched
    kept = await writer.current(KEPT, "bot")
    assert kept is not None and kept.version == 2
    assert await cache.get(KEPT, "bot") == kept
    assert await thresholds.counters(ThreadScope("test", "acme", "bot", "t2")) is not None
    assert await compactions.agents_of("test", "acme", "t2") == ["bot"]
    left_entries = sorted(e.key for e in (await memory.list(ada, limit=10)).entries)
    assert left_entries == ["fact.none", "fact.t2"]
    assert await deletions.delete(ACME, "t1") == done  # again: the same report


async def test_the_summaries_step_waits_for_a_summarizer_holding_the_threads_lock(
    tmp_path: Path, pool: asyncpg.Pool, redis_url: str, topic_prefix: str
) -> None:
    writer = ObjectStoreSummaryWriter(open_object_store(f"file://{tmp_path}/summaries"))
    client = redis_client(redis_url)
    locks = RedisLocks(client, namespace=topic_prefix)
    await writer.write(REF, "bot", make(1), expected_version=None)
    lease = await locks.acquire(summarization_lock_name(REF, "bot"), 10)
    assert lease is not None
    record = await PostgresDeletions(pool).open("test", "acme", "t1", "bot", None)

    async def summarizer_finishing() -> None:  # it read the messages before they were deleted
        await asyncio.sleep(0.5)
        await writer.write(REF, "bot", make(2), expected_version=1)
        await locks.release(lease)

    finishing = asyncio.create_task(summarizer_finishing())
    report = await SummariesStep(writer, PostgresCompactions(pool), locks=locks).run(record)
    await finishing
    assert report == {"objects": 3, "agents": ["bot"]}  # its summary too: pointer + 2 versions
    assert await writer.current(REF, "bot") is None
    assert await locks.acquire(summarization_lock_name(REF, "bot"), 10) is not None  # never released
    with pytest.raises(StoreUnavailable, match="held"):  # the deletion is incomplete, finished later
        await SummariesStep(writer, PostgresCompactions(pool), locks=locks, lock_wait_s=0.3).run(record)
    await client.aclose()
