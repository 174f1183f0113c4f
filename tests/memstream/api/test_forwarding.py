"""`memstream.api.forwarding` between two real nodes' APIs under uvicorn: each with its own journal
(SlateDB), one Postgres, one broker; node A forwards to node B what its `Owners` say B serves.

A thread's appends, messages, context, metadata and deletion reach the owner's journal and answer
what the owner answers; the shard is placed by the key's account (another account's thread of the
same id stays); a request that cannot be placed (no key, bad id) is answered locally; a request is
forwarded once at most; an unknown, down or silent owner is 503 with Retry-After, never a hang;
the agent surfaces go to the projections node."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Receive, Scope, Send

from core.auth import Principal
from core.config import Settings
from core.errors import Unauthorized
from memstream.api import create_app
from memstream.api.forwarding import LOCAL, UNKNOWN, Forwarder, Forwarding, Placement, Remote
from memstream.api.proxy import FORWARDED_BY
from memstream.embedded.process import free_port
from memstream.wiring.api import build_api_deps
from sinks.slatedb.journal import SlateJournal
from streams.admin import apply_topics
from streams.deletions import DeletionEvents
from streams.topics import load_topics

from .conftest import Keys
from .servers import serving, silent


@dataclass
class StaticOwners:
    """`Owners` from a table: (account, thread) -> placement (LOCAL when absent); records what it
    was asked."""

    threads: dict[tuple[str, str], Placement] = field(default_factory=dict)
    projections_at: Placement = LOCAL
    asked: list[tuple[str, str, str]] = field(default_factory=list)

    def thread(self, environment: str, account_id: str, thread_id: str) -> Placement:
        self.asked.append((environment, account_id, thread_id))
        return self.threads.get((account_id, thread_id), LOCAL)

    def projections(self) -> Placement:
        return self.projections_at


class Recorder:
    """Records each request's method, path and headers before the application sees it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.seen: list[tuple[str, str, dict[str, str]]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = {k.decode(): v.decode() for k, v in scope["headers"]}
            self.seen.append((scope["method"], scope["path"], headers))
        await self.app(scope, receive, send)


@dataclass
class ApiNode:
    node_id: str
    url: str
    journal: SlateJournal
    owners: StaticOwners
    recorder: Recorder
    deps: Any

    def remote(self) -> Remote:
        return Remote(self.node_id, self.url)


@pytest.fixture
def broker_settings(api_settings: Settings, settings: Settings) -> Settings:
    merged = api_settings.model_copy(
        update={"broker_url": settings.broker_url, "topic_prefix": settings.topic_prefix}
    )
    apply_topics(merged, load_topics())
    return merged


@pytest.fixture
async def cluster(
    broker_settings: Settings, pool: asyncpg.Pool, tmp_path: Path
) -> AsyncIterator[tuple[ApiNode, ApiNode]]:
    """Nodes A and B (their own journals; one database and broker), both serving everything locally
    until a test tells their owners otherwise."""
    events = DeletionEvents(broker_settings)
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(events.close)
        nodes = []
        for name in ("node-a", "node-b"):
            journal = await SlateJournal.open(f"file://{tmp_path}/{name}/journal", flush_interval_ms=1)
            stack.push_async_callback(journal.close)
            owners = StaticOwners()
            forwarding = Forwarding(owners, name, connect_timeout_s=2, timeout_s=30)
            stack.push_async_callback(forwarding.aclose)
            deps = build_api_deps(broker_settings, journal, pool, publish_deletion=events.publish)
            recorder = Recorder(create_app(deps, forwarding=forwarding))
            url = await stack.enter_async_context(serving(recorder))
            nodes.append(ApiNode(name, url, journal, owners, recorder, deps))
        yield nodes[0], nodes[1]


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(trust_env=False, timeout=30) as client:
        yield client


def append_body(*texts: str, prefix: str = "m") -> dict[str, Any]:
    messages = [{"role": "user", "content": t, "message_id": f"{prefix}{i}"} for i, t in enumerate(texts)]
    return {"agent_id": "bot", "messages": messages}


