"""`core.cached_threads.CachedThreads` over the in-memory store: hits, TTL, tenancy (the scope is
the key), local writes and notices from the change feed evict, bypass while the feed is down.
Against Postgres and its feed: `tests/sinks/postgres/test_invalidation.py`."""

from __future__ import annotations

import json

import pytest

from core.auth import Principal
from core.cached_threads import CachedThreads
from core.errors import NotFound
from core.invalidated_cache import InvalidatedCache
from core.threads import Thread, ThreadService
from tests.fakes.journal import InMemoryJournal
from tests.fakes.threads import InMemoryThreadStore

ACME = Principal(account_id="acme", environment="test", key_id="key_a")
GLOBEX = Principal(account_id="globex", environment="test", key_id="key_g")
ACME_PROD = Principal(account_id="acme", environment="prod", key_id="key_p")
WINDOW_3 = {"config": {"max_working_memory_messages": 3}}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class CountingThreads(InMemoryThreadStore):
    def __init__(self) -> None:
        super().__init__()
        self.gets = 0

    async def get(self, environment: str, account_id: str, thread_id: str) -> Thread | None:
        self.gets += 1
        return await super().get(environment, account_id, thread_id)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store() -> CountingThreads:
    return CountingThreads()


@pytest.fixture
def cached(store: CountingThreads, clock: Clock) -> CachedThreads:
    threads = CachedThreads(store, ttl_s=5, cache=InvalidatedCache(clock=clock))
    threads.set_live(True)
    return threads


@pytest.fixture
def service(cached: CachedThreads) -> ThreadService:
    return ThreadService(cached, InMemoryJournal())


async def test_a_hit_does_not_reach_the_store_until_the_ttl(
    service: ThreadService, store: CountingThreads, clock: Clock
) -> None:
    await service.put(ACME, "t1", agent_id="bot", user_id=None, metadata={})
    for _ in range(3):
        assert (await service.get(ACME, "t1")).agent_id == "bot"
    assert store.gets == 1
    clock.now += 5
    await service.get(ACME, "t1")
    assert store.gets == 2


async def test_another_account_or_environment_never_sees_a_cached_thread(
    service: ThreadService, store: CountingThreads
) -> None:
    await service.put(ACME, "t1", agent_id="bot", user_id=None, metadata={"mine": 1})
    await service.get(ACME, "t1")
    for other in (GLOBEX, ACME_PROD):
        with pytest.raises(NotFound):
            await service.get(other, "t1")
        await service.put(other, "t1", agent_id="their-bot", user_id=None, metadata={})
        assert (await service.get(other, "t1")).agent_id == "their-bot"
    assert (await service.get(ACME, "t1")).metadata == {"mine": 1}


async def test_a_missing_thread_is_not_cached(service: ThreadService, store: CountingThreads) -> None:
    with pytest.raises(NotFound):
        await service.get(ACME, "t1")
    await store.upsert("test", "acme", "t1", "bot", None, {})  # another node creates it
    assert (await service.get(ACME, "t1")).agent_id == "bot"


async def test_writes_here_show_at_once(service: ThreadService) -> None:
    await service.put(ACME, "t1", agent_id="bot", user_id=None, metadata={})
    assert (await service.get(ACME, "t1")).window_size == 20
    await service.patch_metadata(ACME, "t1", WINDOW_3)
    assert (await service.get(ACME, "t1")).window_size == 3
    await service.put(ACME, "t1", agent_id="bot", user_id=None, metadata={})
    assert (await service.get(ACME, "t1")).window_size == 20


async def test_a_notice_evicts_a_thread_changed_elsewhere(
    service: ThreadService, store: CountingThreads, cached: CachedThreads
) -> None:
    await service.put(ACME, "t1", agent_id="bot", user_id=None, metadata={})
    await service.get(ACME, "t1")
    await store.update_metadata("test", "acme", "t1", lambda _: WINDOW_3)  # another node
    assert (await service.get(ACME, "t1")).window_size == 20  # cached until the notice
    cached.invalidated(json.dumps(["test", "globex", "t1"]))  # another account's thread
    assert (await service.get(ACME, "t1")).window_size == 20
    cached.invalidated(json.dumps(["test", "acme", "t1"]))
    assert (await service.get(ACME, "t1")).window_size == 3


@pytest.mark.parametrize("payload", ["*", "not json", "[1, 2, 3]", '["test", "acme"]'])
async def test_a_notice_that_is_not_a_scope_forgets_every_thread(
    service: ThreadService, store: CountingThreads, cached: CachedThreads, payload: str
) -> None:
    await service.put(ACME, "t1", agent_id="bot", user_id=None, metadata={})
    await service.get(ACME, "t1")
    cached.invalidated(payload)
    await service.get(ACME, "t1")
    assert store.gets == 2


async def test_the_store_answers_while_the_feed_is_down(
    service: ThreadService, store: CountingThreads, cached: CachedThreads
) -> None:
    await service.put(ACME, "t1", agent_id="bot", user_id=None, metadata={})
    await service.get(ACME, "t1")
    cached.set_live(False)
    await store.update_metadata("test", "acme", "t1", lambda _: WINDOW_3)
    assert (await service.get(ACME, "t1")).window_size == 3
    await service.get(ACME, "t1")
    assert store.gets == 3
