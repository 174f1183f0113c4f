"""`memstream mcp --agent ID`: the MCP server of one agent over stdio, a client of a running node's
REST API (why not in process: see the package doc).

`RemoteAgentTools` lists the tools and runs a call through `memstream.client`'s
`AsyncMemstreamClient` (`list_tools`, `call_tool` with `user_id`, `thread_id` as configured),
with the API key of the command and no retries (the MCP client decides); the node's error becomes
`ToolFailed` with its code, message and field, and a node that does not answer is
`node_unreachable`. `serve_stdio` checks the key and the agent once before serving
(`RemoteAgentTools.check`), so a wrong key or URL fails at start with the node's message instead
of at the first tool call.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, TypeVar

from mcp.server.stdio import stdio_server

from core.ids import require_id
from memstream.client import NO_RETRY, AsyncMemstreamClient, MemstreamApiError
from memstream.mcp_server.server import build_server
from memstream.mcp_server.tools import ToolFailed

TIMEOUT_S = 60.0
"""A tool call may summarise search hits with the chat model: more than an ordinary request."""

T = TypeVar("T")


class RemoteAgentTools:
    """`AgentToolBackend` over the node's REST API (module doc)."""

    def __init__(
        self,
        client: AsyncMemstreamClient,
        node_url: str,
        agent_id: str,
        *,
        user_id: str | None = None,
        thread_id: str | None = None,
    ) -> None:
        self.client = client
        self.node_url = node_url
        self.agent_id = require_id(agent_id, "agent_id")
        self.user_id = None if user_id is None else require_id(user_id, "user_id")
        self.thread_id = None if thread_id is None else require_id(thread_id, "thread_id")

    async def check(self) -> None:
        """ToolFailed unless the node answers for this key and agent (the agent's bindings)."""
        await self._call(self.client.get_agent(self.agent_id))

    async def list_tools(self) -> list[dict[str, Any]]:
        tools = await self._call(self.client.list_tools(self.agent_id, user_id=self.user_id))
        return [tool.function.model_dump() for tool in tools]

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        done = await self._call(
            self.client.call_tool(
                self.agent_id, name, arguments, user_id=self.user_id, thread_id=self.thread_id
            )
        )
        return done.result

    async def _call(self, call: Awaitable[T]) -> T:
        try:
            return await call
        except MemstreamApiError as exc:
            if exc.status is None:  # no answer at all
                raise ToolFailed(
                    "node_unreachable",
                    f"no memstream node answers at {self.node_url} ({exc.message}): start one with "
                    "`memstream up`, or give its URL with --node",
                ) from exc
            raise ToolFailed(exc.code, exc.message, exc.field) from exc


async def serve_stdio(
    node_url: str, api_key: str, agent_id: str, *, user_id: str | None = None, thread_id: str | None = None
) -> None:
    """Serve the agent's tools over stdin/stdout until the client closes them. ToolFailed before
    serving when the node refuses the key or the agent, or does not answer."""
    async with AsyncMemstreamClient(node_url, api_key, timeout=TIMEOUT_S, retry=NO_RETRY) as client:
        tools = RemoteAgentTools(client, node_url, agent_id, user_id=user_id, thread_id=thread_id)
        await tools.check()
        server = build_server(lambda ctx: tools)
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
