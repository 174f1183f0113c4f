"""`memstream mcp --agent ID`: the MCP server of one agent over stdio, a client of a running node's
REST API (why not in process: see the package doc).

`RemoteAgentTools` lists the tools with `GET /v1/agents/{agent}/tools` and runs a call with
`POST /v1/agents/{agent}/tools/{name}` (`user_id`, `thread_id` as configured), with the API key
of the command; the node's error body becomes `ToolFailed` with its code, message and field, and
a node that does not answer is `node_unreachable`. `serve_stdio` checks the key and the agent once
before serving (`RemoteAgentTools.check`), so a wrong key or URL fails at start with the node's
message instead of at the first tool call.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx
from mcp.server.stdio import stdio_server

from core.ids import require_id
from memstream.mcp_server.server import build_server
from memstream.mcp_server.tools import ToolFailed

TIMEOUT_S = 60.0
"""A tool call may summarise search hits with the chat model: more than an ordinary request."""


class RemoteAgentTools:
    """`AgentToolBackend` over the node's REST API (module doc)."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        agent_id: str,
        *,
        user_id: str | None = None,
        thread_id: str | None = None,
    ) -> None:
        self.client = client
        self.agent_id = require_id(agent_id, "agent_id")
        self.user_id = None if user_id is None else require_id(user_id, "user_id")
        self.thread_id = None if thread_id is None else require_id(thread_id, "thread_id")
        self.path = f"/v1/agents/{self.agent_id}"

    async def check(self) -> None:
        """ToolFailed unless the node answers for this key and agent (the agent's bindings)."""
        await self._request("GET", self.path)

    async def list_tools(self) -> list[dict[str, Any]]:
        params = {"user_id": self.user_id} if self.user_id is not None else None
        body = await self._request("GET", f"{self.path}/tools", params=params)
        return [dict(tool["function"]) for tool in body["tools"]]

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        payload: dict[str, Any] = {"arguments": arguments}
        if self.user_id is not None:
            payload["user_id"] = self.user_id
        if self.thread_id is not None:
            payload["thread_id"] = self.thread_id
        body = await self._request("POST", f"{self.path}/tools/{quote(name, safe='')}", json=payload)
        result: dict[str, Any] = body["result"]
        return result

    async def _request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        try:
            response = await self.client.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ToolFailed(
                "node_unreachable",
                f"no memstream node answers at {self.client.base_url} ({exc!r}): start one with "
                "`memstream up`, or give its URL with --node",
            ) from exc
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.is_success and isinstance(body, dict):
            return body
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            raise ToolFailed(str(error.get("code", "error")), error["message"], error.get("field"))
        raise ToolFailed(
            "node_error", f"the node answered HTTP {response.status_code}: {response.text[:200]}"
        )


async def serve_stdio(
    node_url: str, api_key: str, agent_id: str, *, user_id: str | None = None, thread_id: str | None = None
) -> None:
    """Serve the agent's tools over stdin/stdout until the client closes them. ToolFailed before
    serving when the node refuses the key or the agent, or does not answer."""
    headers = {"Authorization": f"Bearer {api_key}"}
    async with httpx.AsyncClient(base_url=node_url, headers=headers, timeout=TIMEOUT_S) as client:
        tools = RemoteAgentTools(client, agent_id, user_id=user_id, thread_id=thread_id)
        await tools.check()
        server = build_server(lambda ctx: tools)
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
