"""memstream's MCP server end to end: the SDK's own clients (streamable HTTP at the node's `/mcp`,
and the `memstream mcp` stdio command) against a real node process, its real Postgres, journal,
relay, Kafka-protocol broker, ClickHouse projection and Qdrant Edge index."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client

from core.auth import list_keys, revoke_key
from core.config import Settings
from memstream.embedded.bootstrap import create_key
from sinks.postgres.api_keys import PostgresApiKeys
from sinks.postgres.pool import create_pool
from tests.memstream.mcp_server.mcp_clients import (
    call,
    http_client,
    refused,
    stdio_client,
    stdio_parameters,
    tool_names,
)
from tests.memstream.node_process import RunningNode, running_node

JOURNAL = ["journal_message_search", "journal_tool_call_view"]
MEMORY = ["memory_forget", "memory_recall", "memory_store"]
BIG_RESULT = "line of the nightly report: Zürich ok, 42 € settled\n" * 1_000  # ~53 KB: two pages


@pytest.fixture
def node(settings: Settings, tmp_path: Path) -> Iterator[RunningNode]:
    with running_node(settings, tmp_path) as node:
        _append_transcripts(node.api)
        yield node


def _key(node: RunningNode) -> str:
    return node.api.headers["Authorization"].removeprefix("Bearer ")


def _append_transcripts(api: httpx.Client) -> None:
    """Ada's thread with a tool call, and Bob's thread, both of agent `bot` of account acme."""
    ada = [
        {"message_id": "a-0", "role": "user", "content": "Book the lighthouse tour for Saturday."},
        {
            "message_id": "a-1",
            "role": "assistant",
            "content": "",
            "tool_call": {"id": "call-7", "name": "book_tour", "arguments": '{"tour": "lighthouse"}'},
        },
        {"message_id": "a-2", "role": "tool", "tool_call": {"id": "call-7", "result": BIG_RESULT}},
        {"message_id": "a-3", "role": "assistant", "content": "The lighthouse tour is booked."},
    ]
    bob = [{"message_id": "b-0", "role": "user", "content": "Is the lighthouse open, Bob asks?"}]
    for thread, user, messages in [("t-ada", "ada", ada), ("t-bob", "bob", bob)]:
        body = {"agent_id": "bot", "user_id": user, "messages": messages}
        response = api.post(f"/v1/threads/{thread}/messages", json=body)
        assert response.status_code == 201, response.text


async def _searched(client: Client, query: str) -> dict[str, Any]:
    """The search result once the projection shows Ada's two searchable lighthouse messages (it is
    asynchronous)."""
    deadline = time.monotonic() + 90
    while True:
        found = await call(client, "journal_message_search", {"query": query, "summarize": False})
        if found["count"] >= 2:
            return found
        assert time.monotonic() < deadline, found
        await asyncio.sleep(0.5)


async def _recalled(client: Client, query: str, key: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        recalled = await call(client, "memory_recall", {"query": query})
        if any(hit["key"] == key for hit in recalled["results"]):
            return recalled
        assert time.monotonic() < deadline, recalled
        await asyncio.sleep(0.5)


async def _store_recall_forget(client: Client) -> None:
    stored = await call(
        client,
        "memory_store",
        {"key": "user.diet", "content": "Ada is vegetarian.", "category": "user_profile", "importance": 0.9},
    )
    assert stored["entry"]["key"] == "user.diet" and stored["visibility"] == "private", stored
    recalled = await _recalled(client, "what does Ada eat?", "user.diet")
    assert recalled["results"][0]["content"] == "Ada is vegetarian."
    forgotten = await call(client, "memory_forget", {"key": "user.diet"})
    assert forgotten
    # forgotten in Postgres at once: recall never returns it again (the fallback and the index agree)
    deadline = time.monotonic() + 60
    while any(
        hit["key"] == "user.diet"
        for hit in (await call(client, "memory_recall", {"query": "Ada eat"}))["results"]
    ):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.5)


async def _journal_tools(client: Client) -> None:
    found = await _searched(client, "lighthouse")
    assert sorted(m["message_id"] for m in found["messages"]) == ["a-0", "a-3"]  # Ada's only, no tool rows
    first = await call(client, "journal_tool_call_view", {"tool_call_id": "call-7"})
    assert first["total_bytes"] == len(BIG_RESULT.encode()) and first["next_offset"] is not None
    rest = await call(
        client, "journal_tool_call_view", {"tool_call_id": "call-7", "offset": first["next_offset"]}
    )
    assert rest["next_offset"] is None
    assert first["content"] + rest["content"] == BIG_RESULT


def test_streamable_http_serves_one_agents_tools_with_the_apis_rules(
    node: RunningNode, settings: Settings
) -> None:
    acme = _key(node)
    gateway = asyncio.run(create_key(settings, "acme", "gateway", surface="mcp"))
    globex = asyncio.run(create_key(settings, "globex"))
    ada = f"{node.url}/mcp/bot?user_id=ada"

    # refused before MCP, with the API's status and message in a JSON-RPC error
    for headers, says in [
        ({}, "unauthorized: missing API key"),
        ({"Authorization": "Bearer nope"}, "unauthorized: malformed API key"),
        ({"Authorization": "Bearer msk_" + "x" * 43}, "unauthorized: unknown API key msk_xxxxxxxx..."),
    ]:
        response = httpx.post(
            ada, headers={**headers, "Accept": "application/json, text/event-stream"}, json={}
        )
        assert response.status_code == 401, response.text
        assert response.headers["WWW-Authenticate"] == "Bearer"
        error = response.json()["error"]
        assert error["message"].startswith(says) and error["data"]["code"] == "unauthorized"
    response = httpx.post(f"{node.url}/mcp/bot?user_id=a%0Ab", headers=node.api.headers, json={})
    assert response.status_code == 422 and response.json()["error"]["data"]["field"] == "user_id"

    async def scenario() -> None:
        for key, says in [(None, "missing API key"), ("msk_" + "x" * 43, "unknown API key")]:
            with pytest.raises(Exception) as refused_connect:  # the SDK's client cannot even connect
                async with http_client(ada, key) as client:
                    await client.list_tools()
            assert f"unauthorized: {says}" in repr(refused_connect.value)

        async with http_client(ada, acme) as client:
            assert await tool_names(client) == JOURNAL  # Memory not bound yet
            error = await refused(client, "memory_store", {"key": "k", "content": "c"})
            assert error["code"] == "unknown_tool" or error["code"] == "capability_not_bound"
            assert node.api.put("/v1/agents/bot", json={"capabilities": ["memory"]}).status_code == 200
            assert await tool_names(client) == sorted(JOURNAL + MEMORY)
            # the tools' own argument validation, with the API's message and field
            error = await refused(client, "journal_message_search", {"query": "x", "limit": 500})
            assert error["code"] == "invalid_input" and error["field"] == "arguments.limit", error
            await _store_recall_forget(client)
            await _journal_tools(client)
            error = await refused(client, "no_such_tool", {})
            assert error["code"] == "unknown_tool"

        # a key issued to an MCP gateway: the memory tools only, the journal tools do not exist
        async with http_client(ada, gateway) as client:
            assert await tool_names(client) == MEMORY
            error = await refused(client, "journal_message_search", {"query": "lighthouse"})
            assert error["code"] == "unknown_tool"

        # a revoked key stops working at once (the node's key cache hears the revocation)
        await _revoke(settings, "acme", "gateway")
        deadline = time.monotonic() + 10
        while True:
            try:
                async with http_client(ada, gateway) as client:
                    await client.list_tools()
            except Exception as exc:
                refusal = repr(exc)
                break
            assert time.monotonic() < deadline, "the revoked key still works"
            await asyncio.sleep(0.2)
        assert "unauthorized: API key msk_" in refusal and "was revoked" in refusal, refusal

        # the thread's user, from the URL: Bob's thread acts for Bob
        async with http_client(f"{node.url}/mcp/bot?thread_id=t-bob", acme) as client:
            found = await _searched_bob(client)
            assert [m["message_id"] for m in found["messages"]] == ["b-0"]

        # another account: the same agent and user ids are another agent, with nothing in it
        async with http_client(ada, globex) as client:
            assert await tool_names(client) == JOURNAL  # globex bound nothing
            found = await call(client, "journal_message_search", {"query": "lighthouse", "summarize": False})
            assert found["count"] == 0
            error = await refused(client, "journal_tool_call_view", {"tool_call_id": "call-7"})
            assert error["code"] == "tool_call_not_found"
            error = await refused(client, "memory_recall", {"query": "Ada"})
            assert error["code"] == "capability_not_bound"
        async with http_client(f"{node.url}/mcp/bot?thread_id=t-ada", globex) as client:
            error = await refused(client, "journal_message_search", {"query": "lighthouse"})
            assert error["code"] == "not_found"  # globex has no thread t-ada

    asyncio.run(scenario())


async def _revoke(settings: Settings, account: str, label: str) -> None:
    pool = await create_pool(settings.postgres, min_size=1, max_size=1)
    try:
        store = PostgresApiKeys(pool)
        [record] = [k for k in await list_keys(store, account, settings.environment) if k.label == label]
        await revoke_key(store, account, settings.environment, record.key_id)
    finally:
        await pool.close()


async def _searched_bob(client: Client) -> dict[str, Any]:
    deadline = time.monotonic() + 90
    while True:
        found = await call(client, "journal_message_search", {"query": "lighthouse", "summarize": False})
        if found["count"]:
            return found
        assert time.monotonic() < deadline, found
        await asyncio.sleep(0.5)


def test_stdio_command_relays_one_agents_tools_to_the_node(node: RunningNode, settings: Settings) -> None:
    acme = _key(node)
    gateway = asyncio.run(create_key(settings, "acme", "gateway", surface="mcp"))
    assert node.api.put("/v1/agents/bot", json={"capabilities": ["memory"]}).status_code == 200

    # a bad key fails at start, with the node's message, before serving anything
    bad = stdio_parameters(node.url, "msk_" + "x" * 43, "--agent", "bot")
    started = subprocess.run(
        [bad.command, *bad.args], env=bad.env, input="", capture_output=True, text=True, timeout=60
    )
    assert started.returncode == 1
    assert "unauthorized: unknown API key msk_xxxxxxxx..." in started.stderr

    async def scenario() -> None:
        async with stdio_client(node.url, acme, "--agent", "bot", "--user", "ada") as client:
            assert await tool_names(client) == sorted(JOURNAL + MEMORY)
            error = await refused(
                client,
                "memory_store",
                {"key": "k", "content": "c", "category": "user_profile", "importance": 7},
            )
            assert error["code"] == "invalid_input" and error["field"] == "arguments.importance", error
            await _store_recall_forget(client)
            await _journal_tools(client)
        async with stdio_client(node.url, gateway, "--agent", "bot", "--user", "ada") as client:
            assert await tool_names(client) == MEMORY
            error = await refused(client, "journal_tool_call_view", {"tool_call_id": "call-7"})
            assert error["code"] == "unknown_tool"

    asyncio.run(scenario())
