"""The MCP SDK's own clients against a node: streamable HTTP with an API key, and the stdio command."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, TextContent


@asynccontextmanager
async def http_client(url: str, key: str | None) -> AsyncIterator[Client]:
    """A connected SDK client of the node's MCP endpoint `url`, sending `key` (None: no key)."""
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            yield client


def stdio_parameters(node_url: str, key: str, *args: str) -> StdioServerParameters:
    """`memstream mcp ARGS --node node_url` with the key in MEMSTREAM_API_KEY."""
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "memstream", "mcp", "--node", node_url, *args],
        env={**os.environ, "MEMSTREAM_API_KEY": key},
    )


@asynccontextmanager
async def stdio_client(node_url: str, key: str, *args: str) -> AsyncIterator[Client]:
    async with Client(stdio_parameters(node_url, key, *args)) as client:
        yield client


async def tool_names(client: Client) -> list[str]:
    return sorted(tool.name for tool in (await client.list_tools()).tools)


async def call(client: Client, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A successful call's result (its structured content, which its text repeats)."""
    result = await client.call_tool(name, arguments)
    assert not result.is_error, text_of(result)
    assert isinstance(result.structured_content, dict)
    assert json.loads(text_of(result)) == result.structured_content
    return result.structured_content


async def refused(client: Client, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A refused call's error body (`code`, `message`, `field`), as the API answers it."""
    result = await client.call_tool(name, arguments)
    assert result.is_error, text_of(result)
    assert isinstance(result.structured_content, dict)
    error: dict[str, Any] = result.structured_content["error"]
    assert text_of(result) == f"{error['code']}: {error['message']}"
    return error


def text_of(result: CallToolResult) -> str:
    [content] = result.content
    assert isinstance(content, TextContent)
    return content.text
