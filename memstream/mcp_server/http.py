"""`McpEndpoint`: MCP over streamable HTTP, served by the node at `/mcp/{agent_id}`.

One URL per agent: `/mcp/{agent_id}`, optionally `?user_id=ID` (the user the agent acts for: their
private memory and their threads) and `?thread_id=ID` (the conversation: a thread of this agent,
whose user the call then acts for), as `user_id`/`thread_id` of `POST /v1/agents/{agent}/tools/...`.

Every request is authenticated on its own with its API key (`Authorization: Bearer msk_...`, the
API's `ApiKeyBearer`: the same cache, revocation and environment rules) before the MCP SDK sees it,
and its tools act as that key's principal: the account of the key, its surface (an `mcp` key is
never offered the journal tools), the agent and user of the URL. The SDK runs stateless (no MCP
session outlives a request, so no session can be used with another key) and answers JSON.
Refusals before MCP (a missing, bad or revoked key: 401 with `WWW-Authenticate: Bearer`; an
invalid id: 422; no agent in the path: 404; PostgreSQL down: 503 with `Retry-After`) have the
API's status, headers and message, in a JSON-RPC error (what an MCP client reads: its message is
`code: message`, its `data` the API's error body). The node runs the SDK's request manager
(`run`) for as long as it serves.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import parse_qs

from mcp.server.context import ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp_types import INVALID_REQUEST, ErrorData, JSONRPCError
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from core.auth import Principal
from core.errors import InvalidInput, MemstreamError, NotFound, PostgresUnavailable, Unauthorized
from core.ids import require_id
from memstream.api.agent_tools import AgentTools
from memstream.api.deps import ApiDeps
from memstream.api.errors import postgres_unavailable, status_of
from memstream.api.security import ApiKeyBearer
from memstream.mcp_server.server import AgentToolBackend, build_server
from memstream.mcp_server.tools import ToolFailed
from sinks.postgres.errors import is_postgres_unavailable

log = logging.getLogger(__name__)

MOUNT_PATH = "/mcp"
BINDING = "memstream.mcp"
"""The ASGI scope key holding the request's `Binding`."""
_QUERY = ("user_id", "thread_id")
T = TypeVar("T")
START_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Binding:
    """What one request's tools act as: the key's principal, the agent, the user and thread."""

    caller: Principal
    agent_id: str
    user_id: str | None = None
    thread_id: str | None = None


class InProcessTools:
    """`AgentToolBackend` running the tools in the node (`AgentTools`) for one request's binding."""

    def __init__(self, tools: AgentTools, binding: Binding) -> None:
        self.tools = tools
        self.binding = binding

    async def list_tools(self) -> list[dict[str, Any]]:
        b = self.binding
        specs = await _api_errors(self.tools.offered(b.caller, b.agent_id))
        return [spec.function.model_dump() for spec in specs]

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        b = self.binding
        call = self.tools.invoke(
            b.caller, b.agent_id, name, arguments, user_id=b.user_id, thread_id=b.thread_id
        )
        return await _api_errors(call)


async def _api_errors(call: Awaitable[T]) -> T:
    """Await `call`; the errors the API would answer become `ToolFailed` with its code and message."""
    try:
        return await call
    except MemstreamError as exc:
        raise ToolFailed(exc.code, exc.message, exc.field if isinstance(exc, InvalidInput) else None) from exc
    except Exception as exc:
        if is_postgres_unavailable(exc):
            unavailable = postgres_unavailable()
            raise ToolFailed(unavailable.code, unavailable.message) from exc
        log.exception("MCP tool call failed unexpectedly")
        raise ToolFailed("internal_error", "internal server error; the failure was logged") from exc


class McpEndpoint:
    """The ASGI application mounted at `MOUNT_PATH` (module doc)."""

    def __init__(self, deps: ApiDeps) -> None:
        self.auth = ApiKeyBearer(deps)
        self.tools = AgentTools(deps.agents, deps.threads, deps.memory, deps.transcripts)
        self.server = build_server(self._backend)
        self.manager = StreamableHTTPSessionManager(app=self.server, json_response=True, stateless=True)
        self._started = asyncio.Event()

    def _backend(self, ctx: ServerRequestContext[Any, Any]) -> AgentToolBackend:
        request = ctx.request
        binding = request.scope.get(BINDING) if isinstance(request, Request) else None
        if not isinstance(binding, Binding):  # every request passes __call__ first
            raise RuntimeError("an MCP request reached the server without a binding")
        return InProcessTools(self.tools, binding)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Serve requests inside this context (the SDK's request manager runs its task group)."""
        async with self.manager.run():
            self._started.set()
            try:
                yield
            finally:
                self._started.clear()

    async def run(self, stop: asyncio.Event) -> None:
        """Serve requests until `stop` is set (a node component)."""
        async with self.running():
            await stop.wait()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            raise NotFound("the MCP endpoint speaks HTTP only")
        try:
            scope[BINDING] = await self._bind(Request(scope, receive))
        except Exception as exc:
            refusal = _refusal(exc)
            if refusal is None:
                raise
            await refusal(scope, receive, send)
            return
        # The node starts the manager beside the API server (`run`); a request in that instant waits.
        await asyncio.wait_for(self._started.wait(), timeout=START_TIMEOUT_S)
        await self.manager.handle_request(scope, receive, send)

    async def _bind(self, request: Request) -> Binding:
        """The request's binding; the API's errors (401 the key, first; then 404 no agent, 422 an
        invalid id or query parameter)."""
        caller = await self.auth(request)
        scope = request.scope
        path: str = scope["path"]
        root: str = scope.get("root_path", "")
        agent_id = path[len(root) :] if root and path.startswith(root) else path
        agent_id = agent_id.strip("/")
        if not agent_id:
            raise NotFound(
                f"the MCP endpoint of an agent is {MOUNT_PATH}/{{agent_id}}, e.g. {MOUNT_PATH}/support-bot"
            )
        require_id(agent_id, "agent_id")
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        values: dict[str, str | None] = {}
        for name, given in query.items():
            if name not in _QUERY:
                raise InvalidInput(f"unknown query parameter {name!r}: use {' or '.join(_QUERY)}", field=name)
            if len(given) > 1:
                raise InvalidInput(f"{name} is given {len(given)} times; give it once", field=name)
            values[name] = require_id(given[0], name)
        return Binding(caller, agent_id, user_id=values.get("user_id"), thread_id=values.get("thread_id"))


def _refusal(exc: Exception) -> Response | None:
    """The answer to a request refused before MCP (None: not an error the API answers itself):
    the API's status and headers, with a JSON-RPC error body (what MCP clients read) whose message
    is the API's (`code: message`) and whose `data` is the API's error."""
    if is_postgres_unavailable(exc):
        exc = postgres_unavailable()
    if not isinstance(exc, MemstreamError):
        return None
    failed = ToolFailed(exc.code, exc.message, exc.field if isinstance(exc, InvalidInput) else None)
    headers: dict[str, str] = {}
    if isinstance(exc, Unauthorized):
        headers["WWW-Authenticate"] = "Bearer"
    elif isinstance(exc, PostgresUnavailable):
        headers["Retry-After"] = str(exc.retry_after_s)
    error = ErrorData(
        code=INVALID_REQUEST, message=f"{failed.code}: {failed.message}", data=failed.body()["error"]
    )
    body = JSONRPCError(jsonrpc="2.0", id=None, error=error)
    return Response(
        body.model_dump_json(by_alias=True, exclude_unset=True),
        status_code=status_of(exc),
        media_type="application/json",
        headers=headers,
    )
