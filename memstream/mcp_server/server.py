"""`build_server`: the MCP server of one agent's tools, over a backend that lists and runs them (in
process for streamable HTTP, the node's REST API for stdio)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_REQUEST,
    CallToolRequestParams,
    CallToolResult,
    ListToolsResult,
    PaginatedRequestParams,
)

import memstream
from memstream.mcp_server.tools import ToolFailed, mcp_tool, tool_error, tool_result

NAME = "memstream"
INSTRUCTIONS = (
    "memstream is this agent's long-term memory. memory_store remembers a fact across conversations, "
    "memory_recall finds remembered facts, memory_forget removes one (offered when the agent has "
    "Memory bound). journal_message_search searches earlier conversations with this user, "
    "journal_tool_call_view reads an earlier tool call's full result page by page."
)


class AgentToolBackend(Protocol):
    """One agent's tools as one caller is offered them."""

    async def list_tools(self) -> list[dict[str, Any]]:
        """The OpenAI function definitions (`name`, `description`, `parameters`) of the tools the
        caller is offered. ToolFailed when the API refuses (e.g. a revoked key)."""
        ...

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Run one call; its JSON result. ToolFailed with the API's error otherwise."""
        ...


BackendOf = Callable[[ServerRequestContext[Any, Any]], AgentToolBackend]
"""The backend serving one request (streamable HTTP: per request, from its key and URL)."""


def build_server(backend_of: BackendOf) -> Server[Any]:
    """The low-level MCP server: `tools/list` and `tools/call` of `backend_of(ctx)`. A refused
    listing is a JSON-RPC error carrying the API's message; a refused call is a tool result with
    `isError` (`tools.tool_error`)."""

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        try:
            functions = await backend_of(ctx).list_tools()
        except ToolFailed as failed:
            raise MCPError(INVALID_REQUEST, f"{failed.code}: {failed.message}", failed.body()) from None
        return ListToolsResult(tools=[mcp_tool(function) for function in functions])

    async def call_tool(ctx: ServerRequestContext[Any, Any], params: CallToolRequestParams) -> CallToolResult:
        try:
            result = await backend_of(ctx).call_tool(params.name, params.arguments or {})
        except ToolFailed as failed:
            return tool_error(failed)
        return tool_result(result)

    server: Server[Any] = Server(
        NAME,
        version=memstream.__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
    # The SDK's default middleware asks OpenTelemetry's global tracer on every message whether
    # anyone listens; memstream configures no OpenTelemetry (as for FastAPI in `create_app`).
    server.middleware.clear()
    return server
