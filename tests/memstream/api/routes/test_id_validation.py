"""Ids ending in a line break (issue 9, finding 1): `re.match` with a `$`-terminated pattern let
`"t1\\n"` through, and a thread with such an id crash-looped the thresholds processor. Every way
an id enters the API (path as %0A, body, query, tool invocation) is now a 422 naming the field and
the character, and nothing is stored."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import asyncpg
import httpx
import pytest

from sinks.slatedb.journal import SlateJournal

from ..conftest import Keys

BAD_ENDINGS = ["\n", "\r", "\r\n", "\x00", "\u2028"]


async def nothing_stored(pool: asyncpg.Pool, journal: SlateJournal) -> None:
    assert await journal.last_seq() == 0
    assert await pool.fetchval("SELECT count(*) FROM threads") == 0
    assert await pool.fetchval("SELECT count(*) FROM agents") == 0
    assert await pool.fetchval("SELECT count(*) FROM memory_entries") == 0


def assert_id_error(response: httpx.Response, field: str) -> None:
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == field or error["field"].startswith(f"{field}."), error
    assert error["code"] in ("invalid_input", "invalid_text")  # NUL: refused as text before routing
    assert "U+" in error["message"] or "NUL" in error["message"]


def message(**extra: Any) -> dict[str, Any]:
    return {"message_id": "m1", "role": "user", "content": "hello", **extra}


@pytest.mark.parametrize("ending", ["\n", "\r", "\u2028"])
async def test_thread_id_in_the_path(
    client: httpx.AsyncClient, keys: Keys, pool: asyncpg.Pool, journal: SlateJournal, ending: str
) -> None:
    thread = quote("t1" + ending, safe="")  # t1%0A ...
    put = await client.put(f"/v1/threads/{thread}", json={"agent_id": "bot"}, headers=keys.acme)
    assert_id_error(put, "thread_id")
    append = await client.post(
        f"/v1/threads/{thread}/messages",
        json={"agent_id": "bot", "messages": [message()]},
        headers=keys.acme,
    )
    assert_id_error(append, "thread_id")
    assert "U+" in append.json()["error"]["message"]
    for path in ("", "/messages", "/context"):
        read = await client.get(f"/v1/threads/{thread}{path}", headers=keys.acme)
        assert_id_error(read, "thread_id")
    await nothing_stored(pool, journal)


@pytest.mark.parametrize("ending", BAD_ENDINGS)
@pytest.mark.parametrize(
    ("body", "field"),
    [
        (lambda e: {"agent_id": "bot" + e, "messages": [message()]}, "agent_id"),
        (lambda e: {"agent_id": "bot", "user_id": "u1" + e, "messages": [message()]}, "user_id"),
        (lambda e: {"agent_id": "bot", "messages": [message(message_id="m1" + e)]}, "messages[0].message_id"),
        (
            lambda e: {
                "agent_id": "bot",
                "messages": [
                    {"role": "assistant", "tool_call": {"id": "c1" + e, "name": "f", "arguments": "{}"}}
                ],
            },
            "messages[0].tool_call",
        ),
    ],
)
async def test_ids_in_the_append_body(
    client: httpx.AsyncClient,
    keys: Keys,
    pool: asyncpg.Pool,
    journal: SlateJournal,
    ending: str,
    body: Any,
    field: str,
) -> None:
    response = await client.post("/v1/threads/t1/messages", json=body(ending), headers=keys.acme)
    assert_id_error(response, field)
    await nothing_stored(pool, journal)


@pytest.mark.parametrize("ending", ["\n", "\r\n"])
async def test_ids_in_a_thread_body(
    client: httpx.AsyncClient, keys: Keys, pool: asyncpg.Pool, journal: SlateJournal, ending: str
) -> None:
    for body, field in [
        ({"agent_id": "bot" + ending}, "agent_id"),
        ({"agent_id": "b", "user_id": "u" + ending}, "user_id"),
    ]:
        assert_id_error(await client.put("/v1/threads/t1", json=body, headers=keys.acme), field)
    await nothing_stored(pool, journal)


@pytest.mark.parametrize("ending", ["\n", "\r"])
async def test_ids_of_agents_users_and_tool_calls(
    memory_client: httpx.AsyncClient, keys: Keys, pool: asyncpg.Pool, journal: SlateJournal, ending: str
) -> None:
    client = memory_client
    bind = await client.put(
        f"/v1/agents/{quote('bot' + ending, safe='')}", json={"capabilities": ["memory"]}, headers=keys.acme
    )
    assert_id_error(bind, "agent_id")
    listing = await client.get("/v1/agents/bot/memory", params={"user_id": "u1" + ending}, headers=keys.acme)
    assert_id_error(listing, "user_id")
    store = {"key": "k", "content": "The user likes tea.", "category": "user_profile"}
    for extra, field in [
        ({"user_id": "u1" + ending}, "user_id"),
        ({"thread_id": "t1" + ending}, "thread_id"),
    ]:
        call = await client.post(
            "/v1/agents/bot/tools/memory_store", json={"arguments": store, **extra}, headers=keys.acme
        )
        assert_id_error(call, field)
    await nothing_stored(pool, journal)
