from __future__ import annotations

import asyncpg
import httpx

from memstream.journal.store import SlateJournal


async def test_healthz(client: httpx.AsyncClient) -> None:
    response = await client.get("/healthz")
    assert (response.status_code, response.json()) == (200, {"status": "ok"})


async def test_readyz_ready(client: httpx.AsyncClient) -> None:
    response = await client.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {
        "status": "ready",
        "checks": {"postgres": {"ok": True}, "journal": {"ok": True}},
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


async def test_readyz_fails_when_postgres_gone(client: httpx.AsyncClient, pool: asyncpg.Pool) -> None:
    await pool.close()
    response = await client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["postgres"]["ok"] is False
    assert response.json()["checks"]["journal"] == {"ok": True}
