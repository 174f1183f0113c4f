"""RedisLocks against a real Redis: exclusion, expiry, release/extend only by the holder."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis

from core.stores.locks import LockUnavailable
from sinks.redis.client import redis_client
from sinks.redis.locks import RedisLocks


async def test_acquire_is_exclusive_until_released(client: Redis, namespace: str) -> None:
    locks = RedisLocks(client, namespace=namespace)
    lease = await locks.acquire("summarize/t1", ttl_s=30)
    assert lease is not None
    assert await locks.acquire("summarize/t1", ttl_s=30) is None
    assert await locks.acquire("summarize/t2", ttl_s=30) is not None  # other names are independent
    assert 29_000 < await client.pttl(f"{namespace}/lock/summarize/t1") <= 30_000
    assert await locks.release(lease) is True
    assert await locks.release(lease) is False  # already released
    assert await locks.acquire("summarize/t1", ttl_s=30) is not None


async def test_racing_acquirers_one_wins(client: Redis, namespace: str) -> None:
    locks = RedisLocks(client, namespace=namespace)
    leases = await asyncio.gather(*(locks.acquire("x", ttl_s=30) for _ in range(10)))
    assert sum(lease is not None for lease in leases) == 1


async def test_expired_lease_cannot_touch_the_next_holders_lock(client: Redis, namespace: str) -> None:
    locks = RedisLocks(client, namespace=namespace)
    old = await locks.acquire("x", ttl_s=0.1)
    assert old is not None
    await asyncio.sleep(0.15)  # the holder stalled past its lease
    new = await locks.acquire("x", ttl_s=30)
    assert new is not None and new.token != old.token
    assert await locks.release(old) is False
    assert await locks.extend(old) is None
    assert await client.get(locks.key("x")) == new.token.encode()  # the new holder keeps it
    assert 29_000 < await client.pttl(locks.key("x")) <= 30_000  # and its TTL is untouched


async def test_extend_keeps_the_lock(client: Redis, namespace: str) -> None:
    locks = RedisLocks(client, namespace=namespace)
    lease = await locks.acquire("x", ttl_s=0.2)
    assert lease is not None
    renewed = await locks.extend(lease, ttl_s=5)
    assert renewed is not None and renewed.ttl_ms == 5000 and renewed.expires_at > lease.expires_at
    await asyncio.sleep(0.3)  # the original lease would have run out
    assert await locks.acquire("x", ttl_s=1) is None
    again = await locks.extend(renewed)  # default: the lease's own TTL
    assert again is not None and 4_000 < await client.pttl(locks.key("x")) <= 5_000
    assert await locks.release(again) is True


async def test_bad_ttl_and_unreachable_redis(closed_redis_url: str) -> None:
    client = redis_client(closed_redis_url)
    locks = RedisLocks(client)
    with pytest.raises(ValueError, match="at least 1 ms"):
        await locks.acquire("x", ttl_s=0)
    with pytest.raises(LockUnavailable, match="cannot acquire lock 'x'"):
        await locks.acquire("x", ttl_s=1)
    await client.aclose()
