"""RedisLocks against a real Redis: what only Redis does (the key and its PTTL, an unreachable
server). The contract (exclusion, expiry, release/extend only by the holder) is in
`tests/core/stores/test_locks.py`."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis

from core.stores.locks import LockUnavailable
from sinks.redis.client import redis_client
from sinks.redis.locks import RedisLocks


async def test_a_lease_is_a_key_with_the_token_and_a_pttl(client: Redis, namespace: str) -> None:
    locks = RedisLocks(client, namespace=namespace)
    lease = await locks.acquire("summarize/t1", ttl_s=30)
    assert lease is not None and lease.key == f"{namespace}/lock/summarize/t1" == locks.key("summarize/t1")
    assert await client.get(lease.key) == lease.token.encode()
    assert 29_000 < await client.pttl(lease.key) <= 30_000
    assert await locks.release(lease) is True
    assert await client.exists(lease.key) == 0


async def test_an_expired_lease_leaves_the_next_holders_ttl_alone(client: Redis, namespace: str) -> None:
    locks = RedisLocks(client, namespace=namespace)
    old = await locks.acquire("x", ttl_s=0.1)
    assert old is not None
    await asyncio.sleep(0.15)
    new = await locks.acquire("x", ttl_s=30)
    assert new is not None
    assert await locks.extend(old, ttl_s=60) is None
    assert await client.get(locks.key("x")) == new.token.encode()
    assert 29_000 < await client.pttl(locks.key("x")) <= 30_000


async def test_extend_restarts_the_pttl(client: Redis, namespace: str) -> None:
    locks = RedisLocks(client, namespace=namespace)
    lease = await locks.acquire("x", ttl_s=0.2)
    assert lease is not None
    renewed = await locks.extend(lease, ttl_s=5)
    assert renewed is not None and 4_000 < await client.pttl(locks.key("x")) <= 5_000


async def test_unreachable_redis(closed_redis_url: str) -> None:
    client = redis_client(closed_redis_url)
    locks = RedisLocks(client)
    with pytest.raises(LockUnavailable, match="cannot acquire lock 'x'"):
        await locks.acquire("x", ttl_s=1)
    await client.aclose()
