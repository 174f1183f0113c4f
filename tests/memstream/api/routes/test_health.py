from __future__ import annotations

import shutil
import uuid

import asyncpg
import httpx

from core.config import S3Settings, Settings
from memstream.api import create_app
from memstream.wiring.api import build_api_deps
from sinks.slatedb.journal import SlateJournal


async def test_healthz(client: httpx.AsyncClient) -> None:
    response = await client.get("/healthz")
    assert (response.status_code, response.json()) == (200, {"status": "ok"})


async def test_readyz_ready(client: httpx.AsyncClient) -> None:
    response = await client.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {
        "status": "ready",
        "checks": {"postgres": {"ok": True}, "journal": {"ok": True}, "object_store": {"ok": True}},
    }


async def test_readyz_fails_when_journal_closed(client: httpx.AsyncClient, journal: SlateJournal) -> None:
    await journal.close()
    response = await client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["checks"]["postgres"] == {"ok": True}
    assert body["checks"]["journal"]["ok"] is False
    assert "closed" in body["checks"]["journal"]["error"]
    assert (await client.get("/healthz")).status_code == 200  # liveness is unaffected


async def test_readyz_recreates_a_deleted_summaries_folder(
    client: httpx.AsyncClient, api_settings: Settings
) -> None:
    assert (await client.get("/readyz")).status_code == 200
    folder = api_settings.data_path / "objects"
    shutil.rmtree(folder)
    response = await client.get("/readyz")  # not 503 until a summary happens to be written
    assert response.status_code == 200, response.json()
    assert response.json()["checks"]["object_store"] == {"ok": True}
    assert folder.is_dir()


async def test_readyz_fails_when_postgres_gone(client: httpx.AsyncClient, pool: asyncpg.Pool) -> None:
    await pool.close()
    response = await client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["postgres"]["ok"] is False
    assert response.json()["checks"]["journal"] == {"ok": True}


async def _readyz_with_object_store(
    api_settings: Settings, journal: SlateJournal, pool: asyncpg.Pool, url: str, s3: S3Settings
) -> httpx.Response:
    settings = api_settings.model_copy(update={"object_store_url": url, "s3": s3})
    app = create_app(build_api_deps(settings, journal, pool))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        return await client.get("/readyz")


async def test_readyz_ready_with_an_existing_s3_bucket(
    api_settings: Settings, journal: SlateJournal, pool: asyncpg.Pool, s3_settings: S3Settings, s3_bucket: str
) -> None:
    response = await _readyz_with_object_store(
        api_settings, journal, pool, f"s3://{s3_bucket}/memstream", s3_settings
    )
    assert response.status_code == 200
    assert response.json()["checks"]["object_store"] == {"ok": True}


async def test_readyz_names_a_missing_s3_bucket(
    api_settings: Settings, journal: SlateJournal, pool: asyncpg.Pool, s3_settings: S3Settings
) -> None:
    bucket = f"absent-{uuid.uuid4().hex[:8]}"
    response = await _readyz_with_object_store(
        api_settings, journal, pool, f"s3://{bucket}/memstream", s3_settings
    )
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["checks"]["postgres"] == {"ok": True} and body["checks"]["journal"] == {"ok": True}
    check = body["checks"]["object_store"]
    assert check["ok"] is False
    assert f"S3 bucket {bucket!r}" in check["error"] and "does not exist" in check["error"]
