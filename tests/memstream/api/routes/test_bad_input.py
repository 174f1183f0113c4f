"""Bad input is a 4xx with a specific code and stores nothing (issue 9, finding 15): deep JSON,
NUL characters, lone surrogates, numbers no store can hold, bodies that are not UTF-8. Before,
these were 500s (RecursionError, Postgres, chdb), a 503 `journal_unavailable` (`after` >= 2^64)
or a 400 `http_error` where the documentation says 422."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest

from core.chat.offline import OfflineChatModel
from core.config import Settings
from core.transcripts.tools import JournalTools
from memstream.api import create_app
from memstream.api.deps import MemoryDeps
from memstream.wiring.api import build_api_deps
from sinks.clickhouse.store import ClickHouseTranscriptStore
from sinks.slatedb.journal import SlateJournal

from ..conftest import Keys

DEEP = "[" * 10_000 + "]" * 10_000
JSON = {"content-type": "application/json"}


@pytest.fixture
async def client(
    api_settings: Settings,
    journal: SlateJournal,
    pool: asyncpg.Pool,
    memory_deps: MemoryDeps,
    transcript_store: ClickHouseTranscriptStore,
) -> AsyncIterator[httpx.AsyncClient]:
    """The API as the node serves it: agent memory and the journal tools."""
    tools = JournalTools.build(transcript_store, OfflineChatModel())
    app = create_app(build_api_deps(api_settings, journal, pool, memory=memory_deps, transcripts=tools))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://memstream.test"
    ) as c:
        yield c


@pytest.fixture
async def bound(client: httpx.AsyncClient, keys: Keys, pool: asyncpg.Pool) -> None:
    """Agent `bot` with Memory bound (the only row the tests expect to find)."""
    response = await client.put("/v1/agents/bot", json={"capabilities": ["memory"]}, headers=keys.acme)
    assert response.status_code == 200


async def nothing_stored(pool: asyncpg.Pool, journal: SlateJournal) -> None:
    assert await journal.last_seq() == 0
    assert await pool.fetchval("SELECT count(*) FROM threads") == 0
    assert await pool.fetchval("SELECT count(*) FROM memory_entries") == 0
    assert await pool.fetchval("SELECT count(*) FROM memory_outbox") == 0


def assert_error(response: httpx.Response, status: int, code: str, field: str | None, *words: str) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert (error["code"], error.get("field")) == (code, field), error
    for word in words:
        assert word in error["message"], error


def raw(body: str) -> bytes:
    """A JSON body as text (escapes such as \\ud800 stay escapes on the wire)."""
    return body.encode()


async def test_deep_tool_call_arguments_in_a_message(
    client: httpx.AsyncClient, keys: Keys, pool: asyncpg.Pool, journal: SlateJournal
) -> None:
    call = {"id": "c1", "name": "f", "arguments": '{"a": ' + DEEP + "}"}
    body = {"agent_id": "bot", "messages": [{"role": "assistant", "tool_call": call}]}
    response = await client.post("/v1/threads/t1/messages", json=body, headers=keys.acme)
    assert_error(response, 422, "json_too_deep", "messages[0].tool_call", "tool_call.arguments", "deeper")
    await nothing_stored(pool, journal)


async def test_a_deep_request_body(
    client: httpx.AsyncClient, keys: Keys, pool: asyncpg.Pool, journal: SlateJournal
) -> None:
    for path, body in [
        ("/v1/threads/t1/messages", '{"agent_id": "bot", "messages": ' + DEEP + "}"),
        ("/v1/threads/t1", '{"agent_id": "bot", "metadata": {"a": ' + DEEP + "}}"),
    ]:
        response = await client.request(
            "POST" if path.endswith("messages") else "PUT",
            path,
            content=raw(body),
            headers={**keys.acme, **JSON},
        )
        assert_error(response, 422, "json_too_deep", None, "deeper")
    await nothing_stored(pool, journal)


@pytest.mark.usefixtures("bound")
@pytest.mark.parametrize(
    "tool", ["memory_store", "memory_recall", "journal_message_search", "journal_tool_call_view"]
)
async def test_deep_tool_arguments(
    client: httpx.AsyncClient, keys: Keys, pool: asyncpg.Pool, journal: SlateJournal, tool: str
) -> None:
    as_text = await client.post(
        f"/v1/agents/bot/tools/{tool}", json={"arguments": '{"query": ' + DEEP + "}"}, headers=keys.acme
    )
    assert_error(as_text, 422, "json_too_deep", "arguments", "deeper")
    as_object = await client.post(
        f"/v1/agents/bot/tools/{tool}",
        content=raw('{"arguments": {"query": ' + DEEP + "}}"),
        headers={**keys.acme, **JSON},
    )
    assert_error(as_object, 422, "json_too_deep", None, "deeper")
    await nothing_stored(pool, journal)


@pytest.mark.usefixtures("bound")
async def test_nul_in_key_prefix(
    client: httpx.AsyncClient, keys: Keys, pool: asyncpg.Pool, journal: SlateJournal
) -> None:
    listing = await client.get("/v1/agents/bot/memory", params={"key_prefix": "user.\x00"}, headers=keys.acme)
    assert_error(listing, 422, "invalid_text", "key_prefix", "NUL")
    recall = await client.post(
        "/v1/agents/bot/tools/memory_recall",
        json={"arguments": json.dumps({"query": "tea", "key_prefix": "user.\x00"})},
        headers=keys.acme,
    )
    assert_error(recall, 422, "invalid_text", "arguments.key_prefix", "NUL")
    await nothing_stored(pool, journal)


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ('{"arguments": {"query": "refund \\ud800"}}', "arguments.query"),
        ('{"arguments": "{\\"query\\": \\"refund \\\\udc00\\"}"}', "arguments.query"),  # JSON text
        ('{"arguments": {"query": "refund \\u0000"}}', "arguments.query"),
    ],
)
async def test_search_query_that_no_store_can_hold(
    client: httpx.AsyncClient, keys: Keys, arguments: str, field: str
) -> None:
    response = await client.post(
        "/v1/agents/bot/tools/journal_message_search", content=raw(arguments), headers={**keys.acme, **JSON}
    )
    assert_error(response, 422, "invalid_text", field)


@pytest.mark.parametrize("after", [2**64, 2**64 + 1, 2**63, 10**30])
async def test_after_beyond_64_bits(client: httpx.AsyncClient, keys: Keys, after: int) -> None:
    made = await client.put("/v1/threads/t1", json={"agent_id": "bot"}, headers=keys.acme)
    assert made.status_code == 201
    response = await client.get("/v1/threads/t1/messages", params={"after": str(after)}, headers=keys.acme)
    assert_error(response, 422, "invalid_input", "after", "less than or equal to")


async def test_tool_call_view_numbers_beyond_64_bits(client: httpx.AsyncClient, keys: Keys) -> None:
    for name in ("offset", "occurrence"):
        response = await client.post(
            "/v1/agents/bot/tools/journal_tool_call_view",
            json={"arguments": {"tool_call_id": "c1", name: 2**70}},
            headers=keys.acme,
        )
        assert_error(response, 422, "invalid_input", f"arguments.{name}", "9223372036854775807")


async def test_body_that_is_not_utf8_is_422_as_documented(
    client: httpx.AsyncClient, keys: Keys, pool: asyncpg.Pool, journal: SlateJournal
) -> None:
    body = b'{"agent_id": "bot", "messages": [{"role": "user", "content": "caf\xe9"}]}'  # Latin-1
    response = await client.post("/v1/threads/t1/messages", content=body, headers={**keys.acme, **JSON})
    assert_error(response, 422, "invalid_encoding", None, "not valid UTF-8", "0xe9")
    await nothing_stored(pool, journal)


@pytest.mark.parametrize(
    ("method", "path", "body", "code", "field"),
    [
        (
            "POST",
            "/v1/threads/t1/messages",
            '{"agent_id": "bot", "messages": [{"role": "user", "content": "a\\u0000b"}]}',
            "invalid_text",
            "messages[0].content",
        ),
        (
            "POST",
            "/v1/threads/t1/messages",
            '{"agent_id": "bot", "messages": [{"role": "tool", "tool_call": {"id": "c", "result": '
            '"\\udfff"}}]}',
            "invalid_text",
            "messages[0].tool_call.result",
        ),
        (
            "PUT",
            "/v1/threads/t1",
            '{"agent_id": "bot", "metadata": {"a": "\\ud800"}}',
            "invalid_text",
            "metadata.a",
        ),
        (
            "PUT",
            "/v1/threads/t1",
            '{"agent_id": "bot", "metadata": {"k\\u0000": 1}}',
            "invalid_text",
            "metadata",
        ),
        (
            "PUT",
            "/v1/threads/t1",
            '{"agent_id": "bot", "metadata": {"a": 1' + "0" * 5000 + "}}",
            "number_out_of_range",
            None,
        ),
        ("PUT", "/v1/threads/t1", '{"agent_id": "bot", "metadata": {"a": NaN}}', "number_out_of_range", None),
        (
            "POST",
            "/v1/agents/bot/tools/memory_store",
            '{"arguments": {"key": "k", "content": "tea \\ud800", "category": "user_profile"}}',
            "invalid_text",
            "arguments.content",
        ),
        (
            "POST",
            "/v1/agents/bot/tools/memory_store",
            json.dumps(
                {"arguments": json.dumps({"key": "k", "content": "tea \x00", "category": "user_profile"})}
            ),
            "invalid_text",
            "arguments.content",
        ),
        ("PUT", "/v1/agents/bot", '{"capabilities": ["memory\\u0000"]}', "invalid_text", "capabilities[0]"),
        (
            "POST",
            "/v1/agents/bot/tools/memory_store",
            '{"arguments": {"key": "user.name\\u2028", "content": "Ada", "category": "user_profile"}}',
            "invalid_input",
            "key",
        ),
    ],
)
@pytest.mark.usefixtures("bound")
async def test_text_and_numbers_no_store_can_hold(
    client: httpx.AsyncClient,
    keys: Keys,
    pool: asyncpg.Pool,
    journal: SlateJournal,
    method: str,
    path: str,
    body: str,
    code: str,
    field: str | None,
) -> None:
    response = await client.request(method, path, content=raw(body), headers={**keys.acme, **JSON})
    assert_error(response, 422, code, field)
    await nothing_stored(pool, journal)
    assert await pool.fetchval("SELECT capabilities FROM agents") == ["memory"]  # unchanged


@pytest.mark.usefixtures("bound")
async def test_editing_an_entry_with_a_lone_surrogate_changes_nothing(
    client: httpx.AsyncClient, keys: Keys, pool: asyncpg.Pool
) -> None:
    stored = await client.post(
        "/v1/agents/bot/tools/memory_store",
        json={"arguments": {"key": "k", "content": "The user likes tea.", "category": "project_fact"}},
        headers=keys.acme,
    )
    entry: dict[str, Any] = stored.json()["result"]["entry"]
    outbox = await pool.fetchval("SELECT count(*) FROM memory_outbox")
    response = await client.patch(
        f"/v1/agents/bot/memory/{entry['entry_id']}",
        content=raw('{"content": "The user likes \\ud83d."}'),
        headers={**keys.acme, **JSON},
    )
    assert_error(response, 422, "invalid_text", "content", "lone surrogate")
    after = await client.get(f"/v1/agents/bot/memory/{entry['entry_id']}", headers=keys.acme)
    assert after.json()["content"] == "The user likes tea."
    assert await pool.fetchval("SELECT count(*) FROM memory_outbox") == outbox
