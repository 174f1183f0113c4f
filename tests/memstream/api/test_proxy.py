"""`memstream.api.proxy` between two real uvicorn servers: a front that proxies every request to an
upstream that echoes what it got. Both bodies stream (each side sees the first chunk before the
other sends the last), headers cross as a proxy must pass them (hop-by-hop ones dropped, `Host` the
upstream's, `Authorization` kept, `X-Memstream-Forwarded-By` added), the path and query arrive as
sent, a body the guard buffered is sent as is, an upstream that is down or silent raises
`ProxyFailed` (no hang), and a long NDJSON stream passes on its heartbeats."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from starlette.responses import StreamingResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from memstream.api.errors import error_response
from memstream.api.proxy import FORWARDED_BY, ProxyFailed, proxy
from memstream.api.request_guard import RequestGuard
from memstream.api.routes.admin import ndjson
from memstream.embedded.process import free_port
from memstream.ops.progress import ProgressCallback

from .servers import serving, silent


class Echo:
    """The upstream: answers what it received (`/stream`: two parts, the second once `release` is set)."""

    def __init__(self) -> None:
        self.first_chunk = asyncio.Event()
        self.release = asyncio.Event()
        self.seen: list[dict[str, Any]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = b""
        while True:
            message = await receive()
            if message.get("body"):
                self.first_chunk.set()
                body += message["body"]
            if not message.get("more_body"):
                break
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        self.seen.append({"path": scope["raw_path"].decode(), "query": scope["query_string"].decode()})
        if scope["path"] == "/stream":
            hop = [(b"connection", b"x-upstream-hop"), (b"x-upstream-hop", b"1"), (b"x-echo", b"yes")]
            await send({"type": "http.response.start", "status": 200, "headers": hop})
            await send({"type": "http.response.body", "body": b"part-1;", "more_body": True})
            await self.release.wait()
            await send({"type": "http.response.body", "body": b"part-2", "more_body": False})
            return
        answer = json.dumps({"headers": headers, "length": len(body), "body_start": body[:20].decode()})
        await send(
            {
                "type": "http.response.start",
                "status": 207,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": answer.encode()})


def front(client: httpx.AsyncClient, upstream: str) -> ASGIApp:
    """Proxies everything to `upstream` (599 when it failed), behind the request guard."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await proxy(client, upstream, "node-a", scope, receive, send)
        except ProxyFailed as exc:
            await error_response(599, "proxy_failed", str(exc))(scope, receive, send)

    return RequestGuard(app)


@pytest.fixture
async def echo() -> Echo:
    return Echo()


@pytest.fixture
async def urls(echo: Echo) -> AsyncIterator[tuple[str, httpx.AsyncClient]]:
    """(the front's URL, the front's proxy client)."""
    async with httpx.AsyncClient(timeout=httpx.Timeout(5, connect=2), trust_env=False) as proxy_client:
        async with serving(echo) as upstream, serving(front(proxy_client, upstream)) as url:
            yield url, proxy_client


async def test_bodies_stream_both_ways(urls: tuple[str, httpx.AsyncClient], echo: Echo) -> None:
    url, _ = urls

    async def body() -> AsyncIterator[bytes]:
        yield b"a" * 70_000
        await echo.first_chunk.wait()  # the upstream got the first chunk before the client sent more
        yield b"b" * 70_000

    async with httpx.AsyncClient(trust_env=False) as client:
        headers = {"content-type": "application/octet-stream"}
        response = await asyncio.wait_for(client.post(f"{url}/upload", content=body(), headers=headers), 20)
        assert response.status_code == 207 and response.json()["length"] == 140_000

        async with client.stream("GET", f"{url}/stream") as streamed:
            chunks = streamed.aiter_raw()
            first = await asyncio.wait_for(anext(chunks), 20)  # before the upstream sent its second part
            echo.release.set()
            rest = b"".join([chunk async for chunk in chunks])
        assert first + rest == b"part-1;part-2"
        assert streamed.headers["x-echo"] == "yes" and "x-upstream-hop" not in streamed.headers
        assert streamed.headers.get_list("date") and len(streamed.headers.get_list("date")) == 1


