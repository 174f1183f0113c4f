"""Summaries through the Redis cache over the object store (both real), and the API wiring."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import obstore
import pytest
from pydantic import SecretStr

from core.auth import Principal
from core.config import Settings
from core.journal.models import NewMessage
from core.summaries.layered import CachedSummaryReader, CachedSummaryWriter, MonotonicSummaryStore
from core.summaries.models import SummaryVersionConflict, summary_version_key
from core.turn_context import SUMMARY_PREFIX
from memstream.embedded.process import free_port
from memstream.wiring.api import build_api_deps
from sinks.objectstore.summaries import ObjectStoreSummaryWriter, open_object_store
from sinks.postgres.compactions import PostgresSummaryVersions
from sinks.redis.client import redis_client
from sinks.redis.summary_cache import RedisSummaryCache
from sinks.slatedb.journal import SlateJournal
from tests.summary_builders import THREAD, make


@pytest.fixture
def store(tmp_path: Path) -> ObjectStoreSummaryWriter:
    return ObjectStoreSummaryWriter(open_object_store(f"file://{tmp_path / 'objects'}"))


@pytest.fixture
async def cache(redis_url: str) -> AsyncIterator[RedisSummaryCache]:
    cache = RedisSummaryCache(redis_client(redis_url), namespace=uuid.uuid4().hex[:12])
    try:
        yield cache
    finally:
        await cache.aclose()


@pytest.fixture
async def down_cache() -> AsyncIterator[RedisSummaryCache]:
    cache = RedisSummaryCache(redis_client(f"redis://127.0.0.1:{free_port()}/0"), namespace="x")
    try:
        yield cache
    finally:
        await cache.aclose()


async def test_cache_aside_reads(store: ObjectStoreSummaryWriter, cache: RedisSummaryCache) -> None:
    reader = CachedSummaryReader(cache, store)
    assert await reader.read(THREAD, "bot") is None  # no summary: nothing cached
    assert await cache.get(THREAD, "bot") is None
    await store.write(THREAD, "bot", make(1), expected_version=None)  # behind the cache's back
    assert await reader.read(THREAD, "bot") == make(1)  # miss: from the store, then cached
    assert await cache.get(THREAD, "bot") == make(1)
    await cache.put(THREAD, "bot", make(1, "only in the cache"))  # same version: not replaced
    await cache.invalidate(THREAD, "bot")
    await cache.put(THREAD, "bot", make(1, "only in the cache"))
    assert (await reader.read(THREAD, "bot")) == make(1, "only in the cache")  # a hit: store not read


async def test_writes_go_through_the_cache(store: ObjectStoreSummaryWriter, cache: RedisSummaryCache) -> None:
    summaries = CachedSummaryWriter(cache, store)
    await summaries.write(THREAD, "bot", make(1), expected_version=None)
    assert await cache.get(THREAD, "bot") == make(1)
    assert await summaries.read(THREAD, "bot") == make(1)
    stale_read = await store.read(THREAD, "bot")  # a reader's slow store read, started now ...
    await summaries.write(THREAD, "bot", make(2), expected_version=1)
    assert stale_read is not None
    await cache.put(THREAD, "bot", stale_read)  # ... fills the cache after the write: refused
    assert await summaries.read(THREAD, "bot") == make(2)
    with pytest.raises(SummaryVersionConflict):
        await summaries.write(THREAD, "bot", make(2, "loser"), expected_version=1)
    assert await summaries.read(THREAD, "bot") == make(2)  # a conflict costs a miss, never a wrong hit


async def test_writer_dying_after_its_commit_leaves_no_stale_entry(
    store: ObjectStoreSummaryWriter, cache: RedisSummaryCache, tmp_path: Path
) -> None:
    summaries = CachedSummaryWriter(cache, store)
    await summaries.write(THREAD, "bot", make(1), expected_version=None)
    # the next write: invalidate, commit version 2 ... and the process dies before publishing/caching
    await cache.invalidate(THREAD, "bot")
    await obstore.put_async(
        open_object_store(f"file://{tmp_path / 'objects'}"),
        summary_version_key("test", "acme", "bot", "t1", 2),
        make(2).model_dump_json().encode(),
        mode="create",
    )
    assert await summaries.read(THREAD, "bot") == make(2)
    assert await cache.get(THREAD, "bot") == make(2)
    assert await summaries.current(THREAD, "bot") == make(2)


async def test_redis_down_reads_and_writes_stay_correct(
    store: ObjectStoreSummaryWriter, down_cache: RedisSummaryCache
) -> None:
    summaries = CachedSummaryWriter(down_cache, store)
    assert await summaries.read(THREAD, "bot") is None
    assert await summaries.write(THREAD, "bot", make(1), expected_version=None) == make(1)
    assert await summaries.read(THREAD, "bot") == make(1)
    assert await summaries.write(THREAD, "bot", make(2), expected_version=1) == make(2)
    assert await summaries.read(THREAD, "bot") == make(2)
    assert await summaries.current(THREAD, "bot") == make(2)


async def test_api_context_reads_summaries_through_the_cache(
    settings: Settings, journal: SlateJournal, pool: asyncpg.Pool
) -> None:
    deps = build_api_deps(settings, journal, pool)
    assert deps.summary_cache is not None  # settings.redis_url is set
    try:
        principal = Principal(account_id="acme", environment="test", key_id="k")
        await deps.threads.append(
            principal,
            "t1",
            agent_id="bot",
            user_id="u1",
            messages=[NewMessage(message_id="m0", role="user", content="hi")],
        )
        summaries = CachedSummaryWriter(deps.summary_cache, ObjectStoreSummaryWriter.from_settings(settings))
        await summaries.write(THREAD, "bot", make(1, "The user said hi."), expected_version=None)
        context = await deps.context_reader.get_context(principal, "t1")
        assert [m.content for m in context.messages] == [SUMMARY_PREFIX + "The user said hi.", "hi"]
        assert context.metadata.summary_version == 1
        assert await deps.summary_cache.get(THREAD, "bot") == make(1, "The user said hi.")
    finally:
        await deps.summary_cache.aclose()


async def test_api_without_redis_url_reads_the_store_directly(
    tmp_path: Path, journal: SlateJournal, pool: asyncpg.Pool, pg_dsn: str
) -> None:
    settings = Settings(data_dir=tmp_path / "data", environment="test", postgres_dsn=SecretStr(pg_dsn))
    assert build_api_deps(settings, journal, pool).summary_cache is None


async def test_versions_never_go_backwards_when_the_objects_are_lost(
    tmp_path: Path, store: ObjectStoreSummaryWriter, cache: RedisSummaryCache, pool: asyncpg.Pool
) -> None:
    floor = PostgresSummaryVersions(pool)
    summaries = MonotonicSummaryStore(CachedSummaryWriter(cache, store), floor)
    await summaries.write(THREAD, "bot", make(1), expected_version=None)
    await summaries.write(THREAD, "bot", make(2), expected_version=1)
    assert await floor.highest(THREAD, "bot") == 2
    shutil.rmtree(tmp_path / "objects")  # the summaries folder is deleted
    assert await summaries.current(THREAD, "bot") is None
    # a summarizer starting over from nothing proposes version 1: it is written as version 3
    written = await summaries.write(THREAD, "bot", make(1, "rebuilt"), expected_version=None)
    assert (written.version, written.content) == (3, "rebuilt")
    assert await store.read(THREAD, "bot") == written
    assert await cache.get(THREAD, "bot") == written  # not the v2 the cache held
    assert await floor.highest(THREAD, "bot") == 3
    # while nothing is lost, versions follow the store as before
    assert await summaries.write(THREAD, "bot", make(4), expected_version=3) == make(4)


async def test_the_cache_alone_also_keeps_versions_from_going_backwards(
    tmp_path: Path, store: ObjectStoreSummaryWriter, cache: RedisSummaryCache, pool: asyncpg.Pool
) -> None:
    await CachedSummaryWriter(cache, store).write(THREAD, "bot", make(1), expected_version=None)
    await CachedSummaryWriter(cache, store).write(THREAD, "bot", make(2), expected_version=1)
    shutil.rmtree(tmp_path / "objects")  # and Postgres never heard of v2 (written before it kept marks)
    summaries = MonotonicSummaryStore(CachedSummaryWriter(cache, store), PostgresSummaryVersions(pool))
    written = await summaries.write(THREAD, "bot", make(1, "rebuilt"), expected_version=None)
    assert written.version == 3
