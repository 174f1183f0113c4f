"""`proxy`: pass one ASGI HTTP request on to another node and its answer back, streaming both
bodies (used by `memstream.api.forwarding`).

The request goes to the same path and query on `base_url` with the client's headers less the
hop-by-hop ones (`Connection`, `Keep-Alive`, `Transfer-Encoding`, `Upgrade`, `TE`, `Trailer`,
`Proxy-*` and whatever `Connection` names) and `Host`, plus `X-Memstream-Forwarded-By: <node id>`;
`Authorization` is kept, so the other node authenticates the caller itself. The body is the one
`RequestGuard` buffered when it did, else the client's, streamed as it arrives. The answer's status,
headers (less the hop-by-hop ones, `Date` and `Server`, which this node's server adds) and body are
streamed back as they come (raw: a compressed body stays compressed).

`ProxyFailed` when nothing was answered yet: the other node could not be reached, or did not start
answering within the client's timeouts (the caller answers 503). After the answer started, a
failure can only end the response early: the exception propagates and the server drops the
connection.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from urllib.parse import quote

import httpx
from starlette.types import Receive, Scope, Send

from memstream.api.request_guard import PARSED_BODY

FORWARDED_BY = "x-memstream-forwarded-by"
"""The header a forwarding node adds: its node id. A request carrying it is never forwarded again."""
HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"trailers",
        b"transfer-encoding",
        b"upgrade",
    }
)
_REQUEST_DROPS = frozenset({b"host"})
_RESPONSE_DROPS = frozenset({b"date", b"server"})


class ProxyFailed(Exception):
    """The other node gave no answer (could not connect, or timed out before answering)."""


class ClientGone(Exception):
    """The client went away before its request body was complete."""


def _without_hop_by_hop(
    headers: list[tuple[bytes, bytes]], drops: frozenset[bytes]
) -> list[tuple[bytes, bytes]]:
    named = {
        token.strip().lower()
        for name, value in headers
        if name.lower() == b"connection"
        for token in value.split(b",")
    }
    dropped = HOP_BY_HOP | drops | named
    return [(name, value) for name, value in headers if name.lower() not in dropped]


def target_url(base_url: str, scope: Scope) -> str:
    """`base_url` with the request's path (as the client sent it) and query."""
    raw = scope.get("raw_path")
    path = raw.decode("latin-1") if raw else quote(scope["path"])
    query = scope.get("query_string", b"")
    return base_url.rstrip("/") + path + ("?" + query.decode("latin-1") if query else "")


def _has_body(headers: list[tuple[bytes, bytes]]) -> bool:
    return any(name.lower() in (b"content-length", b"transfer-encoding") for name, _ in headers)


async def _body(receive: Receive) -> AsyncIterator[bytes]:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone("the client went away before its request body was complete")
        chunk = message.get("body", b"")
        if chunk:
            yield chunk
        if not message.get("more_body", False):
            return


async def proxy(
    client: httpx.AsyncClient, base_url: str, node_id: str, scope: Scope, receive: Receive, send: Send
) -> None:
    """Forward the request to `base_url` and stream its answer to `send` (module doc)."""
    headers: list[tuple[bytes, bytes]] = list(scope.get("headers", ()))
    out = _without_hop_by_hop(headers, _REQUEST_DROPS)
    out.append((FORWARDED_BY.encode(), node_id.encode()))
    content: bytes | AsyncIterator[bytes] | None = None
    parsed = scope.get(PARSED_BODY)
    if parsed is not None:
        content = parsed[0]
    elif _has_body(headers):
        content = _body(receive)
    request = client.build_request(scope["method"], target_url(base_url, scope), headers=out, content=content)
    try:
        response = await client.send(request, stream=True)
    except ClientGone:
        return
    except httpx.HTTPError as exc:
        raise ProxyFailed(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__) from exc
    try:
        await send(
            {
                "type": "http.response.start",
                "status": response.status_code,
                "headers": _without_hop_by_hop(list(response.headers.raw), _RESPONSE_DROPS),
            }
        )
        async for chunk in response.aiter_raw():
            if chunk:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    finally:
        await response.aclose()
