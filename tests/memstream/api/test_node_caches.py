"""The API as the node wires it (`build_api_deps` with the cache feed): API keys, threads and pinned
facts are cached (`core.cached_api_keys`, `core.cached_threads`, `core.cached_pinned`), and a
thread's context window or a user's pinned facts changed through this node's API show in the next
context at once, changed on another node once Postgres announces it. (Keys: `test_security.py`.)"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import asyncpg
import httpx
import pytest

from core.cached_agents import CachedAgents
from core.cached_api_keys import CachedApiKeys
from core.cached_pinned import CachedPinnedFacts
from core.cached_summaries import CachedSummaries
from core.cached_threads import CachedThreads
from core.config import Settings
from core.memory.models import MemoryScope
from core.memory.service import MemoryService
from memstream.api import ApiDeps, create_app
from memstream.wiring.api import build_api_deps, build_memory_deps
from sinks.embeddings.bm25 import Bm25Sparse
from sinks.embeddings.minilm import OfflineMiniLM
from sinks.postgres.api_keys import PostgresApiKeys
from sinks.postgres.invalidation import PostgresInvalidations
from sinks.postgres.memory import PostgresMemoryStore
from sinks.postgres.threads import PostgresThreadStore
from sinks.slatedb.journal import SlateJournal
from tests.fakes.vectors import InMemoryVectorIndex

from .conftest import Keys


@contextlib.asynccontextmanager
async def serving(deps: ApiDeps, invalidations: PostgresInvalidations) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the app over `deps`, with the caches' change feed live."""
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


@pytest.fixture
async def node_client(
    api_settings: Settings, journal: SlateJournal, pool: asyncpg.Pool
) -> AsyncIterator[httpx.AsyncClient]:
    invalidations = PostgresInvalidations(pool)
    deps = build_api_deps(api_settings, journal, pool, invalidations=invalidations)
    assert isinstance(deps.api_keys, CachedApiKeys)
    assert isinstance(deps.threads._store, CachedThreads)
    assert isinstance(deps.context_reader._summaries, CachedSummaries)
    assert isinstance(deps.agents._store, CachedAgents)
    async with serving(deps, invalidations) as client:
        yield client


def test_without_the_feed_or_with_a_zero_ttl_nothing_is_cached(
    api_settings: Settings, journal: SlateJournal, pool: asyncpg.Pool
) -> None:
    plain = build_api_deps(api_settings, journal, pool)
    assert isinstance(plain.api_keys, PostgresApiKeys)
    assert isinstance(plain.threads._store, PostgresThreadStore)
    assert not isinstance(plain.context_reader._summaries, CachedSummaries)
    zero = api_settings.model_copy(
        update={"api_key_cache_ttl_s": 0.0, "thread_cache_ttl_s": 0.0, "summary_cache_ttl_s": 0.0}
    )
    deps = build_api_deps(zero, journal, pool, invalidations=PostgresInvalidations(pool))
    assert isinstance(deps.api_keys, PostgresApiKeys)
    assert isinstance(deps.threads._store, PostgresThreadStore)
    assert not isinstance(deps.context_reader._summaries, CachedSummaries)


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


@pytest.fixture
async def memory_node_client(
    api_settings: Settings, journal: SlateJournal, pool: asyncpg.Pool, embedder: OfflineMiniLM
) -> AsyncIterator[httpx.AsyncClient]:
    invalidations = PostgresInvalidations(pool)
    memory = build_memory_deps(pool, embedder, Bm25Sparse(), InMemoryVectorIndex())
    deps = build_api_deps(api_settings, journal, pool, memory=memory, invalidations=invalidations)
    assert isinstance(deps.context_reader._pinned, CachedPinnedFacts)
    async with serving(deps, invalidations) as client:
        yield client


async def pinned_text(client: httpx.AsyncClient, keys: Keys) -> str:
    response = await client.get("/v1/threads/t1/context", headers=keys.acme)
    assert response.status_code == 200
    first = response.json()["messages"][0]
    return str(first["content"]) if first["role"] == "system" else ""


async def test_pinned_facts_follow_changes_here_and_elsewhere(
    memory_node_client: httpx.AsyncClient, keys: Keys, pool: asyncpg.Pool
) -> None:
    client = memory_node_client
    put = await client.put("/v1/agents/bot", json={"capabilities": ["memory"]}, headers=keys.acme)
    assert put.status_code == 200
    body = {"agent_id": "bot", "user_id": "alice", "messages": [{"role": "user", "content": "Hi."}]}
    assert (await client.post("/v1/threads/t1/messages", json=body, headers=keys.acme)).status_code == 201
    assert "remembered_facts" not in await pinned_text(client, keys)  # and cached
    store = {
        "thread_id": "t1",
        "arguments": {
            "key": "diet",
            "content": "Alice is vegetarian.",
            "category": "user_profile",
            "importance": 0.9,
        },
    }
    stored = await client.post("/v1/agents/bot/tools/memory_store", json=store, headers=keys.acme)
    assert stored.status_code == 200
    assert "Alice is vegetarian." in await pinned_text(client, keys)  # at once
    alice = MemoryScope(environment="test", account_id="acme", agent_id="bot", user_id="alice")
    other = MemoryService(PostgresMemoryStore(pool))  # another node
    await other.store(
        alice, "city", "Alice lives in Porto.", "user_profile", scope_visibility="private", importance=0.9
    )
    deadline = time.monotonic() + 2.0  # the notice, well before the TTL
    while "Alice lives in Porto." not in await pinned_text(client, keys):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
    forget = {"thread_id": "t1", "arguments": {"key": "diet"}}
    assert (
        await client.post("/v1/agents/bot/tools/memory_forget", json=forget, headers=keys.acme)
    ).status_code == 200
    assert "Alice is vegetarian." not in await pinned_text(client, keys)  # at once
