"""`McpEndpoint` mounted as the node mounts it, over in-memory stores: the API's hot routes still
take the fast path, MCP requests reach the SDK only with a valid key and a valid agent URL, and a
revoked key stops working at once. (End to end with real stores: `test_mcp_node`.)"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any, cast

import asyncpg
import httpx
import httpx2
import pytest
from fastapi import FastAPI
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from core.auth import issue_key, revoke_key
from core.config import Settings
from core.memory.agents import AgentService
from core.memory.pinned import NoPinnedFacts
from core.threads import ThreadService
from core.turn_context import ContextReader
from memstream.api import ApiDeps, create_app
from memstream.api.fast_routes import FastRoutes
from memstream.mcp_server.http import MOUNT_PATH, McpEndpoint
from tests.fakes.agents import InMemoryAgents
from tests.fakes.api_keys import InMemoryApiKeys
from tests.fakes.journal import InMemoryJournal
from tests.fakes.summaries import InMemorySummaryStore
from tests.fakes.threads import InMemoryThreadStore

ENV = "test"
BASE = "http://memstream.test"
MCP_ACCEPT = {"Accept": "application/json, text/event-stream"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}


@pytest.fixture
def served_fast(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths of the requests `FastRoutes` answered."""
    served: list[str] = []
    serve = FastRoutes._serve

    async def counted(self: FastRoutes, hot: Any, values: Any, scope: dict[str, Any], *args: Any) -> None:
        served.append(scope["path"])
        await serve(self, hot, values, scope, *args)

    monkeypatch.setattr(FastRoutes, "_serve", counted)
    return served


@pytest.fixture
def keys() -> InMemoryApiKeys:
    return InMemoryApiKeys()


@pytest.fixture
async def app(keys: InMemoryApiKeys) -> AsyncIterator[FastAPI]:
    """The API with the MCP endpoint mounted after every route, as `memstream.wiring.node` does."""
    journal = InMemoryJournal()
    threads = ThreadService(InMemoryThreadStore(), journal)
    deps = ApiDeps(
        settings=Settings(environment=ENV),
        journal=journal,
        pool=cast(asyncpg.Pool, None),  # only /readyz reads it
        api_keys=keys,
        agents=AgentService(InMemoryAgents()),
        threads=threads,
        context_reader=ContextReader(journal, threads, NoPinnedFacts(), InMemorySummaryStore()),
    )
    app = create_app(deps)
    endpoint = McpEndpoint(deps)
    app.mount(MOUNT_PATH, endpoint)
    stop = asyncio.Event()
    serving = asyncio.create_task(endpoint.run(stop))  # as the node runs it, beside the API
    try:
        yield app
    finally:
        stop.set()
        await serving


@pytest.fixture
async def http(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as client:
        yield client


async def _key(keys: InMemoryApiKeys, account: str = "acme") -> dict[str, str]:
    return {"Authorization": f"Bearer {await issue_key(keys, account, ENV)}"}


async def test_appends_and_contexts_still_take_the_fast_path(
    http: httpx.AsyncClient, keys: InMemoryApiKeys, served_fast: list[str]
) -> None:
    headers = await _key(keys)
    body = {"agent_id": "bot", "messages": [{"message_id": "m1", "role": "user", "content": "hi"}]}
    assert (await http.post("/v1/threads/t1/messages", json=body, headers=headers)).status_code == 201
    assert (await http.get("/v1/threads/t1/context", headers=headers)).status_code == 200
    assert served_fast == ["/v1/threads/t1/messages", "/v1/threads/t1/context"]
    answer = await http.post("/mcp/bot", json=INITIALIZE, headers={**headers, **MCP_ACCEPT})
    assert answer.status_code == 200, answer.text
    assert answer.json()["result"]["serverInfo"]["name"] == "memstream"
    assert served_fast == ["/v1/threads/t1/messages", "/v1/threads/t1/context"]  # not by FastRoutes


async def test_the_sdk_client_lists_an_agents_tools(app: FastAPI, keys: InMemoryApiKeys) -> None:
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, headers=await _key(keys)) as http:
        async with Client(streamable_http_client(f"{BASE}/mcp/bot", http_client=http)) as client:
            assert (
                await client.list_tools()
            ).tools == []  # this server serves neither memory nor transcripts
            result = await client.call_tool("memory_store", {"key": "k"})
    assert result.is_error
    assert result.structured_content == {
        "error": {"code": "unknown_tool", "message": "no tool 'memory_store': the agent tools are none"}
    }


@pytest.mark.parametrize(
    ("path", "status", "code", "field"),
    [
        ("/mcp/", 404, "not_found", None),
        ("/mcp/bad%20agent", 422, "invalid_input", "agent_id"),
        ("/mcp/bot?user_id=", 422, "invalid_input", "user_id"),
        ("/mcp/bot?user_id=a&user_id=b", 422, "invalid_input", "user_id"),
        ("/mcp/bot?agent_id=other", 422, "invalid_input", "agent_id"),
    ],
)
async def test_a_bad_agent_url_is_refused_with_the_apis_error(
    http: httpx.AsyncClient, keys: InMemoryApiKeys, path: str, status: int, code: str, field: str | None
) -> None:
    answer = await http.post(path, json=INITIALIZE, headers={**await _key(keys), **MCP_ACCEPT})
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert error["data"]["code"] == code and error["data"].get("field") == field
    assert error["message"] == f"{code}: {error['data']['message']}"


async def test_keys_are_checked_on_every_request(http: httpx.AsyncClient, keys: InMemoryApiKeys) -> None:
    headers = {**await _key(keys), **MCP_ACCEPT}
    assert (await http.post("/mcp/bot", json=INITIALIZE, headers=headers)).status_code == 200
    [record] = await keys.list(environment=ENV, account_id="acme")
    await revoke_key(keys, "acme", ENV, record.key_id)
    refused = await http.post("/mcp/bot", json=INITIALIZE, headers=headers)
    assert refused.status_code == 401 and refused.headers["WWW-Authenticate"] == "Bearer"
    assert (
        refused.json()["error"]["message"]
        == f"unauthorized: API key {record.prefix}... ({record.key_id}) was revoked"
    )
    for bad in ({}, {"Authorization": "Bearer msk_short"}):
        answer = await http.post("/mcp/bot", json=INITIALIZE, headers={**bad, **MCP_ACCEPT})
        assert answer.status_code == 401
        assert json.loads(answer.text)["id"] is None
