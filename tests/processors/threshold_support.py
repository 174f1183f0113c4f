"""A `RedisThresholdStore` of the test's own on the session's Redis: a random key namespace, wiped and
closed at the end."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sinks.redis.client import redis_client
from sinks.redis.thresholds import RedisThresholdStore


async def wipe(store: RedisThresholdStore) -> None:
    """Redis lost everything of this test (the namespace's keys: claims, counters, guards)."""
    keys = [k async for k in store.client.scan_iter(match=f"{store.namespace}/*")]
    if keys:
        await store.client.delete(*keys)


@asynccontextmanager
async def threshold_store(
    redis_url: str, *, token_limit: int = 2_000, message_limit: int = 50
) -> AsyncIterator[RedisThresholdStore]:
    """Limits 2,000 tokens / 50 messages (unless given) under a fresh `t{hex}/thresholds` namespace."""
    namespace = f"t{uuid.uuid4().hex[:12]}/thresholds"
    store = RedisThresholdStore(
        redis_client(redis_url), token_limit=token_limit, message_limit=message_limit, namespace=namespace
    )
    try:
        yield store
    finally:
        await wipe(store)
        await store.client.aclose()
