from __future__ import annotations

from typing import Any

import asyncpg
import httpx
import pytest

from core.journal.models import ThreadRef
from sinks.slatedb.journal import SlateJournal

from ..conftest import Keys


def user(text: str, message_id: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"role": "user", "content": text}
    if message_id is not None:
        body["message_id"] = message_id
    return body


async def test_append_creates_thread_and_returns_durable_messages(
    client: httpx.AsyncClient, keys: Keys, journal: SlateJournal
) -> None:
    body = {
        "agent_id": "bot",
        "user_id": "u1",
        "messages": [
            user("Where is my order?", "m1"),
            {
                "message_id": "m2",
                "role": "assistant",
                "tool_call": {"id": "c1", "name": "lookup", "arguments": "{}"},
            },
            {"message_id": "m3", "role": "tool", "tool_call": {"id": "c1", "result": "shipped"}},
        ],
    }
    response = await client.post("/v1/threads/t1/messages", json=body, headers=keys.acme)
    assert response.status_code == 201
    stored = response.json()["messages"]
    assert [(m["message_id"], m["offset"]) for m in stored] == [("m1", 0), ("m2", 1), ("m3", 2)]
    assert all(m["agent_id"] == "bot" and m["user_id"] == "u1" and m["account_id"] == "acme" for m in stored)
    assert [m["seq"] for m in stored] == list(range(stored[0]["seq"], stored[0]["seq"] + 3))
    assert all(m["created_at"] and m["token_count"] >= 0 for m in stored)
    assert stored[0]["token_count"] > 0
    # durable and readable through the journal itself
    thread = (await client.get("/v1/threads/t1", headers=keys.acme)).json()
    assert (thread["agent_id"], thread["user_id"]) == ("bot", "u1")
    last = await journal.last(ThreadRef(environment="test", account_id="acme", thread_id="t1"), 10)
    assert [m.message_id for m in last] == ["m1", "m2", "m3"]


async def test_idempotent_retry_returns_same_offsets(client: httpx.AsyncClient, keys: Keys) -> None:
    body = {"agent_id": "bot", "messages": [user("a", "m1"), user("b", "m2")]}
    first = await client.post("/v1/threads/t1/messages", json=body, headers=keys.acme)
    retry = await client.post("/v1/threads/t1/messages", json=body, headers=keys.acme)
    assert first.status_code == retry.status_code == 201
    assert retry.json()["messages"] == first.json()["messages"]
    page = (await client.get("/v1/threads/t1/messages", headers=keys.acme)).json()
    assert [m["message_id"] for m in page["messages"]] == ["m1", "m2"]  # stored once


async def test_reused_message_id_with_other_content_is_409(client: httpx.AsyncClient, keys: Keys) -> None:
    await client.post(
        "/v1/threads/t1/messages", json={"agent_id": "bot", "messages": [user("a", "m1")]}, headers=keys.acme
    )
    response = await client.post(
        "/v1/threads/t1/messages", json={"messages": [user("changed", "m1")]}, headers=keys.acme
    )
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "conflict"


async def test_append_without_agent_to_missing_thread_is_404(
    client: httpx.AsyncClient, keys: Keys, pool: asyncpg.Pool
) -> None:
    response = await client.post(
        "/v1/threads/t1/messages", json={"messages": [user("hi")]}, headers=keys.acme
    )
    assert response.status_code == 404
    assert "pass agent_id" in response.json()["error"]["message"]
    assert await pool.fetchval("SELECT count(*) FROM threads") == 0


@pytest.mark.parametrize(
    "ids", [{"agent_id": "other"}, {"agent_id": "bot", "user_id": "u2"}, {"user_id": "u2"}]
)
async def test_append_contradicting_thread_is_409(
    client: httpx.AsyncClient, keys: Keys, ids: dict[str, str]
) -> None:
    await client.put("/v1/threads/t1", json={"agent_id": "bot", "user_id": "u1"}, headers=keys.acme)
    response = await client.post(
        "/v1/threads/t1/messages", json={**ids, "messages": [user("hi")]}, headers=keys.acme
    )
    assert response.status_code == 409
    page = (await client.get("/v1/threads/t1/messages", headers=keys.acme)).json()
    assert page["messages"] == []


