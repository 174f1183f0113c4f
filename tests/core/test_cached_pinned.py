"""`core.cached_pinned.CachedPinnedFacts` over the in-memory memory store: hits, TTL, tenancy (the
scope is the key), writes made through this node's `MemoryService` and notices from the change feed
evict, an expired fact is never served, bypass while the feed is down. Against Postgres and its
feed: `tests/sinks/postgres/test_invalidation.py`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import timedelta

import pytest

from core.cached_pinned import CachedPinnedFacts
from core.invalidated_cache import InvalidatedCache
from core.memory.models import MemoryEntry, MemoryScope
from core.memory.pinned import MemoryPinnedFacts
from core.memory.service import MemoryService
from tests.core.memory.helpers import FakeClock, scope
from tests.core.ticks import Ticks
from tests.fakes.memory import InMemoryMemoryStore

pytestmark = pytest.mark.unit


class CountingPinned(MemoryPinnedFacts):
    def __init__(self, service: MemoryService, clock: FakeClock) -> None:
        super().__init__(service, clock)
        self.reads = 0

    async def pinned_entries(self, scope: MemoryScope) -> list[MemoryEntry]:
        self.reads += 1
        return await super().pinned_entries(scope)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def ticks() -> Ticks:
    return Ticks()


@pytest.fixture
def service(clock: FakeClock) -> MemoryService:
    return MemoryService(InMemoryMemoryStore(), clock)


@pytest.fixture
def source(service: MemoryService, clock: FakeClock) -> CountingPinned:
    return CountingPinned(service, clock)


@pytest.fixture
def cached(
    service: MemoryService, source: CountingPinned, clock: FakeClock, ticks: Ticks
) -> CachedPinnedFacts:
    pinned = CachedPinnedFacts(source, ttl_s=5, clock=clock, cache=InvalidatedCache(clock=ticks))
    pinned.set_live(True)
    service.listen(pinned.changed)
    return pinned


async def profile(service: MemoryService, key: str, content: str, user: str = "alice", **kw: object) -> None:
    await service.store(
        scope(user),
        key,
        content,
        "user_profile",
        scope_visibility="private",
        importance=0.9,
        **kw,  # type: ignore[arg-type]
    )


def contents(facts: Sequence[object]) -> list[str]:
    return [f.content for f in facts]  # type: ignore[attr-defined]


async def test_a_hit_does_not_reach_the_store_until_the_ttl(
    cached: CachedPinnedFacts, service: MemoryService, source: CountingPinned, ticks: Ticks
) -> None:
    await profile(service, "diet", "Alice is vegetarian.")
    assert contents(await cached.pinned(scope())) == ["Alice is vegetarian."]
    assert contents(await cached.pinned(scope())) == ["Alice is vegetarian."]
    assert source.reads == 1
    ticks.now = 5.1
    await cached.pinned(scope())
    assert source.reads == 2


async def test_each_scope_sees_only_its_own_facts(cached: CachedPinnedFacts, service: MemoryService) -> None:
    await profile(service, "diet", "Alice is vegetarian.")
    await profile(service, "diet", "Bob eats fish.", user="bob")
    assert contents(await cached.pinned(scope("alice"))) == ["Alice is vegetarian."]
    assert contents(await cached.pinned(scope("bob"))) == ["Bob eats fish."]
    for other in (
        scope("alice", account="globex"),
        scope("alice", agent="other"),
        scope("alice", env="prod"),
    ):
        assert await cached.pinned(other) == []
    assert await cached.pinned(scope(None)) == []


async def test_writes_made_here_show_at_once(cached: CachedPinnedFacts, service: MemoryService) -> None:
    assert await cached.pinned(scope()) == []
    await profile(service, "diet", "Alice is vegetarian.")
    assert contents(await cached.pinned(scope())) == ["Alice is vegetarian."]
    await profile(service, "diet", "Alice is vegan.")
    assert contents(await cached.pinned(scope())) == ["Alice is vegan."]
    await service.forget(scope(), "diet")
    assert await cached.pinned(scope()) == []


async def test_a_notice_evicts_only_its_scope(
    cached: CachedPinnedFacts, service: MemoryService, source: CountingPinned
) -> None:
    await cached.pinned(scope("alice"))
    await cached.pinned(scope("bob"))
    assert source.reads == 2
    cached.invalidated(json.dumps(["test", "acme", "bot", "alice"]))
    await cached.pinned(scope("alice"))
    await cached.pinned(scope("bob"))
    assert source.reads == 3


@pytest.mark.parametrize("payload", ["*", "not json", '["test", "acme"]', "[1, 2, 3, 4]"])
async def test_a_notice_that_is_not_a_scope_forgets_every_scope(
    cached: CachedPinnedFacts, source: CountingPinned, payload: str
) -> None:
    await cached.pinned(scope("alice"))
    await cached.pinned(scope("bob"))
    cached.invalidated(payload)
    await cached.pinned(scope("alice"))
    await cached.pinned(scope("bob"))
    assert source.reads == 4


async def test_an_expired_fact_is_never_served(
    cached: CachedPinnedFacts, service: MemoryService, clock: FakeClock
) -> None:
    await profile(
        service, "trip", "Alice is in Lisbon this week.", expires_at=clock.now + timedelta(seconds=2)
    )
    await profile(service, "diet", "Alice is vegetarian.")
    assert sorted(contents(await cached.pinned(scope()))) == [
        "Alice is in Lisbon this week.",
        "Alice is vegetarian.",
    ]
    clock.advance(seconds=3)  # the cache's own TTL (5 s of its clock) has not run out
    assert contents(await cached.pinned(scope())) == ["Alice is vegetarian."]


async def test_the_store_answers_while_the_feed_is_down(
    cached: CachedPinnedFacts, source: CountingPinned
) -> None:
    cached.set_live(False)
    await cached.pinned(scope())
    await cached.pinned(scope())
    assert source.reads == 2


async def test_a_change_during_a_read_is_not_overwritten_by_the_older_value(
    cached: CachedPinnedFacts, service: MemoryService, source: CountingPinned
) -> None:
    real = source.pinned_entries

    async def racing(s: MemoryScope) -> list[MemoryEntry]:
        found = await real(s)
        cached.invalidated(json.dumps(["test", "acme", "bot", "alice"]))  # a notice arrives meanwhile
        return found

    source.pinned_entries = racing  # type: ignore[method-assign]
    await cached.pinned(scope())
    source.pinned_entries = real  # type: ignore[method-assign]
    await cached.pinned(scope())
    assert source.reads == 2  # the first read was not kept
