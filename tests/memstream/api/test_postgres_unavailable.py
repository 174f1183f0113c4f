"""PostgreSQL killed under a running API: every route answers 503 `postgres_unavailable` with
Retry-After (not 500), and the same app recovers by itself once PostgreSQL is back.

A private PostgreSQL server (`tests.private_postgres`, not the session's: this test kills it)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest
from pydantic import SecretStr

from core.auth import issue_key
from core.config import Settings
from memstream.api import create_app
from memstream.wiring.api import build_api_deps
from sinks.postgres.api_keys import PostgresApiKeys
from sinks.postgres.migrations import migrate
from sinks.postgres.pool import create_pool
from sinks.slatedb.journal import SlateJournal
from tests.private_postgres import PrivatePostgres, private_postgres


@pytest.fixture
def postgres() -> Iterator[PrivatePostgres]:
    with private_postgres() as server:
        yield server


@pytest.fixture
async def unstable_client(
    postgres: PrivatePostgres, tmp_path: Path
) -> AsyncIterator[tuple[httpx.AsyncClient, dict[str, str]]]:
    settings = Settings(data_dir=tmp_path / "data", environment="test", postgres_dsn=SecretStr(postgres.dsn))
    pool: asyncpg.Pool = await create_pool(postgres.dsn, command_timeout=5)
    journal = await SlateJournal.open(settings.journal, flush_interval_ms=1)
    try:
        await migrate(pool)
        key = await issue_key(PostgresApiKeys(pool), "acme", "test")
        app = create_app(build_api_deps(settings, journal, pool))
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://memstream.test") as client:
            yield client, {"Authorization": f"Bearer {key}"}
    finally:
        await journal.close()
        await pool.close()


def _append(message_id: str) -> dict[str, object]:
    return {"agent_id": "agent-1", "messages": [{"message_id": message_id, "role": "user", "content": "hi"}]}


@pytest.mark.engine
async def test_postgres_down_is_503_with_retry_after_and_recovers(
    unstable_client: tuple[httpx.AsyncClient, dict[str, str]], postgres: PrivatePostgres
) -> None:
    client, auth = unstable_client
    assert (
        await client.post("/v1/threads/t-1/messages", json=_append("m-1"), headers=auth)
    ).status_code == 201

    postgres.kill()
    calls = [
        ("GET", "/v1/threads/t-1", None),
        ("GET", "/v1/threads/t-1/messages", None),
        ("POST", "/v1/threads/t-1/messages", _append("m-2")),
        ("GET", "/v1/threads/t-1/context", None),
        ("PATCH", "/v1/threads/t-1", {"metadata": {"topic": "x"}}),
    ]
    for method, path, body in calls:
        response = await client.request(method, path, json=body, headers=auth)
        assert response.status_code == 503, (method, path, response.status_code, response.text)
        error = response.json()["error"]
        assert error["code"] == "postgres_unavailable", (method, path, error)
        assert "Retry in" in error["message"]
        assert int(response.headers["Retry-After"]) > 0
    ready = await client.get("/readyz")
    assert ready.status_code == 503 and not ready.json()["checks"]["postgres"]["ok"]

    postgres.restart()  # same data, same port: the app's pool reconnects by itself
    assert (await client.get("/readyz")).status_code == 200
    response = await client.post("/v1/threads/t-1/messages", json=_append("m-2"), headers=auth)
    assert response.status_code == 201, response.text
    listed = await client.get("/v1/threads/t-1/messages", headers=auth)
    assert [m["message_id"] for m in listed.json()["messages"]] == ["m-1", "m-2"]
