"""`Forwarder`: the ASGI middleware that sends a request to the node that serves it, when that is
another node (journal shards across nodes, issue 15).

Which node serves a request (`Owners`, given by the node's wiring):
- **A thread's requests** (`/v1/threads/{thread_id}` and everything under it: appends, messages,
  context, the thread row, its deletion) are served by the owner of the thread's journal shard.
  The shard is a hash of (environment, account, thread) (`core.sharding.shards.shard_of`), and the
  account is not in the request: it is the API key's. So the forwarder authenticates the caller
  first, exactly as the routes do (`ApiKeyBearer`: the node's cache of API keys, evicted across
  nodes by Postgres NOTIFY, so the lookup costs a hash and a dict lookup), and hashes the key's
  environment and account with the thread id of the path. A request it cannot place - the key is
  missing, malformed, unknown or revoked, PostgreSQL cannot be reached, the thread id is not an id
  - is served here, and the local routes answer it as always (401, 503, 422): nothing is forwarded
  that the owner would refuse anyway. The owner authenticates the request again (the key travels in
  `Authorization`; no node trusts another's word on who the caller is).
- **The agent surfaces** (`/v1/agents` and everything under it: tools, tool calls, memory; the MCP
  endpoint `/mcp/...`) are served by the node with the `projections` role when the projections are
  embedded (chdb and Qdrant Edge open in one process only: transcript search, the tool-call view
  and memory recall read them). The whole surface goes there, so that every node offers the same
  tools; with ClickHouse and Qdrant servers `Owners.projections` says `LOCAL` and nothing moves.
  A tool call that names a thread (`thread_id` in the body or the MCP URL) reads the thread's row
  (Postgres) and the projections, never the thread's journal, so it needs no shard owner.
- **The operator commands on the projections** (`GET /admin/v1/verify`, `POST /admin/v1/rebuild/...`)
  go to the same node, for the same reason (they read and rebuild the embedded engines). The admin
  token is the nodes' shared one, checked there; their NDJSON streams through the proxy, which sends
  each line on as it comes (a long operation sends a line at least every `HEARTBEAT_S` = 10 s, well
  within the client's read timeout).
- Everything else (`GET /v1/threads`, health, metrics, the other admin routes, docs, console) is
  served here.

What happens (`Placement`): `LOCAL` - the application answers; `Remote(node_id, url)` - the
request is proxied there (`memstream.api.proxy`: both bodies streamed, `Authorization` kept,
hop-by-hop headers dropped, `X-Memstream-Forwarded-By: <this node>` added); `UNKNOWN` (no live node
holds the shard, e.g. during a takeover) - 503 `owner_unknown` with `Retry-After`. A request that
was already forwarded once (it has `X-Memstream-Forwarded-By`) is never forwarded again: a node that
is not its owner answers 503 `not_owner` with `Retry-After` and the owner it knows in `owner` (two
nodes whose views of the leases differ for a moment must not bounce a request between them). An
owner that cannot be reached or does not start answering in time (`connect_timeout_s`,
`timeout_s`) is 503 `owner_unreachable` with `Retry-After`: a forwarded append may have been
applied, and a retry with the same message ids returns the stored messages. The API's error shape
throughout; the request metrics count these requests under the route `forwarded`.

Sits inside `RequestGuard` (refusals of the request line and body are answered here, and the body
is buffered and parsed once) and outside `FastRoutes`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import httpx
from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Receive, Scope, Send

from core.auth import Principal
from core.ids import ID
from memstream.api.errors import error_response
from memstream.api.proxy import FORWARDED_BY, ProxyFailed, proxy
from memstream.api.request_metrics import ROUTE

log = logging.getLogger(__name__)

FORWARDED = "forwarded"
"""The route label of the requests the forwarder answers or passes on (`core.metrics.HTTP_DURATION`)."""
THREADS = "/v1/threads/"
PROJECTION_PREFIXES = ("/v1/agents", "/mcp")
PROJECTION_OPERATIONS = ("/admin/v1/verify", "/admin/v1/rebuild")
"""The admin routes that run on the projections (module doc)."""


class Local:
    """Served by this node."""

    def __repr__(self) -> str:
        return "LOCAL"


class Unknown:
    """No node is known to serve it now (a shard between owners)."""

    def __repr__(self) -> str:
        return "UNKNOWN"


@dataclass(frozen=True)
class Remote:
    """Served by node `node_id` at `url` (its API's base URL)."""

    node_id: str
    url: str


LOCAL = Local()
UNKNOWN = Unknown()
Placement = Local | Remote | Unknown


class Owners(Protocol):
    """Where requests are served (`memstream.sharding.owners.LeaseOwners` is the node's)."""

    def thread(self, environment: str, account_id: str, thread_id: str) -> Placement:
        """The node serving the thread: the owner of its journal shard."""
        ...

    def projections(self) -> Placement:
        """The node serving the agent surfaces (`LOCAL` when any node can)."""
        ...


class Forwarding:
    """What the forwarder needs: the `Owners`, this node's id and the HTTP client's limits. Its owner
    (the node) closes it after the server stopped (`aclose`); the client is made on first use."""

    def __init__(
        self,
        owners: Owners,
        node_id: str,
        *,
        connect_timeout_s: float = 2.0,
        timeout_s: float = 30.0,
        retry_after_s: int = 1,
        max_connections: int = 100,
    ) -> None:
        self.owners = owners
        self.node_id = node_id
        self.retry_after_s = retry_after_s
        self._timeout = httpx.Timeout(timeout_s, connect=connect_timeout_s)
        self._limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=20)
        self._client: httpx.AsyncClient | None = None

    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            # trust_env=False: no proxy from the environment between two nodes
            self._client = httpx.AsyncClient(
                timeout=self._timeout, limits=self._limits, trust_env=False, follow_redirects=False
            )
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