async def test_a_threads_requests_are_served_by_the_owner_of_its_shard(
    cluster: tuple[ApiNode, ApiNode], client: httpx.AsyncClient, keys: Keys
) -> None:
    a, b = cluster
    a.owners.threads[("acme", "t1")] = b.remote()
    appended = await client.post(
        f"{a.url}/v1/threads/t1/messages", json=append_body("one", "two"), headers=keys.acme
    )
    assert appended.status_code == 201, appended.text
    assert await b.journal.last_seq() == 2 and await a.journal.last_seq() == 0
    again = await client.post(
        f"{a.url}/v1/threads/t1/messages", json=append_body("one", "two"), headers=keys.acme
    )
    assert again.status_code == 201 and again.json() == appended.json()  # a retry returns the stored ones

    via_a = await client.get(f"{a.url}/v1/threads/t1/context", headers=keys.acme)
    direct = await client.get(f"{b.url}/v1/threads/t1/context", headers=keys.acme)
    assert via_a.status_code == 200 and via_a.json() == direct.json()
    assert [m["content"] for m in via_a.json()["messages"]] == ["one", "two"]
    page = await client.get(f"{a.url}/v1/threads/t1/messages", headers=keys.acme)
    assert [m["content"] for m in page.json()["messages"]] == ["one", "two"]
    patched = await client.patch(f"{a.url}/v1/threads/t1", json={"metadata": {"k": "v"}}, headers=keys.acme)
    assert patched.status_code == 200 and patched.json()["metadata"] == {"k": "v"}

    forwarded = [(m, p, h) for m, p, h in b.recorder.seen if FORWARDED_BY in h]
    assert len(forwarded) == 5 and all(h[FORWARDED_BY] == "node-a" for _, _, h in forwarded)
    assert all(h["authorization"] == keys.acme["Authorization"] for _, _, h in forwarded)
    assert ("test", "acme", "t1") in a.owners.asked

    # the shard is the key's account's: globex's thread t1 is another thread, which A serves
    other = await client.post(
        f"{a.url}/v1/threads/t1/messages", json=append_body("mine"), headers=keys.globex
    )
    assert other.status_code == 201 and await a.journal.last_seq() == 1 and await b.journal.last_seq() == 2
    assert ("test", "globex", "t1") in a.owners.asked

    deleted = await client.delete(f"{a.url}/v1/threads/t1", headers=keys.acme)
    assert deleted.status_code == 200, deleted.text
    assert deleted.json()["deleted"]["journal"] == {"messages": 2, "up_to_seq": 2}
    assert (await client.get(f"{b.url}/v1/threads/t1/context", headers=keys.acme)).status_code == 404
    assert (await client.get(f"{a.url}/v1/threads/t1/context", headers=keys.globex)).status_code == 200


async def test_a_request_that_cannot_be_placed_is_answered_here(
    cluster: tuple[ApiNode, ApiNode], client: httpx.AsyncClient, keys: Keys
) -> None:
    a, b = cluster
    a.owners.threads[("acme", "t1")] = b.remote()
    missing = await client.post(f"{a.url}/v1/threads/t1/messages", json=append_body("x"))
    assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
    bad = await client.post(
        f"{a.url}/v1/threads/t1/messages", json=append_body("x"), headers={"Authorization": "Bearer msk_nope"}
    )
    assert bad.status_code == 401 and bad.json()["error"]["code"] == "unauthorized"
    invalid = await client.get(f"{a.url}/v1/threads/bad%20id/context", headers=keys.acme)
    assert invalid.status_code == 422
    listed = await client.get(f"{a.url}/v1/threads", headers=keys.acme)  # not one thread's
    assert listed.status_code == 200
    assert b.recorder.seen == [] and a.owners.asked == []


async def test_a_forwarded_request_is_never_forwarded_again(
    cluster: tuple[ApiNode, ApiNode], client: httpx.AsyncClient, keys: Keys
) -> None:
    a, b = cluster
    a.owners.threads[("acme", "t1")] = b.remote()  # views that disagree for a moment
    b.owners.threads[("acme", "t1")] = a.remote()
    response = await client.post(f"{a.url}/v1/threads/t1/messages", json=append_body("x"), headers=keys.acme)
    assert response.status_code == 503 and response.headers["retry-after"] == "1"
    error = response.json()["error"]
    assert error["code"] == "not_owner" and error["owner"] == a.url and "retry in 1 s" in error["message"]
    assert len(a.recorder.seen) == 1 and len(b.recorder.seen) == 1
    assert await a.journal.last_seq() == 0 and await b.journal.last_seq() == 0

    b.owners.threads[("acme", "t1")] = UNKNOWN
    response = await client.get(f"{b.url}/v1/threads/t1/context", headers={**keys.acme, FORWARDED_BY: "x"})
    assert response.status_code == 503 and response.json()["error"]["code"] == "not_owner"
    assert "owner" not in response.json()["error"]


async def test_a_thread_nobody_owns_is_503_with_retry_after(
    cluster: tuple[ApiNode, ApiNode], client: httpx.AsyncClient, keys: Keys
) -> None:
    a, _ = cluster
    a.owners.threads[("acme", "t1")] = UNKNOWN
    response = await client.post(f"{a.url}/v1/threads/t1/messages", json=append_body("x"), headers=keys.acme)
    assert response.status_code == 503 and response.headers["retry-after"] == "1"
    assert (
        response.json()["error"]["code"] == "owner_unknown"
        and "thread 't1'" in response.json()["error"]["message"]
    )
    assert await a.journal.last_seq() == 0


