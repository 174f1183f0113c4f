"""The agent tools in MCP's terms: tool definitions from the OpenAI function definitions the API
offers, results and errors as `CallToolResult`s."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from mcp_types import CallToolResult, TextContent, Tool, ToolAnnotations

_ANNOTATIONS = {
    "memory_store": ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False),
    "memory_recall": ToolAnnotations(read_only_hint=True, open_world_hint=False),
    "memory_forget": ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False),
    "journal_message_search": ToolAnnotations(read_only_hint=True, open_world_hint=False),
    "journal_tool_call_view": ToolAnnotations(read_only_hint=True, open_world_hint=False),
}


class ToolFailed(Exception):
    """A tool call (or tool listing) the API refused: its error `code`, `message` and, when one
    input field is at fault, `field` - exactly as in the API's error body."""

    def __init__(self, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field

    def body(self) -> dict[str, Any]:
        """The API's error body for this failure."""
        error = {"code": self.code, "message": self.message}
        if self.field is not None:
            error["field"] = self.field
        return {"error": error}


def mcp_tool(function: Mapping[str, Any]) -> Tool:
    """The MCP definition of one OpenAI function definition (`name`, `description`, `parameters`)."""
    name = str(function["name"])
    return Tool(
        name=name,
        description=function.get("description"),
        input_schema=dict(function["parameters"]),
        annotations=_ANNOTATIONS.get(name),
    )


def tool_result(result: Mapping[str, Any]) -> CallToolResult:
    """A tool's JSON result: as text for the model, and as structured content."""
    return CallToolResult(
        content=[TextContent(text=json.dumps(result, ensure_ascii=False))], structured_content=dict(result)
    )


def tool_error(failed: ToolFailed) -> CallToolResult:
    """A refused call: `isError`, the API's message as the text (`code: message`), the API's error
    body as structured content."""
    return CallToolResult(
        content=[TextContent(text=f"{failed.code}: {failed.message}")],
        structured_content=failed.body(),
        is_error=True,
    )