Authenticate = Callable[[HTTPConnection], Awaitable[Principal]]


class Forwarder:
    """ASGI middleware (module doc). `authenticate` resolves the caller as the routes do (the API's
    `ApiKeyBearer`)."""

    def __init__(self, app: ASGIApp, forwarding: Forwarding, authenticate: Authenticate) -> None:
        self.app = app
        self.forwarding = forwarding
        self.authenticate = authenticate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("root_path"):
            await self.app(scope, receive, send)
            return
        placed = await self.placement(scope)
        if placed is None or isinstance(placed, Local):
            await self.app(scope, receive, send)
            return
        scope[ROUTE] = FORWARDED
        what = _what(scope["path"])
        retry = {"Retry-After": str(self.forwarding.retry_after_s)}
        forwarded_by = _header(scope, FORWARDED_BY.encode())
        if forwarded_by is not None:
            owner = placed.url if isinstance(placed, Remote) else None
            known = f"its owner is {owner}" if owner else "no node is known to own it right now"
            message = (
                f"node {forwarded_by!r} forwarded this request to this node ({self.forwarding.node_id!r}), "
                f"which does not serve {what}: {known}. Ownership is moving between nodes; retry in "
                f"{self.forwarding.retry_after_s} s (appends with the same message_ids)."
            )
            await error_response(503, "not_owner", message, headers=retry, owner=owner)(scope, receive, send)
            return
        if isinstance(placed, Unknown):
            message = (
                f"no live node serves {what} right now (a node is taking it over); retry in "
                f"{self.forwarding.retry_after_s} s (appends with the same message_ids)."
            )
            await error_response(503, "owner_unknown", message, headers=retry)(scope, receive, send)
            return
        try:
            await proxy(self.forwarding.client(), placed.url, self.forwarding.node_id, scope, receive, send)
        except ProxyFailed as exc:
            log.warning(
                "%s %s: node %s at %s did not answer: %s",
                scope["method"],
                scope["path"],
                placed.node_id,
                placed.url,
                exc,
            )
            message = (
                f"the node serving {what} ({placed.node_id!r} at {placed.url}) did not answer ({exc}); "
                f"retry in {self.forwarding.retry_after_s} s. An append may have been applied: retrying it "
                "with the same message_ids returns the stored messages."
            )
            response = error_response(503, "owner_unreachable", message, headers=retry, owner=placed.url)
            await response(scope, receive, send)

    async def placement(self, scope: Scope) -> Placement | None:
        """Where the request is served; None when it is not one the forwarder places (or cannot)."""
        path: str = scope["path"]
        if path.startswith(THREADS):
            thread_id = path[len(THREADS) :].partition("/")[0]
            if not ID.matches(thread_id):
                return None
            try:
                caller = await self.authenticate(HTTPConnection(scope))
            except Exception:  # the routes answer it (401, 503) exactly as without forwarding
                return None
            return self.forwarding.owners.thread(caller.environment, caller.account_id, thread_id)
        for prefix in (*PROJECTION_PREFIXES, *PROJECTION_OPERATIONS):
            if path == prefix or path.startswith(prefix + "/"):
                return self.forwarding.owners.projections()
        return None


def _what(path: str) -> str:
    if path.startswith(THREADS):
        return f"thread {path[len(THREADS) :].partition('/')[0]!r}"
    if path.startswith(PROJECTION_OPERATIONS):
        return "`memstream verify` and `rebuild` (the node hosting the embedded projections)"
    return "the agent tools and memory (the node hosting the embedded projections)"


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return str(value.decode("latin-1"))
    return None
