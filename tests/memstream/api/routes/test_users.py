"""`DELETE /v1/users/{user_id}` over the real components (Postgres, SlateDB, the Tansu broker, agent
memory on Qdrant Edge): the report of what was erased where, authentication and the key's surface
(401, an `mcp` key 403), bad ids 422 and unknown users 404 in the API's error shape, tenancy (the
same user id in another account, another user of the account), a repeat (a new erasure of zeros),
an erasure stopped by the broker (503, finished by the same call), answers valid against the
OpenAPI document."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime

import asyncpg
import httpx
import pytest
from fastapi import FastAPI

from core.auth import issue_key
from core.config import Settings
from core.memory.models import MemoryScope
from core.stores.deletions import Tombstone
from memstream.api import ApiDeps, create_app
from memstream.api.deps import MemoryDeps
from memstream.wiring.api import build_api_deps
from sinks.postgres.api_keys import PostgresApiKeys
from sinks.slatedb.journal import SlateJournal
from streams.admin import apply_topics
from streams.deletions import DeletionEvents, DeletionNotPublished
from streams.topics import load_topics

from ..conftest import Keys
from .test_openapi_responses import Checker

USER = "/v1/users/{user_id}"


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
    broker_settings: Settings,
    journal: SlateJournal,
    pool: asyncpg.Pool,
    events: DeletionEvents,
    memory_deps: MemoryDeps,
) -> ApiDeps:
    return build_api_deps(broker_settings, journal, pool, memory=memory_deps, publish_deletion=events.publish)


@pytest.fixture
def app(deps: ApiDeps) -> FastAPI:
    return create_app(deps)


async def append(
    client: httpx.AsyncClient, headers: dict[str, str], thread: str, user: str, *texts: str
) -> None:
    body = {"agent_id": "bot", "user_id": user, "messages": [{"role": "user", "content": t} for t in texts]}
    response = await client.post(f"/v1/threads/{thread}/messages", json=body, headers=headers)
    assert response.status_code == 201, response.text


async def remember(deps: MemoryDeps, account: str, user: str, key: str, visibility: str = "private") -> str:
    scope = MemoryScope(environment="test", account_id=account, agent_id="bot", user_id=user)
    stored = await deps.service.store(
        scope, key, f"{user} said {key}", "project_fact", scope_visibility=visibility
    )
    return stored.entry.entry_id


async def test_erase_reports_what_it_erased_where_within_the_account(
    client: httpx.AsyncClient, keys: Keys, memory_deps: MemoryDeps, pool: asyncpg.Pool, app: FastAPI
) -> None:
    check = Checker(app)
    await append(client, keys.acme, "ada-1", "ada", "one", "two")
    await append(client, keys.acme, "ada-2", "ada", "three")
    await append(client, keys.acme, "bob-1", "bob", "kept")
    await append(client, keys.globex, "ada-1", "ada", "another account's ada")
    await remember(memory_deps, "acme", "ada", "ada.private")
    shared = await remember(memory_deps, "acme", "ada", "ada.shared", "shared")
    await remember(memory_deps, "acme", "bob", "bob.private")
    await remember(memory_deps, "globex", "ada", "ada.private")
    mcp = await issue_key(PostgresApiKeys(pool), "acme", "test", "gateway", surface="mcp")

    assert check(await client.delete("/v1/users/ada"), USER)["error"]["code"] == "unauthorized"
    refused = check(await client.delete("/v1/users/ada", headers={"Authorization": f"Bearer {mcp}"}), USER)
    assert refused["error"]["code"] == "forbidden" and "mcp" in refused["error"]["message"]
    for bad in ("a%0A", "x" * 129, "a b"):
        answer = await client.delete(f"/v1/users/{bad}", headers=keys.acme)
        assert answer.status_code == 422, bad
        assert check(answer, USER)["error"]["field"] == "user_id"
    missing = await client.delete("/v1/users/nobody", headers=keys.acme)
    assert missing.status_code == 404 and "'nobody'" in check(missing, USER)["error"]["message"]
    assert (await client.get("/v1/threads/ada-1", headers=keys.acme)).status_code == 200  # nothing erased yet

    response = await client.delete("/v1/users/ada", headers=keys.acme)
    assert response.status_code == 200, response.text
    report = check(response, USER)
    assert report["user_id"] == "ada" and report["completed_at"]
    erased = report["erased"]
    assert erased["threads"]["threads"] == 2
    assert [d["thread_id"] for d in erased["threads"]["deletions"]] == ["ada-1", "ada-2"]
    assert erased["threads"]["deleted"]["journal"] == {"messages": 3}
    assert erased["threads"]["deleted"]["thread"] == {"rows": 2}
    assert erased["memory"] == {
        "private_entries": 1,
        "unlinked_entries": 1,
        "quarantine_deleted": 0,
        "quarantine_unlinked": 0,
    }
    for thread in ("ada-1", "ada-2"):
        assert (await client.get(f"/v1/threads/{thread}", headers=keys.acme)).status_code == 404
    assert (await client.get("/v1/threads/bob-1", headers=keys.acme)).status_code == 200
    assert (await client.get("/v1/threads/ada-1", headers=keys.globex)).status_code == 200
    assert (await memory_deps.service.user_rows("test", "acme", "ada")).total == 0
    assert (await memory_deps.service.user_rows("test", "acme", "bob")).private == 1
    assert (await memory_deps.service.user_rows("test", "globex", "ada")).private == 1
    kept = await memory_deps.service.get(
        MemoryScope(environment="test", account_id="acme", agent_id="bot", user_id="bob"), shared
    )
    assert kept.author_user_id is None and kept.content == "ada said ada.shared"

    again = await client.delete("/v1/users/ada", headers=keys.acme)
    assert again.status_code == 200
    repeated = check(again, USER)
    assert repeated["erasure_id"] != report["erasure_id"]
    assert repeated["erased"]["threads"] == {"threads": 0, "deletions": [], "deleted": {}}
    assert set(repeated["erased"]["memory"].values()) == {0}


async def test_an_erasure_stopped_by_the_broker_answers_503_and_the_same_call_finishes_it(
    broker_settings: Settings,
    journal: SlateJournal,
    pool: asyncpg.Pool,
    events: DeletionEvents,
    memory_deps: MemoryDeps,
    keys: Keys,
) -> None:
    failures = [DeletionNotPublished("the broker did not confirm the record (injected)")]

    async def flaky(deletion_id: int, tombstone: Tombstone, requested_at: datetime) -> None:
        if failures:
            raise failures.pop()
        await events.publish(deletion_id, tombstone, requested_at)

    app = create_app(
        build_api_deps(broker_settings, journal, pool, memory=memory_deps, publish_deletion=flaky)
    )
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://memstream.test"
    ) as client:
        await append(client, keys.acme, "ada-1", "ada", "one")
        await append(client, keys.acme, "ada-2", "ada", "two")
        await remember(memory_deps, "acme", "ada", "ada.private")
        stopped = await client.delete("/v1/users/ada", headers=keys.acme)
        assert stopped.status_code == 503, stopped.text
        error = Checker(app)(stopped, USER)["error"]
        assert error["code"] == "erasure_incomplete"
        assert "steps done: none, threads deleted so far: 1" in error["message"]
        assert (await memory_deps.service.user_rows("test", "acme", "ada")).private == 1  # not reached yet
        finished = await client.delete("/v1/users/ada", headers=keys.acme)
        assert finished.status_code == 200, finished.text
        erased = finished.json()["erased"]
        assert [d["thread_id"] for d in erased["threads"]["deletions"]] == ["ada-1", "ada-2"]
        assert erased["threads"]["deleted"]["journal"] == {"messages": 2}
        assert erased["memory"]["private_entries"] == 1
        for thread in ("ada-1", "ada-2"):
            assert (await client.get(f"/v1/threads/{thread}", headers=keys.acme)).status_code == 404
