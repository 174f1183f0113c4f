"""RedisThresholdStore against the real embedded Redis: what only Redis does (the key layout, a
state hash from before offsets were kept). The contract (counting by offset, guard, rebuild and gap
installs, reset; and generated sequences against the in-memory store on the pure rule) is in
`tests/core/stores/test_thresholds.py`."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from core.stores.thresholds import ThreadScope
from sinks.redis.thresholds import RedisThresholdStore

T = ThreadScope("test", "acme", "bot", "th-1")


@pytest.fixture
async def store(client: Redis, namespace: str) -> AsyncIterator[RedisThresholdStore]:
    yield RedisThresholdStore(client, token_limit=100, message_limit=3, namespace=namespace)
    keys = [k async for k in client.scan_iter(match=f"{namespace}/*")]
    if keys:
        await client.delete(*keys)


async def test_a_state_from_before_offsets_were_kept_is_rebuilt(
    store: RedisThresholdStore, client: Redis
) -> None:
    await client.hset(store.state_key(T), mapping={"base": 0, "tokens": 7, "messages": 1})
    seen = await store.count(T, 1, 1)
    assert (seen.kind, seen.offset, seen.state) == ("rebuild", None, "0::")


async def test_keys_are_namespaced_by_tenant(store: RedisThresholdStore) -> None:
    assert store.state_key(T) == f"{store.namespace}/test/acme/bot/th-1/state"
    assert store.guard_key(T) == f"{store.namespace}/test/acme/bot/th-1/guard"
    assert await store.hold_guard(T, 7)
    assert await store.client.get(store.guard_key(T)) == b"7"
    with pytest.raises(ValueError, match="at least 1"):
        RedisThresholdStore(store.client, token_limit=0, message_limit=3)
