from __future__ import annotations

from typing import Any

import asyncpg
import httpx
import pytest

from core.threads import MAX_METADATA_BYTES, WINDOW_FIELD

from ..conftest import Keys


async def test_put_creates_then_replaces(client: httpx.AsyncClient, keys: Keys) -> None:
    body = {"agent_id": "bot", "user_id": "u1", "metadata": {"channel": "web"}}
    created = await client.put("/v1/threads/t1", json=body, headers=keys.acme)
    assert created.status_code == 201
    thread = created.json()
    assert {k: thread[k] for k in ("thread_id", "account_id", "environment", "agent_id", "user_id")} == {
        "thread_id": "t1",
        "account_id": "acme",
        "environment": "test",
        "agent_id": "bot",
        "user_id": "u1",
    }
    assert (thread["metadata"], thread["window_size"]) == ({"channel": "web"}, 20)

    replaced = await client.put(
        "/v1/threads/t1",
        json={**body, "metadata": {"config": {"max_working_memory_messages": 4}}},
        headers=keys.acme,
    )
    assert replaced.status_code == 200
    assert replaced.json()["metadata"] == {"config": {"max_working_memory_messages": 4}}
    assert replaced.json()["window_size"] == 4

    fetched = await client.get("/v1/threads/t1", headers=keys.acme)
    assert fetched.status_code == 200 and fetched.json() == replaced.json()


@pytest.mark.parametrize(
    "change",
    [{"agent_id": "other-bot"}, {"user_id": "u2"}, {"user_id": None}],
)
async def test_put_cannot_change_agent_or_user(
    client: httpx.AsyncClient, keys: Keys, change: dict[str, Any]
) -> None:
    body = {"agent_id": "bot", "user_id": "u1", "metadata": {"v": 1}}
    assert (await client.put("/v1/threads/t1", json=body, headers=keys.acme)).status_code == 201
    response = await client.put(
        "/v1/threads/t1", json={**body, **change, "metadata": {"v": 2}}, headers=keys.acme
    )
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "conflict"
    assert "never changes" in response.json()["error"]["message"]
    assert (await client.get("/v1/threads/t1", headers=keys.acme)).json()["metadata"] == {"v": 1}


async def test_get_missing_is_404(client: httpx.AsyncClient, keys: Keys) -> None:
    response = await client.get("/v1/threads/nope", headers=keys.acme)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    assert "PUT /v1/threads/nope" in response.json()["error"]["message"]


BAD_METADATA = [
    ({"config": {"max_working_memory_messages": 0}}, WINDOW_FIELD, "got 0"),
    ({"config": {"max_working_memory_messages": 21}}, WINDOW_FIELD, "got 21"),
    ({"config": {"max_working_memory_messages": -1}}, WINDOW_FIELD, "got -1"),
    ({"config": {"max_working_memory_messages": "5"}}, WINDOW_FIELD, "got a string"),
    ({"config": {"max_working_memory_messages": 5.5}}, WINDOW_FIELD, "got a number with a fraction"),
    ({"config": {"max_working_memory_messages": True}}, WINDOW_FIELD, "got a boolean"),
    ({"config": "fast"}, "metadata.config", "must be an object"),
    ([1, 2], "metadata", "must be a JSON object"),
    ("text", "metadata", "must be a JSON object"),
    ({"pad": "x" * MAX_METADATA_BYTES}, "metadata", "the limit is 65536 bytes"),
]


@pytest.mark.parametrize(("metadata", "field", "reason"), BAD_METADATA)
async def test_put_invalid_metadata_is_422_and_writes_nothing(
    client: httpx.AsyncClient, keys: Keys, pool: asyncpg.Pool, metadata: object, field: str, reason: str
) -> None:
    response = await client.put(
        "/v1/threads/t1", json={"agent_id": "bot", "metadata": metadata}, headers=keys.acme
    )
    assert response.status_code == 422
    error = response.json()["error"]
    assert (error["code"], error["field"]) == ("invalid_input", field)
    assert reason in error["message"]
    assert await pool.fetchval("SELECT count(*) FROM threads") == 0


