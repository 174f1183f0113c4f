"""The summary interfaces' contract (`core.summaries.models`), on every implementation: the store
(`SummaryReader` + `SummaryWriter`: the in-memory fake, the object store on a local directory and
on S3), the cache (`SummaryCache`: the fake and Redis) and the version floor
(`SummaryVersionFloor`: the fake and Postgres). What only an adapter does (object layout and crash
repair, Redis keys and TTL, outages) is in `tests/sinks/<engine>/`."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from core.config import S3Settings
from core.journal.models import ThreadRef
from core.summaries.models import (
    Summary,
    SummaryCache,
    SummaryHistory,
    SummaryStore,
    SummaryVersionConflict,
    SummaryVersionFloor,
)
from sinks.objectstore.summaries import ObjectStoreSummaryWriter, open_object_store
from sinks.postgres.compactions import PostgresSummaryVersions
from sinks.redis.client import redis_client
from sinks.redis.summary_cache import RedisSummaryCache
from tests.fakes.summaries import InMemorySummaryCache, InMemorySummaryStore, InMemoryVersionFloor
from tests.summary_builders import THREAD, make

OTHERS = [
    (ThreadRef(environment="prod", account_id="acme", thread_id="t1"), "bot"),
    (ThreadRef(environment="test", account_id="globex", thread_id="t1"), "bot"),
    (ThreadRef(environment="test", account_id="acme", thread_id="t10"), "bot"),  # extends t1's id
    (THREAD, "other-bot"),
    (ThreadRef(environment="test", account_id="acme:bot", thread_id="t1"), "bot"),
]
"""Other threads than (THREAD, "bot"): another environment, account, thread, agent."""


@pytest.fixture(params=["memory", "local", pytest.param("s3", marks=pytest.mark.engine)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> SummaryStore:
    """The summary store under test, empty (s3: a moto server)."""
    if request.param == "memory":
        return InMemorySummaryStore()
    if request.param == "local":
        return ObjectStoreSummaryWriter(open_object_store(f"file://{tmp_path / 'objects'}"))
    bucket: str = request.getfixturevalue("s3_bucket")
    s3: S3Settings = request.getfixturevalue("s3_settings")
    return ObjectStoreSummaryWriter(open_object_store(f"s3://{bucket}/memstream", s3))


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.engine)])
async def cache(request: pytest.FixtureRequest) -> AsyncIterator[SummaryCache]:
    """The summary cache under test, empty (redis: the session's, on a namespace of its own)."""
    if request.param == "memory":
        yield InMemorySummaryCache()
        return
    client = redis_client(request.getfixturevalue("redis_url"))
    try:
        yield RedisSummaryCache(client, namespace=f"t{uuid.uuid4().hex[:12]}")
    finally:
        await client.aclose()


@pytest.fixture(params=["memory", pytest.param("postgres", marks=pytest.mark.engine)])
def floor(request: pytest.FixtureRequest) -> SummaryVersionFloor:
    """The version floor under test, empty."""
    if request.param == "memory":
        return InMemoryVersionFloor()
    return PostgresSummaryVersions(request.getfixturevalue("pool"))


# ---- the store ---------------------------------------------------------------------------------


async def test_first_write_then_updates(store: SummaryStore) -> None:
    assert await store.current(THREAD, "bot") is None
    assert await store.read(THREAD, "bot") is None
    assert await store.write(THREAD, "bot", make(1), expected_version=None) == make(1)
    assert await store.read(THREAD, "bot") == make(1)
    assert await store.write(THREAD, "bot", make(2), expected_version=1) == make(2)
    assert await store.read(THREAD, "bot") == make(2)
    assert await store.current(THREAD, "bot") == make(2)
    for thread, agent in OTHERS:
        assert await store.read(thread, agent) is None
        assert await store.current(thread, agent) is None


@pytest.mark.parametrize(
    ("expected", "version", "current"),
    [
        (None, 3, 2),  # a summary exists: "none yet" is stale
        (1, 2, 2),  # stale expected version
        (1, 3, 2),  # stale, skipping ahead
        (2, 2, 2),  # new version must be expected + 1
        (2, 4, 2),  # no gaps
        (5, 6, 2),  # expects a version that does not exist yet
    ],
)
async def test_conflicts_write_nothing(
    store: SummaryStore, expected: int | None, version: int, current: int
) -> None:
    await store.write(THREAD, "bot", make(1), expected_version=None)
    await store.write(THREAD, "bot", make(2), expected_version=1)
    with pytest.raises(SummaryVersionConflict, match="expected version") as caught:
        await store.write(THREAD, "bot", make(version, "rogue"), expected_version=expected)
    assert caught.value.current_version == current
    assert caught.value.code == "summary_version_conflict"
    assert await store.current(THREAD, "bot") == make(2)
    assert await store.read(THREAD, "bot") == make(2)


async def test_first_write_must_be_version_1(store: SummaryStore) -> None:
    with pytest.raises(SummaryVersionConflict) as caught:
        await store.write(THREAD, "bot", make(2), expected_version=None)
    assert caught.value.current_version is None
    assert await store.current(THREAD, "bot") is None


async def test_racing_writers_exactly_one_wins(store: SummaryStore) -> None:
    await store.write(THREAD, "bot", make(1), expected_version=None)

    async def attempt(i: int) -> Summary | SummaryVersionConflict:
        try:
            return await store.write(THREAD, "bot", make(2, f"writer {i}"), expected_version=1)
        except SummaryVersionConflict as exc:
            return exc

    results = await asyncio.gather(*(attempt(i) for i in range(10)))
    winners = [r for r in results if isinstance(r, Summary)]
    conflicts = [r for r in results if isinstance(r, SummaryVersionConflict)]
    assert len(winners) == 1 and len(conflicts) == 9
    assert all(c.current_version == 2 for c in conflicts)
    assert await store.current(THREAD, "bot") == winners[0]
    assert await store.read(THREAD, "bot") == winners[0]


async def test_racing_summarizers_make_one_linear_history(store: SummaryStore) -> None:
    """10 summarizers loop read-current -> write-next; every version is won by exactly one."""
    won: dict[int, str] = {}
    seen_by_reader: list[int] = []

    async def summarizer(name: str) -> None:
        while True:
            current = await store.current(THREAD, "bot")
            version = current.version if current is not None else None
            new = make((version or 0) + 1, name)
            try:
                await store.write(THREAD, "bot", new, expected_version=version)
            except SummaryVersionConflict:
                continue
            assert new.version not in won, f"version {new.version} won twice"
            won[new.version] = name
            return

    async def watcher(stop: asyncio.Event) -> None:
        while not stop.is_set():
            summary = await store.read(THREAD, "bot")
            if summary is not None:
                seen_by_reader.append(summary.version)
            await asyncio.sleep(0)

    stop = asyncio.Event()
    watch = asyncio.create_task(watcher(stop))
    await asyncio.gather(*(summarizer(f"s{i}") for i in range(10)))
    stop.set()
    await watch
    assert sorted(won) == list(range(1, 11))
    assert seen_by_reader, "the reader ran alongside"
    assert seen_by_reader == sorted(seen_by_reader), "a reader saw the version go backwards"
    latest = await store.read(THREAD, "bot")
    assert latest is not None and latest.version == 10 and latest.content == won[10]


async def test_retrying_the_same_write_is_idempotent(store: SummaryStore) -> None:
    await store.write(THREAD, "bot", make(1), expected_version=None)
    # the response of a successful write was lost: the caller sends the very same write again
    assert await store.write(THREAD, "bot", make(1), expected_version=None) == make(1)
    await store.write(THREAD, "bot", make(2), expected_version=1)
    assert await store.write(THREAD, "bot", make(2), expected_version=1) == make(2)
    with pytest.raises(SummaryVersionConflict):  # same version, other content: a different write
        await store.write(THREAD, "bot", make(2, "other"), expected_version=1)
    assert await store.current(THREAD, "bot") == make(2)


async def test_after_its_summaries_were_lost_a_thread_continues_above_the_floor(store: SummaryStore) -> None:
    # versions 1 and 2 were written, then the thread's summaries were lost: the store shows none
    with pytest.raises(SummaryVersionConflict, match=r"must be 3"):
        await store.write(THREAD, "bot", make(1), expected_version=None, floor=2)  # would reuse v1
    with pytest.raises(SummaryVersionConflict, match=r"must be 3"):
        await store.write(THREAD, "bot", make(4), expected_version=None, floor=2)
    assert await store.current(THREAD, "bot") is None
    await store.write(THREAD, "bot", make(3), expected_version=None, floor=2)
    assert await store.read(THREAD, "bot") == make(3)
    assert await store.current(THREAD, "bot") == make(3)
    # from there on, as usual: the floor is below the stored version and changes nothing
    await store.write(THREAD, "bot", make(4), expected_version=3, floor=2)
    assert await store.read(THREAD, "bot") == make(4)


async def test_the_version_in_force_at_a_point_of_the_thread(store: SummaryStore) -> None:
    """`as_of`: the highest version covering no message after the offset and written before the
    next message (versions 1..7 cover offsets up to 10..70, written at 10:00:01..07)."""
    assert isinstance(store, SummaryHistory)
    assert await store.as_of(THREAD, "bot", last_offset=100, written_before=None) is None
    for version in range(1, 8):
        await store.write(THREAD, "bot", make(version), expected_version=version - 1 or None)
    at = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
    assert await store.as_of(THREAD, "bot", last_offset=35, written_before=None) == make(3)
    assert await store.as_of(THREAD, "bot", last_offset=70, written_before=None) == make(7)
    assert await store.as_of(
        THREAD, "bot", last_offset=1000, written_before=at + timedelta(seconds=5)
    ) == make(4)
    assert await store.as_of(THREAD, "bot", last_offset=25, written_before=at + timedelta(seconds=5)) == make(
        2
    )
    assert await store.as_of(THREAD, "bot", last_offset=9, written_before=None) is None
    assert (
        await store.as_of(THREAD, "bot", last_offset=1000, written_before=at + timedelta(seconds=1)) is None
    )
    for thread, agent in OTHERS:
        assert await store.as_of(thread, agent, last_offset=1000, written_before=None) is None


# ---- the cache ---------------------------------------------------------------------------------


async def test_cache_miss_put_hit(cache: SummaryCache) -> None:
    assert await cache.get(THREAD, "bot") is None
    await cache.put(THREAD, "bot", make(1))
    assert await cache.get(THREAD, "bot") == make(1)


async def test_cache_never_goes_back_to_an_older_version(cache: SummaryCache) -> None:
    await cache.put(THREAD, "bot", make(3))
    await cache.put(THREAD, "bot", make(2))  # a slow cache-aside fill of an older read
    await cache.put(THREAD, "bot", make(3, "same version, other text"))
    assert await cache.get(THREAD, "bot") == make(3)
    await cache.put(THREAD, "bot", make(4))
    assert await cache.get(THREAD, "bot") == make(4)
    await cache.invalidate(THREAD, "bot")
    assert await cache.get(THREAD, "bot") is None


async def test_cache_entries_are_per_thread_and_agent(cache: SummaryCache) -> None:
    await cache.put(THREAD, "bot", make(1))
    for thread, agent in OTHERS:
        assert await cache.get(thread, agent) is None


# ---- the version floor -------------------------------------------------------------------------


async def test_the_summary_version_mark_only_rises(floor: SummaryVersionFloor) -> None:
    thread = ThreadRef(environment="test", account_id="acme", thread_id="th-1")
    assert await floor.highest(thread, "bot") == 0
    await floor.record(thread, "bot", 2)
    await floor.record(thread, "bot", 1)
    assert await floor.highest(thread, "bot") == 2
    await floor.record(thread, "bot", 3)
    assert await floor.highest(thread, "bot") == 3
    assert await floor.highest(thread, "other-bot") == 0
    other = ThreadRef(environment="test", account_id="globex", thread_id="th-1")
    assert await floor.highest(other, "bot") == 0
