"""The agent tools in MCP's terms: the API's definitions unchanged, hints by what each tool does,
results and refusals as the model reads them."""

from __future__ import annotations

import json

from core.memory.tools import MEMORY_TOOLS
from core.transcripts.tools import JOURNAL_TOOLS
from memstream.mcp_server.tools import ToolFailed, mcp_tool, tool_error, tool_result
from tests.memstream.mcp_server.mcp_clients import text_of


def test_every_agent_tool_keeps_its_definition_and_says_what_it_touches() -> None:
    for spec in (*MEMORY_TOOLS, *JOURNAL_TOOLS):
        tool = mcp_tool(spec.function.model_dump())
        assert (tool.name, tool.description) == (spec.function.name, spec.function.description)
        assert tool.input_schema == spec.function.parameters
        assert tool.annotations is not None and tool.annotations.open_world_hint is False
    hints = {
        spec.function.name: mcp_tool(spec.function.model_dump()).annotations
        for spec in (*MEMORY_TOOLS, *JOURNAL_TOOLS)
    }
    read_only = sorted(name for name, hint in hints.items() if hint is not None and hint.read_only_hint)
    assert read_only == ["journal_message_search", "journal_tool_call_view", "memory_recall"]
    forget = hints["memory_forget"]
    assert forget is not None and forget.destructive_hint is True


def test_results_and_refusals() -> None:
    result = tool_result({"count": 1, "messages": [{"text": "Zürich"}]})
    assert not result.is_error and result.structured_content == {"count": 1, "messages": [{"text": "Zürich"}]}
    assert json.loads(text_of(result)) == result.structured_content
    assert "Zürich" in text_of(result)

    refused = tool_error(ToolFailed("invalid_input", "arguments.limit: at most 50", "arguments.limit"))
    assert refused.is_error
    assert text_of(refused) == "invalid_input: arguments.limit: at most 50"
    assert refused.structured_content == {
        "error": {
            "code": "invalid_input",
            "message": "arguments.limit: at most 50",
            "field": "arguments.limit",
        }
    }
    assert tool_error(ToolFailed("unknown_tool", "no tool 'x'")).structured_content == {
        "error": {"code": "unknown_tool", "message": "no tool 'x'"}
    }
