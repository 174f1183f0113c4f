"""`DELETE /v1/threads/{thread_id}` over the real components (Postgres, SlateDB, the Tansu broker):
what was deleted where, tenancy (another account's thread is 404), idempotence (the same report
again), the tombstone on `journal.deletions`, and a thread id used again afterwards."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime

import asyncpg
import httpx
import pytest
from fastapi import FastAPI

from core.auth import issue_key
from core.config import Settings
from core.stores.deletions import Tombstone
from memstream.api import ApiDeps, create_app
from memstream.ops.topic_reader import TopicReader
from memstream.wiring.api import build_api_deps
from sinks.postgres.api_keys import PostgresApiKeys
from sinks.slatedb.journal import SlateJournal
from streams.admin import apply_topics
from streams.codecs import journal_deletions
from streams.deletions import DeletionEvents, DeletionNotPublished
from streams.topics import load_topics

from ..conftest import Keys


@pytest.fixture
def broker_settings(api_settings: Settings, settings: Settings) -> Settings:
    merged = api_settings.model_copy(
        update={"broker_url": settings.broker_url, "topic_prefix": settings.topic_prefix}
    )
    apply_topics(merged, load_topics())
    return merged


@pytest.fixture
async def events(broker_settings: Settings) -> AsyncIterator[DeletionEvents]:
    published = DeletionEvents(broker_settings)
    yield published
    published.close()


@pytest.fixture
def deps(
    broker_settings: Settings, journal: SlateJournal, pool: asyncpg.Pool, events: DeletionEvents
) -> ApiDeps:
    return build_api_deps(broker_settings, journal, pool, publish_deletion=events.publish)


@pytest.fixture
def app(deps: ApiDeps) -> FastAPI:
    return create_app(deps)


async def append(client: httpx.AsyncClient, keys: Keys, thread: str, *texts: str) -> None:
    body = {"agent_id": "bot", "messages": [{"role": "user", "content": t} for t in texts]}
    response = await client.post(f"/v1/threads/{thread}/messages", json=body, headers=keys.acme)
    assert response.status_code == 201, response.text


async def test_delete_reports_what_it_deleted_where_and_is_idempotent(
    client: httpx.AsyncClient, keys: Keys, broker_settings: Settings
) -> None:
    await append(client, keys, "t1", "one", "two")
    await append(client, keys, "t2", "kept")
    await append(client, keys, "t1", "three")
    assert (await client.delete("/v1/threads/t1", headers=keys.globex)).status_code == 404  # tenancy
    assert (await client.delete("/v1/threads/nope", headers=keys.acme)).status_code == 404
    response = await client.delete("/v1/threads/t1", headers=keys.acme)
    assert response.status_code == 200, response.text
    report = response.json()
    assert report["thread_id"] == "t1" and report["up_to_seq"] == 4 and report["completed_at"]
    assert report["deleted"] == {
        "thread": {"rows": 1},
        "journal": {"messages": 3, "up_to_seq": 4},
        "event": {"published": True, "up_to_seq": 4},
    }
    assert (await client.get("/v1/threads/t1", headers=keys.acme)).status_code == 404
    assert (await client.get("/v1/threads/t2", headers=keys.acme)).status_code == 200
    again = await client.delete("/v1/threads/t1", headers=keys.acme)
    assert again.status_code == 200 and again.json() == report

    reader = TopicReader(broker_settings, journal_deletions.TOPIC)
    await reader.open()
    try:
        records = await reader.read(10, 5.0)
    finally:
        await reader.close()
    (record,) = records
    event = journal_deletions.decode(record.key, record.value)
    assert (event.deletion_id, event.tombstone.scope, event.up_to_seq) == (
        report["deletion_id"],
        ("test", "acme", "t1"),
        4,
    )


async def test_a_key_issued_for_an_mcp_gateway_may_not_delete(
    client: httpx.AsyncClient, keys: Keys, pool: asyncpg.Pool
) -> None:
    await append(client, keys, "t1", "one")
    mcp = await issue_key(PostgresApiKeys(pool), "acme", "test", "gateway", surface="mcp")
    refused = await client.delete("/v1/threads/t1", headers={"Authorization": f"Bearer {mcp}"})
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "forbidden" and "mcp" in refused.json()["error"]["message"]
    assert (await client.get("/v1/threads/t1", headers=keys.acme)).status_code == 200  # untouched


async def test_a_thread_id_used_again_is_a_new_thread(client: httpx.AsyncClient, keys: Keys) -> None:
    await append(client, keys, "t1", "old")
    first = (await client.delete("/v1/threads/t1", headers=keys.acme)).json()
    await append(client, keys, "t1", "new", "newer")
    context = await client.get("/v1/threads/t1/messages", headers=keys.acme)
    assert [m["content"] for m in context.json()["messages"]] == ["new", "newer"]
    assert [m["offset"] for m in context.json()["messages"]] == [0, 1]
    second = (await client.delete("/v1/threads/t1", headers=keys.acme)).json()
    assert second["deletion_id"] != first["deletion_id"]
    assert (second["up_to_seq"], second["deleted"]["journal"]["messages"]) == (3, 2)


async def test_a_deletion_stopped_by_the_broker_answers_503_and_the_same_delete_finishes_it(
    broker_settings: Settings, journal: SlateJournal, pool: asyncpg.Pool, events: DeletionEvents, keys: Keys
) -> None:
    failures = [DeletionNotPublished("the broker did not confirm the record (injected)")]

    async def flaky(deletion_id: int, tombstone: Tombstone, requested_at: datetime) -> None:
        if failures:
            raise failures.pop()
        await events.publish(deletion_id, tombstone, requested_at)

    app = create_app(build_api_deps(broker_settings, journal, pool, publish_deletion=flaky))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://memstream.test"
    ) as client:
        await append(client, keys, "t1", "one")
        stopped = await client.delete("/v1/threads/t1", headers=keys.acme)
        assert stopped.status_code == 503 and stopped.json()["error"]["code"] == "deletion_incomplete"
        assert "steps done: thread, journal" in stopped.json()["error"]["message"]
        assert (await client.get("/v1/threads/t1", headers=keys.acme)).status_code == 404  # already gone
        finished = await client.delete("/v1/threads/t1", headers=keys.acme)
        assert finished.status_code == 200, finished.text
        assert finished.json()["deleted"]["journal"] == {"messages": 1, "up_to_seq": 1}
        assert finished.json()["deleted"]["event"] == {"published": True, "up_to_seq": 1}
