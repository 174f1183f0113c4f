"""RedisSummaryCache against a real Redis: keys, TTL, corrupt entries, outages (the `SummaryCache`
contract it shares with the fake is tests/core/stores/test_summaries.py)."""

from __future__ import annotations

import logging
import time

import pytest
from redis.asyncio import Redis

from sinks.redis.client import redis_client
from sinks.redis.summary_cache import RedisSummaryCache, store_namespace
from tests.summary_builders import THREAD, make

from .conftest import OwnRedis


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_key_layout_and_ttl(client: Redis, namespace: str) -> None:
    cache = RedisSummaryCache(client, namespace=namespace)
    await cache.put(THREAD, "bot", make(1))
    key = cache.key(THREAD, "bot")
    assert key == f"memstream/summary/{namespace}/test/acme/bot/t1"
    ttl_ms = await client.pttl(key)
    assert 3_590_000 < ttl_ms <= 3_600_000


async def test_invalidate_deletes_the_key(client: Redis, namespace: str) -> None:
    cache = RedisSummaryCache(client, namespace=namespace)
    await cache.put(THREAD, "bot", make(3))
    await cache.invalidate(THREAD, "bot")
    assert await client.exists(cache.key(THREAD, "bot")) == 0


async def test_keys_separate_namespaces_and_stores(client: Redis, namespace: str) -> None:
    """Tenants and threads are kept apart in the contract suite (tests/core/stores/test_summaries.py)."""
    cache = RedisSummaryCache(client, namespace=namespace)
    await cache.put(THREAD, "bot", make(1))
    assert await RedisSummaryCache(client, namespace=namespace + "x").get(THREAD, "bot") is None
    assert store_namespace("file:///a") != store_namespace("file:///b")


async def test_corrupt_entry_is_a_miss(client: Redis, namespace: str) -> None:
    cache = RedisSummaryCache(client, namespace=namespace)
    await client.hset(cache.key(THREAD, "bot"), mapping={"version": "1", "body": "{not json"})
    assert await cache.get(THREAD, "bot") is None
    await cache.put(THREAD, "bot", make(2))
    assert await cache.get(THREAD, "bot") == make(2)


async def test_unreachable_redis_is_a_miss_and_logged_once(
    closed_redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    cache = RedisSummaryCache(redis_client(closed_redis_url), namespace="x", clock=clock)
    caplog.set_level(logging.INFO, logger="sinks.redis.summary_cache")
    started = time.monotonic()
    assert await cache.get(THREAD, "bot") is None
    await cache.put(THREAD, "bot", make(1))  # does not raise
    await cache.invalidate(THREAD, "other")
    clock.now += 10  # past the back-off: tried again, fails again
    assert await cache.get(THREAD, "bot") is None
    assert time.monotonic() - started < 2.0
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "Redis unavailable" in warnings[0].getMessage()
    assert cache.pending == 2
    await cache.aclose()


async def test_updates_missed_during_an_outage_are_replayed(own_redis: OwnRedis, namespace: str) -> None:
    """Redis restarts from its append-only file with an entry older than the store: the cache
    replays the update it could not make, so it never serves the older version afterwards."""
    clock = Clock()
    cache = RedisSummaryCache(redis_client(own_redis.url), namespace=namespace, clock=clock)
    await cache.put(THREAD, "bot", make(1))
    own_redis.process.stop()
    await cache.put(THREAD, "bot", make(2))  # Redis is down: remembered
    assert await cache.get(THREAD, "bot") is None  # readers fall through to the object store
    own_redis.process.start()
    raw = redis_client(own_redis.url)
    assert await raw.hget(cache.key(THREAD, "bot"), "version") == b"1"  # restored, stale
    assert await cache.get(THREAD, "bot") is None  # still backing off: a miss, never the stale 1
    clock.now += 10
    assert await cache.get(THREAD, "bot") == make(2)
    assert cache.pending == 0
    await raw.aclose()
    await cache.aclose()