@pytest.mark.parametrize(("metadata", "field", "reason"), BAD_METADATA)
async def test_patch_invalid_metadata_is_422_and_changes_nothing(
    client: httpx.AsyncClient, keys: Keys, metadata: object, field: str, reason: str
) -> None:
    original = {"keep": True, "config": {"max_working_memory_messages": 7}}
    await client.put("/v1/threads/t1", json={"agent_id": "bot", "metadata": original}, headers=keys.acme)
    response = await client.patch("/v1/threads/t1", json={"metadata": metadata}, headers=keys.acme)
    assert response.status_code == 422
    error = response.json()["error"]
    assert (error["field"], reason in error["message"]) == (field, True)
    assert (await client.get("/v1/threads/t1", headers=keys.acme)).json()["metadata"] == original


@pytest.mark.parametrize(
    ("body", "field", "reason"),
    [
        ({}, "agent_id", "Field required"),
        ({"agent_id": "bad agent"}, "agent_id", "must be 1-128 characters"),
        ({"agent_id": "bot", "user_id": ""}, "user_id", "must be 1-128 characters"),
        ({"agent_id": "bot", "colour": "red"}, "colour", "Extra inputs are not permitted"),
    ],
)
async def test_put_invalid_body_is_422(
    client: httpx.AsyncClient, keys: Keys, pool: asyncpg.Pool, body: dict[str, Any], field: str, reason: str
) -> None:
    response = await client.put("/v1/threads/t1", json=body, headers=keys.acme)
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["field"] == field and reason in error["message"]
    assert await pool.fetchval("SELECT count(*) FROM threads") == 0


async def test_invalid_thread_id_is_422(client: httpx.AsyncClient, keys: Keys) -> None:
    response = await client.put("/v1/threads/has%20space", json={"agent_id": "bot"}, headers=keys.acme)
    assert response.status_code == 422
    assert response.json()["error"]["field"] == "thread_id"


async def test_patch_merges(client: httpx.AsyncClient, keys: Keys) -> None:
    await client.put(
        "/v1/threads/t1",
        json={"agent_id": "bot", "metadata": {"a": 1, "config": {"x": 1}}},
        headers=keys.acme,
    )
    response = await client.patch(
        "/v1/threads/t1",
        json={"metadata": {"a": None, "b": 2, "config": {"max_working_memory_messages": 5}}},
        headers=keys.acme,
    )
    assert response.status_code == 200
    assert response.json()["metadata"] == {"b": 2, "config": {"x": 1, "max_working_memory_messages": 5}}
    assert response.json()["window_size"] == 5


async def test_patch_missing_thread_is_404(client: httpx.AsyncClient, keys: Keys) -> None:
    response = await client.patch("/v1/threads/t1", json={"metadata": {"a": 1}}, headers=keys.acme)
    assert response.status_code == 404


async def test_malformed_json_is_422(client: httpx.AsyncClient, keys: Keys) -> None:
    response = await client.put(
        "/v1/threads/t1", content=b'{"agent_id": ', headers={**keys.acme, "content-type": "application/json"}
    )
    assert response.status_code == 422
    assert "not valid JSON" in response.json()["error"]["message"]


async def test_list_threads_pages_through_the_callers_account_only(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    for i in range(5):
        body = {"agent_id": "bot" if i % 2 == 0 else "helper", "user_id": f"u{i % 2}"}
        assert (await client.put(f"/v1/threads/list-{i}", json=body, headers=keys.acme)).status_code == 201
    assert (
        await client.put("/v1/threads/list-x", json={"agent_id": "bot"}, headers=keys.globex)
    ).status_code == 201

    seen: list[str] = []
    cursor: str | None = None
    while True:
        params = {"limit": 2} | ({"cursor": cursor} if cursor else {})
        page = (await client.get("/v1/threads", params=params, headers=keys.acme)).json()
        seen += [t["thread_id"] for t in page["threads"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [f"list-{i}" for i in range(5)]  # globex's thread is not there

    only = await client.get("/v1/threads", params={"agent_id": "helper", "user_id": "u1"}, headers=keys.acme)
    assert [t["thread_id"] for t in only.json()["threads"]] == ["list-1", "list-3"]
    assert only.json()["next_cursor"] is None
    assert (await client.get("/v1/threads", params={"limit": 0}, headers=keys.acme)).status_code == 422
    assert (await client.get("/v1/threads", params={"agent_id": "a b"}, headers=keys.acme)).status_code == 422
    assert (await client.get("/v1/threads")).status_code == 401
