"""Keys only in the Authorization header, and only one of them (issue 9, finding 17)."""

from __future__ import annotations

import asyncpg
import httpx
import pytest

from memstream.api.request_guard import has_json_body
from sinks.slatedb.journal import SlateJournal

from .conftest import Keys


def key_of(keys: Keys) -> str:
    return keys.acme["Authorization"].removeprefix("Bearer ")


@pytest.mark.parametrize(
    "query",
    [
        lambda key: {"api_key": key},
        lambda key: {"API_KEY": key},
        lambda key: {"apikey": key},
        lambda key: {"access_token": key},
        lambda key: {"token": "anything"},
        lambda key: {"after": "-1", "k": key},  # a key under any name
    ],
)
async def test_a_key_in_the_query_string_is_refused(
    client: httpx.AsyncClient, keys: Keys, pool: asyncpg.Pool, journal: SlateJournal, query: object
) -> None:
    key = key_of(keys)
    params = query(key)  # type: ignore[operator]
    body = {"agent_id": "bot", "messages": [{"role": "user", "content": "hi"}]}
    for headers in ({}, keys.acme):  # refused even when the header is there too
        read = await client.get("/v1/threads/t1/messages", params=params, headers=headers)
        append = await client.post("/v1/threads/t1/messages", params=params, json=body, headers=headers)
        for response in (read, append):
            assert response.status_code == 400, response.text
            error = response.json()["error"]
            assert error["code"] == "api_key_in_query"
            assert "Authorization: Bearer" in error["message"]
            assert key not in response.text
    assert await journal.last_seq() == 0
    assert await pool.fetchval("SELECT count(*) FROM threads") == 0


async def test_two_authorization_headers_are_refused(
    client: httpx.AsyncClient, keys: Keys, pool: asyncpg.Pool, journal: SlateJournal
) -> None:
    body = {"agent_id": "bot", "messages": [{"role": "user", "content": "hi"}]}
    for second in (keys.acme["Authorization"], keys.globex["Authorization"], "Bearer nonsense"):
        headers = [("Authorization", keys.acme["Authorization"]), ("Authorization", second)]
        response = await client.post("/v1/threads/t1/messages", json=body, headers=headers)
        assert response.status_code == 400, response.text
        assert response.json()["error"]["code"] == "duplicate_authorization"
        assert "exactly one" in response.json()["error"]["message"]
    assert await journal.last_seq() == 0
    assert await pool.fetchval("SELECT count(*) FROM threads") == 0
    one = await client.post("/v1/threads/t1/messages", json=body, headers=keys.acme)
    assert one.status_code == 201


async def test_ordinary_query_parameters_still_work(client: httpx.AsyncClient, keys: Keys) -> None:
    made = await client.put("/v1/threads/t1", json={"agent_id": "bot"}, headers=keys.acme)
    assert made.status_code == 201
    page = await client.get(
        "/v1/threads/t1/messages", params={"after": "-1", "limit": "5"}, headers=keys.acme
    )
    assert page.status_code == 200


@pytest.mark.parametrize(
    ("content_type", "method", "expected"),
    [
        (None, "POST", True),
        (None, "GET", False),
        (b"application/json", "POST", True),
        (b"Application/JSON; charset=utf-8", "PUT", True),
        (b" application/json ;charset=utf-8", "POST", True),
        (b"application/merge-patch+json", "PATCH", True),
        (b"application/jsonx", "POST", False),
        (b"text/plain", "POST", False),
        (b"text/json", "POST", False),
        (b"json", "POST", False),
    ],
)
def test_which_bodies_are_json(content_type: bytes | None, method: str, expected: bool) -> None:
    headers = [] if content_type is None else [(b"content-type", content_type)]
    assert has_json_body({"type": "http", "method": method, "headers": headers}) is expected
