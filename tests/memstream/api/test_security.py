from __future__ import annotations

import asyncio
import time

import asyncpg
import httpx
import pytest

from core.auth import issue_key, revoke_key, verify
from core.cached_api_keys import CachedApiKeys
from core.config import Settings
from memstream.api import create_app
from memstream.wiring.api import build_api_deps
from sinks.postgres.api_keys import PostgresApiKeys
from sinks.postgres.invalidation import PostgresInvalidations
from sinks.slatedb.journal import SlateJournal

from .conftest import Keys

ROUTES: list[tuple[str, str, object]] = [
    ("GET", "/v1/threads/t1", None),
    ("PUT", "/v1/threads/t1", {"agent_id": "bot"}),
    ("PATCH", "/v1/threads/t1", {"metadata": {}}),
    ("POST", "/v1/threads/t1/messages", {"agent_id": "bot", "messages": [{"role": "user", "content": "hi"}]}),
    ("GET", "/v1/threads/t1/messages", None),
    ("GET", "/v1/threads/t1/context", None),
]


@pytest.mark.parametrize(("method", "path", "body"), ROUTES)
@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ({}, "missing API key"),
        ({"Authorization": "Basic dXNlcjpwYXNz"}, "missing API key"),
        ({"Authorization": "Bearer nonsense"}, "malformed API key"),
        ({"Authorization": "Bearer msk_" + "x" * 43}, "unknown API key msk_xxxxxxxx..."),
    ],
)
async def test_every_route_needs_a_valid_key(
    client: httpx.AsyncClient,
    pool: asyncpg.Pool,
    method: str,
    path: str,
    body: object,
    headers: dict[str, str],
    reason: str,
) -> None:
    response = await client.request(method, path, json=body, headers=headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    error = response.json()["error"]
    assert error["code"] == "unauthorized"
    assert reason in error["message"]
    assert await pool.fetchval("SELECT count(*) FROM threads") == 0


async def test_revoked_key_is_refused(client: httpx.AsyncClient, pool: asyncpg.Pool) -> None:
    key = await issue_key(PostgresApiKeys(pool), "acme", "test")
    headers = {"Authorization": f"Bearer {key}"}
    assert (await client.put("/v1/threads/t1", json={"agent_id": "bot"}, headers=headers)).status_code == 201
    principal = await verify(PostgresApiKeys(pool), key, "test")
    await revoke_key(PostgresApiKeys(pool), "acme", "test", principal.key_id)
    response = await client.get("/v1/threads/t1", headers=headers)
    assert response.status_code == 401
    assert "was revoked" in response.json()["error"]["message"]


async def test_key_of_another_environment_is_refused(client: httpx.AsyncClient, pool: asyncpg.Pool) -> None:
    key = await issue_key(PostgresApiKeys(pool), "acme", "prod")
    response = await client.get("/v1/threads/t1", headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 401
    assert "no such key in environment 'test'" in response.json()["error"]["message"]


async def test_health_needs_no_key(client: httpx.AsyncClient, keys: Keys) -> None:
    assert (await client.get("/healthz")).json() == {"status": "ok"}


async def test_with_the_node_feed_a_key_revoked_elsewhere_is_refused_promptly(
    api_settings: Settings, journal: SlateJournal, pool: asyncpg.Pool
) -> None:
    invalidations = PostgresInvalidations(pool)
    deps = build_api_deps(api_settings, journal, pool, invalidations=invalidations)
    assert isinstance(deps.api_keys, CachedApiKeys)
    no_cache = api_settings.model_copy(update={"api_key_cache_ttl_s": 0.0})
    assert isinstance(build_api_deps(no_cache, journal, pool).api_keys, PostgresApiKeys)
    assert isinstance(
        build_api_deps(no_cache, journal, pool, invalidations=invalidations).api_keys, PostgresApiKeys
    )
    stop = asyncio.Event()
    feed = asyncio.create_task(invalidations.run(stop))
    try:
        await asyncio.wait_for(invalidations.live.wait(), 10)
        transport = httpx.ASGITransport(app=create_app(deps))
        async with httpx.AsyncClient(transport=transport, base_url="http://memstream.test") as client:
            key = await issue_key(PostgresApiKeys(pool), "acme", "test")
            headers = {"Authorization": f"Bearer {key}"}
            assert (
                await client.put("/v1/threads/t1", json={"agent_id": "bot"}, headers=headers)
            ).status_code == 201
            principal = await verify(PostgresApiKeys(pool), key, "test")
            await revoke_key(PostgresApiKeys(pool), "acme", "test", principal.key_id)  # another node
            deadline = time.monotonic() + 2.0  # the notice, well before the TTL
            while (response := await client.get("/v1/threads/t1", headers=headers)).status_code != 401:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)
            assert "was revoked" in response.json()["error"]["message"]
    finally:
        stop.set()
        await feed
