"""The leased locks' contract (`core.stores.locks.Locks`), on every store: the in-memory fake and
Redis. Exclusion, expiry, release and extend only by the holder. What only Redis does (key layout,
PTTL, an unreachable server) is in `tests/sinks/redis/test_locks.py`."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest

from core.stores.locks import Locks
from sinks.redis.client import redis_client
from sinks.redis.locks import RedisLocks
from tests.fakes.locks import InMemoryLocks


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.engine)])
async def locks(request: pytest.FixtureRequest) -> AsyncIterator[Locks]:
    """The lock store under test, empty (redis: the session's, on a namespace of its own)."""
    if request.param == "memory":
        yield InMemoryLocks()
        return
    client = redis_client(request.getfixturevalue("redis_url"))
    try:
        yield RedisLocks(client, namespace=f"t{uuid.uuid4().hex[:12]}")
    finally:
        await client.aclose()


async def test_acquire_is_exclusive_until_released(locks: Locks) -> None:
    lease = await locks.acquire("summarize/t1", ttl_s=30)
    assert lease is not None and lease.name == "summarize/t1" and lease.ttl_ms == 30_000
    assert await locks.acquire("summarize/t1", ttl_s=30) is None
    assert await locks.acquire("summarize/t2", ttl_s=30) is not None  # other names are independent
    assert await locks.release(lease) is True
    assert await locks.release(lease) is False  # already released
    assert await locks.acquire("summarize/t1", ttl_s=30) is not None


async def test_racing_acquirers_one_wins(locks: Locks) -> None:
    leases = await asyncio.gather(*(locks.acquire("x", ttl_s=30) for _ in range(10)))
    assert sum(lease is not None for lease in leases) == 1


async def test_a_lease_runs_out_by_itself(locks: Locks) -> None:
    lease = await locks.acquire("x", ttl_s=0.1)
    assert lease is not None
    await asyncio.sleep(0.15)  # the holder died
    assert await locks.acquire("x", ttl_s=30) is not None


async def test_expired_lease_cannot_touch_the_next_holders_lock(locks: Locks) -> None:
    old = await locks.acquire("x", ttl_s=0.1)
    assert old is not None
    await asyncio.sleep(0.15)  # the holder stalled past its lease
    new = await locks.acquire("x", ttl_s=30)
    assert new is not None and new.token != old.token
    assert await locks.release(old) is False
    assert await locks.extend(old) is None
    assert await locks.acquire("x", ttl_s=30) is None  # the new holder keeps it
    assert await locks.release(new) is True


async def test_extend_keeps_the_lock(locks: Locks) -> None:
    lease = await locks.acquire("x", ttl_s=0.2)
    assert lease is not None
    renewed = await locks.extend(lease, ttl_s=5)
    assert renewed is not None and renewed.ttl_ms == 5000 and renewed.expires_at > lease.expires_at
    assert renewed.token == lease.token
    await asyncio.sleep(0.3)  # the original lease would have run out
    assert await locks.acquire("x", ttl_s=1) is None
    again = await locks.extend(renewed)  # default: the lease's own TTL
    assert again is not None and again.ttl_ms == 5000
    assert await locks.release(again) is True
    assert await locks.extend(again) is None  # released: lost


async def test_a_lease_lasts_at_least_a_millisecond(locks: Locks) -> None:
    with pytest.raises(ValueError, match="at least 1 ms"):
        await locks.acquire("x", ttl_s=0)
    lease = await locks.acquire("x", ttl_s=1)
    assert lease is not None
    with pytest.raises(ValueError, match="at least 1 ms"):
        await locks.extend(lease, ttl_s=0.0001)
