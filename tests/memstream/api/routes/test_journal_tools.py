"""The journal tools over HTTP: real Postgres (keys, threads, bindings), the real chdb transcript
store and the offline chat model. Offered whether or not Memory is bound, never to MCP keys."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest

from core.auth import issue_key
from core.chat.offline import OfflineChatModel
from core.config import Settings
from core.stores.transcripts import TranscriptRow
from core.transcripts.tool_call_view import MAX_PAGE_BYTES
from core.transcripts.tools import JournalTools
from memstream.api import ApiDeps, create_app
from memstream.api.deps import MemoryDeps
from memstream.wiring.api import build_api_deps
from sinks.clickhouse.store import ClickHouseTranscriptStore
from sinks.postgres.api_keys import PostgresApiKeys
from sinks.slatedb.journal import SlateJournal
from tests.sinks.clickhouse.rows import row

from ..conftest import Keys

JOURNAL = ["journal_message_search", "journal_tool_call_view"]
MEMORY = ["memory_store", "memory_recall", "memory_forget"]
BIG_RESULT = "Zürich report € 😀 line\n" * 8_000  # > 200 KB, multi-byte characters


def transcript() -> list[TranscriptRow]:
    def acme(thread: str, offset: int, content: str, **extra: Any) -> TranscriptRow:
        return row(thread, offset, content, account_id="acme", agent_id="bot", **extra)

    return [
        acme("a1", 0, "Always be polite about the invoice refund.", role="system", user_id="alice"),
        acme("a1", 1, "My invoice 42 needs a refund.", user_id="alice"),
        acme("a1", 2, "The refund for invoice 42 is 30 euros.", role="assistant", user_id="alice"),
        acme(
            "a1",
            3,
            "",
            role="assistant",
            user_id="alice",
            tool_call_id="call-1",
            tool_name="report",
            tool_arguments='{"invoice": 42}',
        ),
        acme(
            "a1",
            4,
            "invoice refund",
            role="tool",
            user_id="alice",
            tool_call_id="call-1",
            tool_result=BIG_RESULT,
        ),
        acme("a2", 0, "Is an invoice refund possible in March?", user_id="alice"),
        acme("b1", 0, "Bob asks about an invoice refund.", user_id="bob"),
        acme("n1", 0, "An invoice refund question from a thread without a user."),
        acme("n1", 1, "", role="tool", tool_call_id="call-1", tool_result="the anonymous result"),
        row("g1", 0, "globex invoice refund", account_id="globex", agent_id="bot", user_id="alice"),
        row("o1", 0, "other agent invoice refund", account_id="acme", agent_id="bot2", user_id="alice"),
    ]


@pytest.fixture
async def journal_tools(transcript_store: ClickHouseTranscriptStore) -> JournalTools:
    await transcript_store.insert(transcript())
    return JournalTools.build(transcript_store, OfflineChatModel())


async def open_client(deps: ApiDeps) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(deps))
    async with httpx.AsyncClient(transport=transport, base_url="http://memstream.test") as client:
        yield client


@pytest.fixture
async def client(
    api_settings: Settings,
    journal: SlateJournal,
    pool: asyncpg.Pool,
    memory_deps: MemoryDeps,
    journal_tools: JournalTools,
) -> AsyncIterator[httpx.AsyncClient]:
    """Memory and the journal tools both served (as the node does)."""
    deps = build_api_deps(api_settings, journal, pool, memory=memory_deps, transcripts=journal_tools)
    async for client in open_client(deps):
        yield client


@pytest.fixture
async def journal_only_client(
    api_settings: Settings, journal: SlateJournal, pool: asyncpg.Pool, journal_tools: JournalTools
) -> AsyncIterator[httpx.AsyncClient]:
    """No agent memory on this server at all: the journal tools still work."""
    async for client in open_client(build_api_deps(api_settings, journal, pool, transcripts=journal_tools)):
        yield client


@pytest.fixture
async def mcp(pool: asyncpg.Pool) -> dict[str, str]:
    """Headers of an acme key issued to an MCP gateway."""
    key = await issue_key(PostgresApiKeys(pool), "acme", "test", "gateway", surface="mcp")
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
async def threads(client: httpx.AsyncClient, keys: Keys) -> None:
    for thread, user in [("a1", "alice"), ("a2", "alice"), ("b1", "bob"), ("n1", None)]:
        made = await client.put(
            f"/v1/threads/{thread}", json={"agent_id": "bot", "user_id": user}, headers=keys.acme
        )
        assert made.status_code == 201, made.text
    other = await client.put(
        "/v1/threads/o1", json={"agent_id": "bot2", "user_id": "alice"}, headers=keys.acme
    )
    assert other.status_code == 201


async def call(
    client: httpx.AsyncClient,
    headers: dict[str, str],
    tool: str,
    arguments: Any,
    agent: str = "bot",
    **extra: Any,
) -> httpx.Response:
    return await client.post(
        f"/v1/agents/{agent}/tools/{tool}", json={"arguments": arguments, **extra}, headers=headers
    )


def names(response: httpx.Response) -> list[str]:
    assert response.status_code == 200, response.text
    return [tool["function"]["name"] for tool in response.json()["tools"]]


async def test_offered_whether_or_not_memory_is_bound(client: httpx.AsyncClient, keys: Keys) -> None:
    assert names(await client.get("/v1/agents/bot/tools", headers=keys.acme)) == JOURNAL
    assert (await client.get("/v1/agents/bot", headers=keys.acme)).json()["tools"] == JOURNAL
    bound = await client.put("/v1/agents/bot", json={"capabilities": ["memory"]}, headers=keys.acme)
    assert bound.json()["tools"] == MEMORY + JOURNAL
    specs = (await client.get("/v1/agents/bot/tools", headers=keys.acme)).json()["tools"]
    assert [t["function"]["name"] for t in specs] == MEMORY + JOURNAL
    search, view = specs[3]["function"]["parameters"], specs[4]["function"]["parameters"]
    assert search["required"] == ["query"] and search["additionalProperties"] is False
    assert (search["properties"]["limit"]["minimum"], search["properties"]["limit"]["maximum"]) == (1, 50)
    assert search["properties"]["scope"]["enum"] == ["current_thread", "all_threads"]
    assert view["required"] == ["tool_call_id"]
    assert view["properties"]["length"]["maximum"] == MAX_PAGE_BYTES
    assert view["properties"]["part"]["enum"] == ["result", "arguments"]


async def test_works_without_memory_bound_or_served(
    journal_only_client: httpx.AsyncClient, keys: Keys
) -> None:
    assert names(await journal_only_client.get("/v1/agents/bot/tools", headers=keys.acme)) == JOURNAL
    found = await call(
        journal_only_client, keys.acme, "journal_message_search", {"query": "refund", "summarize": False}
    )
    assert found.status_code == 200, found.text
    assert found.json()["result"]["count"] == 1  # no user: the threads without a user, user/assistant only
    memory = await call(journal_only_client, keys.acme, "memory_store", {"key": "k"})
    assert (memory.status_code, memory.json()["error"]["code"]) == (404, "unknown_tool")


async def test_mcp_keys_never_see_the_journal_tools(
    client: httpx.AsyncClient, keys: Keys, mcp: dict[str, str]
) -> None:
    assert names(await client.get("/v1/agents/bot/tools", headers=mcp)) == []
    await client.put("/v1/agents/bot", json={"capabilities": ["memory"]}, headers=mcp)
    assert names(await client.get("/v1/agents/bot/tools", headers=mcp)) == MEMORY
    assert (await client.get("/v1/agents/bot", headers=mcp)).json()["tools"] == MEMORY
    for tool, arguments in [
        ("journal_message_search", {"query": "refund"}),
        ("journal_tool_call_view", {"tool_call_id": "call-1"}),
    ]:
        hidden = await call(client, mcp, tool, arguments)
        assert (hidden.status_code, hidden.json()["error"]["code"]) == (404, "unknown_tool")
        assert "journal" not in hidden.json()["error"]["message"].replace(tool, "")
        unknown = await call(client, mcp, "no_such_tool", arguments)
        assert unknown.json()["error"]["code"] == hidden.json()["error"]["code"]
    # the same account through an agent key
    assert (await call(client, keys.acme, "journal_message_search", {"query": "refund"})).status_code == 200


@pytest.mark.usefixtures("threads")
async def test_scope_follows_the_thread_and_the_user(client: httpx.AsyncClient, keys: Keys) -> None:
    async def threads_found(headers: dict[str, str], agent: str = "bot", **extra: Any) -> set[str]:
        response = await call(
            client,
            headers,
            "journal_message_search",
            {"query": "invoice refund", "limit": 50, "summarize": False},
            agent,
            **extra,
        )
        assert response.status_code == 200, response.text
        messages = response.json()["result"]["messages"]
        assert {m["role"] for m in messages} <= {"user", "assistant"}
        return {m["thread_id"] for m in messages}

    assert await threads_found(keys.acme, thread_id="a2") == {"a1", "a2"}  # acts for alice, the thread's user
    assert await threads_found(keys.acme, user_id="alice") == {"a1", "a2"}
    assert await threads_found(keys.acme, user_id="bob") == {"b1"}
    assert await threads_found(keys.acme) == {"n1"}  # no user: only the threads without a user
    assert await threads_found(keys.acme, thread_id="n1") == {"n1"}
    assert await threads_found(keys.globex, user_id="alice") == {"g1"}  # other account
    assert await threads_found(keys.acme, "bot2", user_id="alice") == {"o1"}  # other agent
    current = await call(
        client,
        keys.acme,
        "journal_message_search",
        {"query": "invoice refund", "scope": "current_thread", "summarize": False},
        thread_id="a2",
    )
    assert {m["thread_id"] for m in current.json()["result"]["messages"]} == {"a2"}
    no_thread = await call(
        client, keys.acme, "journal_message_search", {"query": "x", "scope": "current_thread"}
    )
    assert (no_thread.status_code, no_thread.json()["error"]["field"]) == (422, "arguments.scope")
    wrong_agent = await call(client, keys.acme, "journal_message_search", {"query": "x"}, thread_id="o1")
    assert wrong_agent.status_code == 409
    wrong_user = await call(
        client, keys.acme, "journal_message_search", {"query": "x"}, thread_id="a1", user_id="bob"
    )
    assert wrong_user.status_code == 409


async def test_limit_bounds_and_summaries_over_http(client: httpx.AsyncClient, keys: Keys) -> None:
    for limit in (0, 51):
        refused = await call(client, keys.acme, "journal_message_search", {"query": "refund", "limit": limit})
        error = refused.json()["error"]
        assert (refused.status_code, error["code"], error["field"]) == (
            422,
            "invalid_input",
            "arguments.limit",
        )
    for limit, expected in ((1, 1), (50, 3)):
        found = await call(
            client,
            keys.acme,
            "journal_message_search",
            {"query": "refund", "limit": limit, "summarize": False},
            user_id="alice",
        )
        assert (found.json()["result"]["limit"], found.json()["result"]["count"]) == (limit, expected)
    summarized = (
        await call(
            client, keys.acme, "journal_message_search", '{"query": "invoice refund"}', user_id="alice"
        )
    ).json()
    threads = summarized["result"]["threads"]
    assert {t["thread_id"] for t in threads} == {"a1", "a2"}
    assert all(t["summary"] and "refund" in t["summary"].lower() for t in threads)


async def test_tool_call_view_over_http(client: httpx.AsyncClient, keys: Keys, mcp: dict[str, str]) -> None:
    text, offset = "", 0
    while offset is not None:
        page = await call(
            client,
            keys.acme,
            "journal_tool_call_view",
            {"tool_call_id": "call-1", "offset": offset},
            user_id="alice",
        )
        assert page.status_code == 200, page.text
        result = page.json()["result"]
        assert result["total_bytes"] == len(BIG_RESULT.encode()) > 200_000
        text += result["content"]
        offset = result["next_offset"]
    assert text == BIG_RESULT
    missing = await call(
        client, keys.acme, "journal_tool_call_view", {"tool_call_id": "call-1"}, user_id="bob"
    )
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "tool_call_not_found")
    assert "call-1" in missing.json()["error"]["message"]
    other = await call(client, keys.globex, "journal_tool_call_view", {"tool_call_id": "call-1"})
    assert other.json()["error"]["code"] == "tool_call_not_found"
    inside = await call(
        client, keys.acme, "journal_tool_call_view", {"tool_call_id": "call-1", "offset": 2}, user_id="alice"
    )
    assert (inside.status_code, inside.json()["error"]["field"]) == (422, "arguments.offset")  # inside "ü"


@pytest.mark.usefixtures("threads")
async def test_a_thread_without_user_reads_no_users_transcripts(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    """Issue 9, finding 11: called from thread n1 (no user), both tools reach only the threads
    without a user, on every path; naming a user cannot widen that."""
    for arguments in (
        {"query": "invoice refund", "limit": 50, "summarize": False},
        {"query": "invoice refund", "limit": 50, "summarize": False, "scope": "current_thread"},
        {"query": "invoice refund", "limit": 50},
        {"query": "invoice refund", "limit": 50, "scope": "current_thread"},
    ):
        response = await call(client, keys.acme, "journal_message_search", arguments, thread_id="n1")
        assert response.status_code == 200, response.text
        result = response.json()["result"]
        found = result["messages"] if "messages" in result else result["threads"]
        assert {m["thread_id"] for m in found} == {"n1"}, arguments
        assert "Bob" not in response.text and "30 euros" not in response.text
    for extra in ({"thread_id": "n1"}, {}):
        own = await call(client, keys.acme, "journal_tool_call_view", {"tool_call_id": "call-1"}, **extra)
        assert own.status_code == 200, own.text
        assert (own.json()["result"]["thread_id"], own.json()["result"]["content"]) == (
            "n1",
            "the anonymous result",
        )
        alices = await call(
            client,
            keys.acme,
            "journal_tool_call_view",
            {"tool_call_id": "call-1", "thread_id": "a1"},
            **extra,
        )
        assert (alices.status_code, alices.json()["error"]["code"]) == (404, "tool_call_not_found")
        assert "Zürich" not in alices.text
    for tool, arguments in [
        ("journal_message_search", {"query": "invoice refund"}),
        ("journal_tool_call_view", {"tool_call_id": "call-1"}),
    ]:
        widened = await call(client, keys.acme, tool, arguments, thread_id="n1", user_id="alice")
        assert (widened.status_code, widened.json()["error"]["code"]) == (409, "conflict"), widened.text
        assert "has no user" in widened.json()["error"]["message"]