async def test_headers_path_and_query_cross_as_a_proxy_passes_them(
    urls: tuple[str, httpx.AsyncClient], echo: Echo
) -> None:
    url, _ = urls
    headers = {
        "authorization": "Bearer msk_kept",
        "connection": "keep-alive, x-hop",
        "x-hop": "dropped: named by Connection",
        "keep-alive": "timeout=5",
        "proxy-authorization": "Basic dropped",
        "x-kept": "yes",
    }
    async with httpx.AsyncClient(trust_env=False) as client:
        response = await client.get(
            f"{url}/v1/threads/t1/context?at_offset=3&as_subagent=true", headers=headers
        )
    assert response.status_code == 207
    seen = response.json()["headers"]
    assert seen["authorization"] == "Bearer msk_kept" and seen["x-kept"] == "yes"
    assert seen[FORWARDED_BY] == "node-a"
    assert not {"x-hop", "keep-alive", "proxy-authorization"} & set(seen)
    assert seen["host"] != url.removeprefix("http://")  # the upstream's own
    assert echo.seen[-1] == {"path": "/v1/threads/t1/context", "query": "at_offset=3&as_subagent=true"}


async def test_a_json_body_the_guard_buffered_is_sent_as_it_came(urls: tuple[str, httpx.AsyncClient]) -> None:
    url, _ = urls
    raw = b'{"messages": [{"role": "user", "content": "h\\u00e9llo"}]}'
    async with httpx.AsyncClient(trust_env=False) as client:
        response = await client.post(
            f"{url}/v1/threads/t1/messages", content=raw, headers={"content-type": "application/json"}
        )
    assert response.json()["length"] == len(raw)
    assert response.json()["headers"]["content-length"] == str(len(raw))
    assert response.json()["body_start"] == raw[:20].decode()


async def test_an_upstream_that_is_down_or_silent_fails_the_proxy_in_time() -> None:
    async with httpx.AsyncClient(timeout=httpx.Timeout(0.5, connect=0.5), trust_env=False) as proxy_client:
        async with silent() as quiet, serving(front(proxy_client, quiet)) as url:
            async with httpx.AsyncClient(trust_env=False) as client:
                response = await asyncio.wait_for(client.get(f"{url}/v1/threads/t1/context"), 20)
            assert response.status_code == 599 and "ReadTimeout" in response.json()["error"]["message"]
        async with serving(front(proxy_client, f"http://127.0.0.1:{free_port()}")) as url:
            async with httpx.AsyncClient(trust_env=False) as client:
                response = await asyncio.wait_for(client.get(f"{url}/v1/threads/t1/context"), 20)
            assert response.status_code == 599 and "ConnectError" in response.json()["error"]["message"]


async def test_a_long_operations_stream_outlives_the_read_timeout_on_its_heartbeats() -> None:
    """An admin operation's NDJSON (`memstream verify`, `rebuild` forwarded to the projections node)
    lasts longer than the proxy's read timeout: its heartbeat lines keep each wait under it."""

    async def operation(progress: ProgressCallback) -> dict[str, bool]:
        await asyncio.sleep(1.5)
        return {"done": True}

    async def upstream(scope: Scope, receive: Receive, send: Send) -> None:
        response = StreamingResponse(ndjson(operation, heartbeat_s=0.2), media_type="application/x-ndjson")
        await response(scope, receive, send)

    async with httpx.AsyncClient(timeout=httpx.Timeout(0.6, connect=0.5), trust_env=False) as proxy_client:
        async with serving(upstream) as origin, serving(front(proxy_client, origin)) as url:
            async with httpx.AsyncClient(trust_env=False) as client:
                started = time.monotonic()
                response = await asyncio.wait_for(client.get(f"{url}/admin/v1/verify"), 20)
                took = time.monotonic() - started
    assert response.status_code == 200 and took > 0.6
    lines = response.text.splitlines()
    assert json.loads(lines[-1]) == {"result": {"done": True}}
    assert set(lines[:-1]) == {""} and len(lines) > 3  # the heartbeats
