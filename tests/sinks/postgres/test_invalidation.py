"""The cache change feed (`sinks.postgres.invalidation`) and the caches it feeds, on the real
embedded Postgres: an API key revoked on another node (another pool and store) is refused once the
NOTIFY arrives, one revoked on this node at once (`core.cached_api_keys`); likewise a thread's
context window (`core.cached_threads`), a user's pinned facts (`core.cached_pinned`) and an
agent's bindings (`core.cached_agents`), changed on another node or on this one; a thread's summary
(`core.cached_summaries`) once the summarizer raises its version mark; the feed notices a lost
connection (the cache is bypassed) and listens again."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import asyncpg
import pytest

from core.auth import issue_key, revoke_key, verify
from core.cached_agents import CachedAgents
from core.cached_api_keys import CachedApiKeys
from core.cached_pinned import CachedPinnedFacts
from core.cached_summaries import CachedSummaries
from core.cached_threads import CachedThreads
from core.errors import Unauthorized
from core.journal.models import ThreadRef
from core.memory.models import MemoryScope
from core.memory.pinned import MemoryPinnedFacts
from core.memory.service import MemoryService
from core.stores.thresholds import ThreadScope
from core.summaries.models import Summary
from sinks.postgres.agents import PostgresAgents
from sinks.postgres.api_keys import PostgresApiKeys
from sinks.postgres.compactions import PostgresCompactions, PostgresSummaryVersions
from sinks.postgres.invalidation import (
    AGENTS_CHANNEL,
    API_KEYS_CHANNEL,
    PINNED_CHANNEL,
    SUMMARIES_CHANNEL,
    THREADS_CHANNEL,
    Feed,
    PostgresInvalidations,
)
from sinks.postgres.memory import PostgresMemoryStore
from sinks.postgres.pool import create_pool
from sinks.postgres.threads import PostgresThreadStore


@pytest.fixture
async def other_node(pool: asyncpg.Pool, pg_dsn: str) -> AsyncIterator[PostgresApiKeys]:
    """The key store of another node: its own pool on the same database."""
    other = await create_pool(pg_dsn, min_size=1, max_size=2)
    try:
        yield PostgresApiKeys(other)
    finally:
        await other.close()


@pytest.fixture
async def feed(pool: asyncpg.Pool) -> AsyncIterator[tuple[CachedApiKeys, PostgresInvalidations]]:
    """This node's cached keys (a TTL far beyond the test: only notices evict) and its feed, live."""
    keys = CachedApiKeys(PostgresApiKeys(pool), ttl_s=600)
    invalidations = PostgresInvalidations(pool, ping_s=0.2, retry_s=0.1)
    invalidations.subscribe(API_KEYS_CHANNEL, keys)
    stop = asyncio.Event()
    task = asyncio.create_task(invalidations.run(stop))
    await asyncio.wait_for(invalidations.live.wait(), 10)
    try:
        yield keys, invalidations
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


@contextlib.asynccontextmanager
async def listening(pool: asyncpg.Pool, channel: str, *feeds: Feed) -> AsyncIterator[PostgresInvalidations]:
    """A change feed delivering `channel` to `feeds`, live for the block."""
    invalidations = PostgresInvalidations(pool, ping_s=0.2)
    for one in feeds:
        invalidations.subscribe(channel, one)
    stop = asyncio.Event()
    task = asyncio.create_task(invalidations.run(stop))
    await asyncio.wait_for(invalidations.live.wait(), 10)
    try:
        yield invalidations
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


@pytest.fixture
async def another_pool(pg_dsn: str) -> AsyncIterator[asyncpg.Pool]:
    """Another node's (or process's) pool on the same database."""
    other = await create_pool(pg_dsn, min_size=1, max_size=2)
    try:
        yield other
    finally:
        await other.close()