@pytest.mark.parametrize(
    ("messages", "field", "reason"),
    [
        ([], "messages", "at least 1 item"),
        ([user("x")] * 1001, "messages", "at most 1000 items"),
        ([{"role": "user", "content": ""}], "messages[0]", "needs non-empty content"),
        ([user("ok"), {"role": "robot", "content": "x"}], "messages[1].role", "Input should be"),
        ([{"role": "tool", "content": "x"}], "messages[0]", "needs a tool_call"),
        (
            [{"role": "assistant", "tool_call": {"id": "c", "name": "f", "arguments": "[1]"}}],
            "messages[0].tool_call",
            "must encode a JSON object",
        ),
        ([{"role": "user", "content": "x", "extra": 1}], "messages[0].extra", "Extra inputs"),
        ([user("a", "dup"), user("b", "dup")], "messages[1].message_id", "more than once"),
        (
            [user("ok"), {"role": "user", "content": "x", "created_at": "2024-05-01T10:00:00"}],
            "messages[1].created_at",
            "needs a time zone",
        ),
        (
            [{"role": "user", "content": "x", "created_at": "2999-05-01T10:00:00Z"}],
            "messages[0].created_at",
            "is in the future",
        ),
    ],
)
async def test_invalid_append_is_422_and_writes_nothing(
    client: httpx.AsyncClient,
    keys: Keys,
    pool: asyncpg.Pool,
    journal: SlateJournal,
    messages: list[dict[str, Any]],
    field: str,
    reason: str,
) -> None:
    response = await client.post(
        "/v1/threads/t1/messages", json={"agent_id": "bot", "messages": messages}, headers=keys.acme
    )
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert (error["code"], error["field"]) == ("invalid_input", field)
    assert reason in error["message"]
    assert await pool.fetchval("SELECT count(*) FROM threads") == 0  # not even the auto-created thread
    assert await journal.last_seq() == 0


async def test_imported_history_keeps_its_created_at_everywhere(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    """An append may carry each message's original time: the answer, the messages page and the
    context's window show it, in UTC, in the journal's order."""
    messages = [
        {**user("from last year", "m1"), "created_at": "2025-03-04T05:06:07.123456+02:00"},
        {**user("from 2020", "m2"), "created_at": "2020-01-01T00:00:00Z"},
        user("now", "m3"),
    ]
    response = await client.post(
        "/v1/threads/t1/messages", json={"agent_id": "bot", "messages": messages}, headers=keys.acme
    )
    assert response.status_code == 201, response.text
    times = [m["created_at"] for m in response.json()["messages"]]
    assert times[:2] == ["2025-03-04T03:06:07.123456Z", "2020-01-01T00:00:00Z"]
    page = (await client.get("/v1/threads/t1/messages", headers=keys.acme)).json()
    assert [m["created_at"] for m in page["messages"]] == times
    assert [m["offset"] for m in page["messages"]] == [0, 1, 2]
    context = (await client.get("/v1/threads/t1/context", headers=keys.acme)).json()
    assert context["metadata"]["window_created_at"] == times
    assert [m["content"] for m in context["messages"]] == ["from last year", "from 2020", "now"]
    assert all("created_at" not in m for m in context["messages"])  # chat messages keep their shape


async def test_read_pages(client: httpx.AsyncClient, keys: Keys) -> None:
    await client.post(
        "/v1/threads/t1/messages",
        json={"agent_id": "bot", "messages": [user(f"m{i}") for i in range(5)]},
        headers=keys.acme,
    )
    page = (await client.get("/v1/threads/t1/messages?after=-1&limit=2", headers=keys.acme)).json()
    assert [m["content"] for m in page["messages"]] == ["m0", "m1"]
    assert page["next_after"] == 1
    page = (
        await client.get(f"/v1/threads/t1/messages?after={page['next_after']}&limit=10", headers=keys.acme)
    ).json()
    assert [m["content"] for m in page["messages"]] == ["m2", "m3", "m4"]
    assert page["next_after"] == 4
    page = (await client.get("/v1/threads/t1/messages?after=4", headers=keys.acme)).json()
    assert (page["messages"], page["next_after"]) == ([], 4)


@pytest.mark.parametrize(
    ("query", "field"), [("limit=0", "limit"), ("limit=1001", "limit"), ("after=-2", "after")]
)
async def test_read_bad_query_is_422(client: httpx.AsyncClient, keys: Keys, query: str, field: str) -> None:
    await client.put("/v1/threads/t1", json={"agent_id": "bot"}, headers=keys.acme)
    response = await client.get(f"/v1/threads/t1/messages?{query}", headers=keys.acme)
    assert response.status_code == 422
    assert response.json()["error"]["field"] == field


async def test_read_missing_thread_is_404(client: httpx.AsyncClient, keys: Keys) -> None:
    assert (await client.get("/v1/threads/nope/messages", headers=keys.acme)).status_code == 404


async def test_closed_journal_is_503(client: httpx.AsyncClient, keys: Keys, journal: SlateJournal) -> None:
    await client.post(
        "/v1/threads/t1/messages", json={"agent_id": "bot", "messages": [user("a")]}, headers=keys.acme
    )
    await journal.close()
    append = await client.post("/v1/threads/t1/messages", json={"messages": [user("b")]}, headers=keys.acme)
    read = await client.get("/v1/threads/t1/messages", headers=keys.acme)
    for response in (append, read):
        assert response.status_code == 503
        assert response.json()["error"]["code"] == "journal_unavailable"
        assert "closed" in response.json()["error"]["message"]