async def test_an_owner_that_is_down_or_silent_is_503_never_a_hang(
    cluster: tuple[ApiNode, ApiNode], client: httpx.AsyncClient, keys: Keys
) -> None:
    a, _ = cluster
    owners = StaticOwners()
    short = Forwarding(owners, "node-c", connect_timeout_s=0.5, timeout_s=0.5)
    try:
        async with silent() as quiet, serving(create_app(a.deps, forwarding=short)) as url:
            owners.threads[("acme", "t1")] = Remote("node-down", f"http://127.0.0.1:{free_port()}")
            down = await asyncio.wait_for(client.get(f"{url}/v1/threads/t1/context", headers=keys.acme), 20)
            owners.threads[("acme", "t1")] = Remote("node-silent", quiet)
            body = append_body("x")
            hung = await asyncio.wait_for(
                client.post(f"{url}/v1/threads/t1/messages", json=body, headers=keys.acme), 20
            )
    finally:
        await short.aclose()
    for response, node in ((down, "node-down"), (hung, "node-silent")):
        assert response.status_code == 503 and response.headers["retry-after"] == "1"
        error = response.json()["error"]
        assert error["code"] == "owner_unreachable" and node in error["message"] and error["owner"]
        assert "same message_ids" in error["message"]


async def test_the_agent_surfaces_go_to_the_projections_node(
    cluster: tuple[ApiNode, ApiNode], client: httpx.AsyncClient, keys: Keys
) -> None:
    a, b = cluster
    paths = ["/v1/agents", "/v1/agents/bot/tools", "/mcp/bot"]
    for path in paths:  # served here while the projections are not elsewhere
        await client.get(f"{a.url}{path}", headers=keys.acme)
    assert b.recorder.seen == []
    a.owners.projections_at = b.remote()
    for path in paths:
        via_a = await client.get(f"{a.url}{path}", headers=keys.acme)
        direct = await client.get(f"{b.url}{path}", headers=keys.acme)
        assert (via_a.status_code, via_a.json()) == (direct.status_code, direct.json())
    assert [p for _, p, h in b.recorder.seen if h.get(FORWARDED_BY) == "node-a"] == paths
    a.owners.projections_at = UNKNOWN
    response = await client.get(f"{a.url}/v1/agents/bot/tools", headers=keys.acme)
    assert response.status_code == 503 and response.json()["error"]["code"] == "owner_unknown"


def test_the_forwarder_sits_between_the_guard_and_the_fast_routes(deps: Any) -> None:
    app = create_app(deps, forwarding=Forwarding(StaticOwners(), "node-a"))
    names = [m.cls.__name__ for m in app.user_middleware]  # outermost first
    assert names == ["RequestMetrics", "RequestGuard", "Forwarder", "FastRoutes"]
    assert Forwarder.__name__ not in [m.cls.__name__ for m in create_app(deps).user_middleware]


async def test_which_requests_are_placed_and_by_what() -> None:
    owners = StaticOwners(
        threads={("acme", "t1"): Remote("b", "http://b")}, projections_at=Remote("p", "http://p")
    )

    async def authenticate(connection: HTTPConnection) -> Principal:
        if connection.headers.get("authorization") != "Bearer good":
            raise Unauthorized("no such key")
        return Principal(account_id="acme", environment="test", key_id="key_1")

    async def unused(scope: Scope, receive: Receive, send: Send) -> None:
        raise AssertionError("placement only")

    forwarder = Forwarder(unused, Forwarding(owners, "a"), authenticate)

    async def placed(path: str, key: str = "good") -> Placement | None:
        scope = {"type": "http", "path": path, "headers": [(b"authorization", f"Bearer {key}".encode())]}
        return await forwarder.placement(scope)

    assert await placed("/v1/threads/t1/messages") == Remote("b", "http://b")
    assert await placed("/v1/threads/t1") == Remote("b", "http://b")
    assert await placed("/v1/threads/t2/context") == LOCAL
    assert owners.asked == [("test", "acme", "t1"), ("test", "acme", "t1"), ("test", "acme", "t2")]
    for unplaced in ("/v1/threads", "/v1/threads/", "/v1/threads/bad id/context", "/healthz", "/v1/agentsx"):
        assert await placed(unplaced) is None, unplaced
    assert await placed("/v1/threads/t1/messages", key="bad") is None  # the routes answer 401
    for path in (
        "/v1/agents",
        "/v1/agents/bot/tools/memory_recall",
        "/v1/agents/bot/memory",
        "/mcp",
        "/mcp/bot",
    ):
        assert await placed(path) == Remote("p", "http://p"), path
    assert await placed("/mcpx") is None
    for path in ("/admin/v1/verify", "/admin/v1/rebuild/clickhouse", "/admin/v1/rebuild/qdrant"):
        assert await placed(path, key="admin-token-unchecked-here") == Remote("p", "http://p"), path
    for path in ("/admin/v1/republish", "/admin/v1/verifyx", "/admin/v1/shards/full-history", "/admin/v1"):
        assert await placed(path) is None, path