def keys_hash(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


async def refused_within(keys: CachedApiKeys, key: str, bound_s: float) -> float:
    """Seconds until `key` is refused as revoked (failing after `bound_s`)."""
    start = time.monotonic()
    while True:
        try:
            await verify(keys, key, "test")
        except Unauthorized as exc:
            assert "was revoked" in str(exc)
            return time.monotonic() - start
        assert time.monotonic() - start < bound_s, f"key still accepted after {bound_s}s"
        await asyncio.sleep(0.01)


async def test_a_key_revoked_on_another_node_is_refused_once_announced(
    feed: tuple[CachedApiKeys, PostgresInvalidations], other_node: PostgresApiKeys
) -> None:
    keys, _ = feed
    key = await issue_key(other_node, "acme", "test")
    principal = await verify(keys, key, "test")
    deadline = time.monotonic() + 2.0
    while keys.cache.get(keys_hash(key)) is None:  # the insert's own notice may evict it once
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
        await verify(keys, key, "test")
    await revoke_key(other_node, "acme", "test", principal.key_id)
    assert await refused_within(keys, key, 2.0) < 2.0


async def test_a_key_revoked_on_this_node_is_refused_at_once(
    feed: tuple[CachedApiKeys, PostgresInvalidations],
) -> None:
    keys, _ = feed
    key = await issue_key(keys, "acme", "test")
    principal = await verify(keys, key, "test")
    await revoke_key(keys, "acme", "test", principal.key_id)
    with pytest.raises(Unauthorized, match="was revoked"):
        await verify(keys, key, "test")


async def test_a_key_created_on_another_node_after_a_miss_is_accepted(
    feed: tuple[CachedApiKeys, PostgresInvalidations], pool: asyncpg.Pool, other_node: PostgresApiKeys
) -> None:
    keys, _ = feed
    hashed = keys_hash("msk_" + "k" * 43)
    assert await keys.find_by_hash(hashed, environment="test") is None  # cached "no such key"
    await other_node.insert(
        key_id="key_1", environment="test", account_id="acme", key_hash=hashed, prefix="p", label=""
    )
    deadline = time.monotonic() + 2.0
    while await keys.find_by_hash(hashed, environment="test") is None:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)


async def test_a_lost_feed_bypasses_the_cache_until_it_listens_again(
    feed: tuple[CachedApiKeys, PostgresInvalidations], pool: asyncpg.Pool, other_node: PostgresApiKeys
) -> None:
    keys, invalidations = feed
    key = await issue_key(keys, "acme", "test")
    await verify(keys, key, "test")
    killed = await pool.fetchval(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid() "
        "AND (query LIKE 'LISTEN%' OR query = 'SELECT 1')"  # the feed's last statements
    )
    assert killed >= 1
    deadline = time.monotonic() + 5.0
    while invalidations.live.is_set():  # noticed by the next ping
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
    assert not keys.cache.live and len(keys.cache) == 0
    await asyncio.wait_for(invalidations.live.wait(), 5.0)  # and listening again
    principal = await verify(keys, key, "test")
    await revoke_key(other_node, "acme", "test", principal.key_id)
    await refused_within(keys, key, 2.0)


async def test_the_feed_gives_back_a_connection_that_listens_to_nothing(pool: asyncpg.Pool) -> None:
    keys = CachedApiKeys(PostgresApiKeys(pool))
    invalidations = PostgresInvalidations(pool, ping_s=0.1)
    invalidations.subscribe(API_KEYS_CHANNEL, keys)
    stop = asyncio.Event()
    task = asyncio.create_task(invalidations.run(stop))
    await asyncio.wait_for(invalidations.live.wait(), 10)
    stop.set()
    await asyncio.wait_for(task, 10)
    assert not keys.cache.live
    for _ in range(pool.get_size()):
        async with pool.acquire() as conn:
            assert await conn.fetch("SELECT pg_listening_channels()") == []


async def test_the_feed_stops_while_waiting_for_a_connection(pool: asyncpg.Pool) -> None:
    feed = PostgresInvalidations(pool)
    feed.subscribe(API_KEYS_CHANNEL, CachedApiKeys(PostgresApiKeys(pool)))
    taken = [await pool.acquire() for _ in range(pool.get_max_size())]  # the pool is exhausted
    try:
        stop = asyncio.Event()
        task = asyncio.create_task(feed.run(stop))
        await asyncio.sleep(0.2)
        assert not feed.live.is_set()
        stop.set()
        await asyncio.wait_for(task, 5)
    finally:
        for conn in taken:
            await pool.release(conn)


@pytest.fixture
async def threads(pool: asyncpg.Pool) -> AsyncIterator[CachedThreads]:
    """This node's cached threads (a TTL far beyond the test: only notices evict), its feed live."""
    cached = CachedThreads(PostgresThreadStore(pool), ttl_s=600)
    async with listening(pool, THREADS_CHANNEL, cached):
        yield cached


