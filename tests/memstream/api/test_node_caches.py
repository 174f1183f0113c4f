"""The API as the node wires it (`build_api_deps` with the cache feed): API keys and threads are
cached (`core.cached_api_keys`, `core.cached_threads`), and a thread's context window changed
through this node's API shows in the next context at once, one changed on another node once
Postgres announces it. (Keys: `test_security.py`.)"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import asyncpg
import httpx
import pytest

from core.cached_api_keys import CachedApiKeys
from core.cached_threads import CachedThreads
from core.config import Settings
from memstream.api import create_app
from memstream.wiring.api import build_api_deps
from sinks.postgres.api_keys import PostgresApiKeys
from sinks.postgres.invalidation import PostgresInvalidations
from sinks.postgres.threads import PostgresThreadStore
from sinks.slatedb.journal import SlateJournal

from .conftest import Keys


@pytest.fixture
async def node_client(
    api_settings: Settings, journal: SlateJournal, pool: asyncpg.Pool
) -> AsyncIterator[httpx.AsyncClient]:
    invalidations = PostgresInvalidations(pool)
    deps = build_api_deps(api_settings, journal, pool, invalidations=invalidations)
    assert isinstance(deps.api_keys, CachedApiKeys)
    assert isinstance(deps.threads._store, CachedThreads)
    stop = asyncio.Event()
    feed = asyncio.create_task(invalidations.run(stop))
    await asyncio.wait_for(invalidations.live.wait(), 10)
    transport = httpx.ASGITransport(app=create_app(deps))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://memstream.test") as client:
            yield client
    finally:
        stop.set()
        await feed


def test_without_the_feed_or_with_a_zero_ttl_nothing_is_cached(
    api_settings: Settings, journal: SlateJournal, pool: asyncpg.Pool
) -> None:
    plain = build_api_deps(api_settings, journal, pool)
    assert isinstance(plain.api_keys, PostgresApiKeys)
    assert isinstance(plain.threads._store, PostgresThreadStore)
    zero = api_settings.model_copy(update={"api_key_cache_ttl_s": 0.0, "thread_cache_ttl_s": 0.0})
    deps = build_api_deps(zero, journal, pool, invalidations=PostgresInvalidations(pool))
    assert isinstance(deps.api_keys, PostgresApiKeys)
    assert isinstance(deps.threads._store, PostgresThreadStore)


async def window(client: httpx.AsyncClient, keys: Keys) -> int:
    response = await client.get("/v1/threads/t1/context", headers=keys.acme)
    assert response.status_code == 200
    return len(response.json()["messages"])


async def test_the_context_window_follows_changes_here_and_elsewhere(
    node_client: httpx.AsyncClient, keys: Keys, pool: asyncpg.Pool
) -> None:
    messages = [{"role": "user", "content": f"message {i}"} for i in range(6)]
    body = {"agent_id": "bot", "messages": messages}
    assert (
        await node_client.post("/v1/threads/t1/messages", json=body, headers=keys.acme)
    ).status_code == 201
    assert await window(node_client, keys) == 6
    assert await window(node_client, keys) == 6  # cached
    patch = {"metadata": {"config": {"max_working_memory_messages": 2}}}
    assert (await node_client.patch("/v1/threads/t1", json=patch, headers=keys.acme)).status_code == 200
    assert await window(node_client, keys) == 2  # at once

    def four(_: dict[str, object]) -> dict[str, object]:
        return {"config": {"max_working_memory_messages": 4}}

    await PostgresThreadStore(pool).update_metadata("test", "acme", "t1", four)  # another node
    deadline = time.monotonic() + 2.0  # the notice, well before the TTL
    while await window(node_client, keys) != 4:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
    assert (await node_client.get("/v1/threads/t1/context", headers=keys.globex)).status_code == 404
