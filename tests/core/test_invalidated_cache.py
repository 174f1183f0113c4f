"""`core.invalidated_cache.InvalidatedCache`: served only while live, TTL, evictions, tickets, change
notices naming a scope, read-through."""

from __future__ import annotations

import pytest

from core.invalidated_cache import InvalidatedCache, notice_scope


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def cache(clock: Clock) -> InvalidatedCache[str, int]:
    cache: InvalidatedCache[str, int] = InvalidatedCache(max_entries=3, clock=clock)
    cache.set_live(True)
    return cache


def test_a_put_value_is_served_until_its_ttl(cache: InvalidatedCache[str, int], clock: Clock) -> None:
    assert cache.get("a") is None
    assert cache.put("a", 1, ticket=cache.ticket(), ttl_s=5)
    entry = cache.get("a")
    assert entry is not None and entry.value == 1
    clock.now += 4.9
    assert cache.get("a") is not None
    clock.now += 0.1
    assert cache.get("a") is None
    assert len(cache) == 0


def test_nothing_is_served_or_kept_while_down(cache: InvalidatedCache[str, int]) -> None:
    cache.put("a", 1, ticket=cache.ticket(), ttl_s=5)
    cache.set_live(False)
    assert cache.get("a") is None and len(cache) == 0
    assert not cache.put("a", 1, ticket=cache.ticket(), ttl_s=5)
    cache.set_live(True)
    assert cache.get("a") is None  # going live starts empty


def test_an_eviction_forgets_the_key_and_refuses_reads_begun_before_it(
    cache: InvalidatedCache[str, int],
) -> None:
    cache.put("a", 1, ticket=cache.ticket(), ttl_s=5)
    cache.put("b", 2, ticket=cache.ticket(), ttl_s=5)
    in_flight = cache.ticket()
    cache.evict("a")
    assert cache.get("a") is None
    assert cache.get("b") is not None
    assert not cache.put("a", 1, ticket=in_flight, ttl_s=5)  # read before the change was announced
    assert cache.put("a", 3, ticket=cache.ticket(), ttl_s=5)


def test_a_transition_refuses_reads_begun_before_it(cache: InvalidatedCache[str, int]) -> None:
    in_flight = cache.ticket()
    cache.set_live(False)
    cache.set_live(True)
    assert not cache.put("a", 1, ticket=in_flight, ttl_s=5)


def test_clear_and_size_bound(cache: InvalidatedCache[str, int]) -> None:
    for i, key in enumerate("abcd"):
        assert cache.put(key, i, ticket=cache.ticket(), ttl_s=5)
    assert len(cache) == 3 and cache.get("a") is None  # the oldest was dropped
    assert not cache.put("x", 0, ticket=cache.ticket(), ttl_s=0)
    cache.clear()
    assert len(cache) == 0
    with pytest.raises(ValueError, match="max_entries"):
        InvalidatedCache[str, int](max_entries=0)


@pytest.mark.parametrize(
    ("payload", "parts", "nullable", "scope"),
    [
        ('["test", "acme", "t1"]', 3, False, ("test", "acme", "t1")),
        ('["test", "acme", "bot", null]', 4, True, ("test", "acme", "bot", None)),
        ('["test", "acme", "bot", null]', 4, False, None),
        ('["test", null, "bot", "u"]', 4, True, None),
        ('["test", "acme"]', 3, False, None),
        ('{"a": 1}', 1, False, None),
        ("*", 3, False, None),
        ("not json", 3, False, None),
        ("[1, 2, 3]", 3, False, None),
    ],
)
def test_a_notice_names_a_scope_or_nothing(
    payload: str, parts: int, nullable: bool, scope: tuple[str | None, ...] | None
) -> None:
    assert notice_scope(payload, parts, last_may_be_null=nullable) == scope


def test_a_notice_evicts_its_scope_or_clears_everything() -> None:
    cache: InvalidatedCache[tuple[str, ...], int] = InvalidatedCache()
    cache.set_live(True)
    for key in [("test", "a"), ("test", "b")]:
        cache.put(key, 1, ticket=cache.ticket(), ttl_s=60)
    cache.notice('["test", "a"]', 2, what="thing")
    assert cache.get(("test", "a")) is None and cache.get(("test", "b")) is not None
    cache.notice("*", 2, what="thing")
    assert len(cache) == 0


async def test_through_loads_once_and_keeps_a_value_unless_evicted_meanwhile() -> None:
    cache: InvalidatedCache[str, int | None] = InvalidatedCache()
    cache.set_live(True)
    loads = 0

    async def load() -> int | None:
        nonlocal loads
        loads += 1
        return None  # "nothing there" is a value too

    assert await cache.through("k", load, ttl_s=60) is None
    assert await cache.through("k", load, ttl_s=60) is None
    assert loads == 1

    async def racing() -> int | None:
        cache.evict("j")  # a notice arrives while the value is read
        return 7

    assert await cache.through("j", racing, ttl_s=60) == 7
    assert cache.get("j") is None