async def window_within(threads: CachedThreads, account_id: str, window: int, bound_s: float) -> None:
    deadline = time.monotonic() + bound_s
    while True:
        thread = await threads.get("test", account_id, "t1")
        assert thread is not None
        if thread.window_size == window:
            return
        assert time.monotonic() < deadline, f"window still {thread.window_size} after {bound_s}s"
        await asyncio.sleep(0.01)


async def test_a_thread_changed_on_another_node_shows_once_announced(
    threads: CachedThreads, pg_dsn: str
) -> None:
    other_pool = await create_pool(pg_dsn, min_size=1, max_size=2)
    try:
        other = PostgresThreadStore(other_pool)  # another node
        for account in ("acme", "globex"):
            await other.upsert("test", account, "t1", "bot", None, {})
            await window_within(threads, account, 20, 2.0)
        scope = ("test", "acme", "t1")
        deadline = time.monotonic() + 2.0
        while threads.cache.get(scope) is None:  # cached (once the upserts' own notices are in)
            assert time.monotonic() < deadline
            await threads.get(*scope)
            await asyncio.sleep(0.01)
        await other.update_metadata(
            "test", "acme", "t1", lambda _: {"config": {"max_working_memory_messages": 2}}
        )
        await window_within(threads, "acme", 2, 2.0)
        await window_within(threads, "globex", 20, 0.0)  # another account's thread of the same id
        await other.upsert("test", "acme", "t1", "bot", None, {})  # PUT: the window back to 20
        await window_within(threads, "acme", 20, 2.0)
    finally:
        await other_pool.close()


async def test_a_thread_changed_on_this_node_shows_at_once(threads: CachedThreads) -> None:
    await threads.upsert("test", "acme", "t1", "bot", None, {})
    await window_within(threads, "acme", 20, 0.0)
    await threads.update_metadata(
        "test", "acme", "t1", lambda _: {"config": {"max_working_memory_messages": 2}}
    )
    await window_within(threads, "acme", 2, 0.0)


class Notices:
    """A feed that only records the payloads it receives."""

    def __init__(self) -> None:
        self.payloads: list[str] = []

    def invalidated(self, payload: str) -> None:
        self.payloads.append(payload)

    def set_live(self, live: bool) -> None:
        return None


@pytest.fixture
async def pinned(pool: asyncpg.Pool) -> AsyncIterator[tuple[CachedPinnedFacts, MemoryService, Notices]]:
    """This node's cached pinned facts (a TTL far beyond the test: only notices evict), its memory
    service (evicting at once), and every notice of the feed, live."""
    service = MemoryService(PostgresMemoryStore(pool))
    cached = CachedPinnedFacts(MemoryPinnedFacts(service), ttl_s=600)
    service.listen(cached.changed)
    notices = Notices()
    async with listening(pool, PINNED_CHANNEL, cached, notices):
        yield cached, service, notices


ALICE = MemoryScope(environment="test", account_id="acme", agent_id="bot", user_id="alice")


async def pinned_within(cached: CachedPinnedFacts, wanted: list[str], bound_s: float) -> None:
    deadline = time.monotonic() + bound_s
    while True:
        facts = [fact.content for fact in await cached.pinned(ALICE)]
        if facts == wanted:
            return
        assert time.monotonic() < deadline, f"pinned facts still {facts} after {bound_s}s"
        await asyncio.sleep(0.01)


async def test_pinned_facts_changed_on_another_node_show_once_announced(
    pinned: tuple[CachedPinnedFacts, MemoryService, Notices], another_pool: asyncpg.Pool
) -> None:
    cached, _, notices = pinned
    other = MemoryService(PostgresMemoryStore(another_pool))  # another node (or the worker's flush)
    await pinned_within(cached, [], 0.0)
    stored = await other.store(
        ALICE, "diet", "Alice is vegetarian.", "user_profile", scope_visibility="private", importance=0.9
    )
    await pinned_within(cached, ["Alice is vegetarian."], 2.0)
    await other.edit(ALICE, stored.entry.entry_id, importance=0.2)  # below the pinning bar
    await pinned_within(cached, [], 2.0)
    await other.edit(ALICE, stored.entry.entry_id, importance=0.9)
    await pinned_within(cached, ["Alice is vegetarian."], 2.0)
    await other.forget(ALICE, "diet")
    await pinned_within(cached, [], 2.0)
    assert set(notices.payloads) == {'["test", "acme", "bot", "alice"]'}
    # neither another category nor the recall counters are announced
    profile = await other.store(
        ALICE, "city", "Alice lives in Porto.", "user_profile", scope_visibility="private", importance=0.9
    )
    await pinned_within(cached, ["Alice lives in Porto."], 2.0)
    before = len(notices.payloads)
    fact = await other.store(
        ALICE, "repo", "The repo is on GitHub.", "project_fact", scope_visibility="shared"
    )
    await other.record_recall(ALICE, [profile.entry.entry_id, fact.entry.entry_id])
    await asyncio.sleep(0.3)
    assert len(notices.payloads) == before


