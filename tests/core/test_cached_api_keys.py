"""`core.cached_api_keys.CachedApiKeys` over the in-memory store: hits, misses, TTLs, evictions
from the change feed, local revocation, and bypass while the feed is down. Against Postgres and
its feed: `tests/sinks/postgres/test_invalidation.py`."""

from __future__ import annotations

import hashlib

import pytest

from core.auth import issue_key, revoke_key, verify
from core.cached_api_keys import CachedApiKeys
from core.errors import Unauthorized
from core.invalidated_cache import InvalidatedCache
from core.stores.api_keys import ApiKeyRecord
from tests.fakes.api_keys import InMemoryApiKeys


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class CountingKeys(InMemoryApiKeys):
    """The fake, counting lookups (what reaches the store)."""

    def __init__(self) -> None:
        super().__init__()
        self.lookups = 0

    async def find_by_hash(self, key_hash: bytes, *, environment: str) -> ApiKeyRecord | None:
        self.lookups += 1
        return await super().find_by_hash(key_hash, environment=environment)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store() -> CountingKeys:
    return CountingKeys()


@pytest.fixture
def cached(store: CountingKeys, clock: Clock) -> CachedApiKeys:
    keys = CachedApiKeys(store, ttl_s=5, missing_ttl_s=1, cache=InvalidatedCache(clock=clock))
    keys.set_live(True)
    return keys


async def test_a_hit_does_not_reach_the_store_until_the_ttl(
    cached: CachedApiKeys, store: CountingKeys, clock: Clock
) -> None:
    key = await issue_key(cached, "acme", "test")
    first = await verify(cached, key, "test")
    assert (await verify(cached, key, "test")) == first
    assert store.lookups == 1
    clock.now += 5
    assert (await verify(cached, key, "test")) == first
    assert store.lookups == 2


async def test_another_environment_is_a_miss(cached: CachedApiKeys, store: CountingKeys) -> None:
    key = await issue_key(cached, "acme", "test")
    await verify(cached, key, "test")
    with pytest.raises(Unauthorized, match="no such key in environment 'prod'"):
        await verify(cached, key, "prod")
    assert store.lookups == 2


async def test_no_such_key_is_remembered_briefly(
    cached: CachedApiKeys, store: CountingKeys, clock: Clock
) -> None:
    unknown = "msk_" + "x" * 43
    for _ in range(3):
        with pytest.raises(Unauthorized, match="unknown API key"):
            await verify(cached, unknown, "test")
    assert store.lookups == 1
    clock.now += 1
    with pytest.raises(Unauthorized):
        await verify(cached, unknown, "test")
    assert store.lookups == 2


async def test_a_key_inserted_here_is_not_refused_from_a_cached_miss(cached: CachedApiKeys) -> None:
    key_hash = hashlib.sha256(b"k").digest()
    assert await cached.find_by_hash(key_hash, environment="test") is None
    await cached.insert(
        key_id="key_1", environment="test", account_id="acme", key_hash=key_hash, prefix="p", label=""
    )
    assert await cached.find_by_hash(key_hash, environment="test") is not None


async def test_a_revocation_here_is_refused_at_once(cached: CachedApiKeys) -> None:
    key = await issue_key(cached, "acme", "test")
    principal = await verify(cached, key, "test")
    await revoke_key(cached, "acme", "test", principal.key_id)
    with pytest.raises(Unauthorized, match="was revoked"):
        await verify(cached, key, "test")


async def test_a_notice_evicts_a_key_changed_elsewhere(cached: CachedApiKeys, store: CountingKeys) -> None:
    key = await issue_key(cached, "acme", "test")
    principal = await verify(cached, key, "test")
    await revoke_key(store, "acme", "test", principal.key_id)  # another node
    assert (await verify(cached, key, "test")) == principal  # cached until the notice
    cached.invalidated(hashlib.sha256(key.encode()).hexdigest())
    with pytest.raises(Unauthorized, match="was revoked"):
        await verify(cached, key, "test")


async def test_a_notice_that_is_not_a_hash_forgets_every_key(
    cached: CachedApiKeys, store: CountingKeys
) -> None:
    key = await issue_key(cached, "acme", "test")
    await verify(cached, key, "test")
    cached.invalidated("*")
    await verify(cached, key, "test")
    assert store.lookups == 2


async def test_the_store_answers_while_the_feed_is_down(cached: CachedApiKeys, store: CountingKeys) -> None:
    key = await issue_key(cached, "acme", "test")
    principal = await verify(cached, key, "test")
    cached.set_live(False)
    await revoke_key(store, "acme", "test", principal.key_id)
    with pytest.raises(Unauthorized, match="was revoked"):
        await verify(cached, key, "test")
    with pytest.raises(Unauthorized):
        await verify(cached, key, "test")
    assert store.lookups == 3