async def test_pinned_facts_changed_on_this_node_show_at_once(
    pinned: tuple[CachedPinnedFacts, MemoryService, Notices],
) -> None:
    cached, service, _ = pinned
    await pinned_within(cached, [], 0.0)
    await service.store(
        ALICE, "diet", "Alice is vegetarian.", "user_profile", scope_visibility="private", importance=0.9
    )
    await pinned_within(cached, ["Alice is vegetarian."], 0.0)
    await service.forget(ALICE, "diet")
    await pinned_within(cached, [], 0.0)


class StoredSummaries:
    """A summary reader over a dict (the object store and Redis are not what this tests)."""

    def __init__(self) -> None:
        self.versions: dict[str, int] = {}

    async def read(self, thread: ThreadRef, agent_id: str) -> Summary | None:
        version = self.versions.get(thread.thread_id)
        if version is None:
            return None
        return Summary(
            version=version,
            timestamp=datetime.now(UTC),
            last_message_offset=version,
            last_message_id=f"m{version}",
            content=f"v{version}",
            token_count=1,
            message_count=version,
        )


async def test_a_summary_written_by_another_process_shows_once_its_version_is_announced(
    pool: asyncpg.Pool, another_pool: asyncpg.Pool
) -> None:
    stored = StoredSummaries()
    cached = CachedSummaries(stored, ttl_s=600)
    notices = Notices()
    t1 = ThreadRef(environment="test", account_id="acme", thread_id="t1")

    async def version_within(wanted: int | None, bound_s: float) -> None:
        deadline = time.monotonic() + bound_s
        while True:
            found = await cached.read(t1, "bot")
            if (found.version if found is not None else None) == wanted:
                return
            assert time.monotonic() < deadline, f"summary still {found} after {bound_s}s"
            await asyncio.sleep(0.01)

    async with listening(pool, SUMMARIES_CHANNEL, cached, notices):
        # the summarizer's process
        versions, ledger = PostgresSummaryVersions(another_pool), PostgresCompactions(another_pool)
        scope = ThreadScope(environment="test", account_id="acme", agent_id="bot", thread_id="t1")
        await ledger.record_requests([(scope, {"to_offset": 49})])  # a compaction request: no notice
        await version_within(None, 0.0)  # "none yet" is cached
        for version in (1, 2):
            stored.versions["t1"] = version  # the summary is durable, then its mark is raised
            await versions.record(t1, "bot", version)
            await version_within(version, 2.0)
        await versions.record(t1, "bot", 1)  # a lower mark changes nothing: no notice
        await ledger.record_requests([(scope, {"to_offset": 99})])
        await asyncio.sleep(0.3)
        assert notices.payloads == ['["test", "acme", "bot", "t1"]'] * 2


async def test_bindings_changed_on_another_node_show_once_announced(
    pool: asyncpg.Pool, another_pool: asyncpg.Pool
) -> None:
    cached = CachedAgents(PostgresAgents(pool), ttl_s=600)

    async def bound_within(wanted: set[str], bound_s: float) -> None:
        deadline = time.monotonic() + bound_s
        while True:
            record = await cached.get("test", "acme", "bot")
            found = set(record.capabilities) if record is not None else set()
            if found == wanted:
                return
            assert time.monotonic() < deadline, f"bindings still {found} after {bound_s}s"
            await asyncio.sleep(0.01)

    async with listening(pool, AGENTS_CHANNEL, cached):
        other = PostgresAgents(another_pool)  # another node
        await bound_within(set(), 0.0)  # "no bindings" is cached
        await other.upsert_capabilities("test", "acme", "bot", ["memory"])  # an insert
        await bound_within({"memory"}, 2.0)
        await other.upsert_capabilities("test", "acme", "bot", [])  # an update: memory unbound
        await bound_within(set(), 2.0)
        await cached.upsert_capabilities("test", "acme", "bot", ["memory"])  # this node: at once
        await bound_within({"memory"}, 0.0)
