"""Pure tests of the memory tools' definitions and argument validation."""

from __future__ import annotations

import json

import pytest

from core.errors import InvalidInput
from core.memory.models import MEMORY_CAPABILITY
from core.memory.tools import (
    MEMORY_TOOLS,
    ForgetArgs,
    RecallArgs,
    StoreArgs,
    UnknownTool,
    parse_arguments,
    tools_for,
)


def test_memory_bound_offers_exactly_the_three_tools() -> None:
    names = [tool.function.name for tool in tools_for([MEMORY_CAPABILITY])]
    assert names == ["memory_store", "memory_recall", "memory_forget"]
    assert tools_for([]) == []
    assert tools_for(["search", "web"]) == []


def test_definitions_are_openai_function_schemas() -> None:
    for tool in MEMORY_TOOLS:
        dumped = tool.model_dump()
        assert dumped["type"] == "function"
        params = dumped["function"]["parameters"]
        assert params["type"] == "object" and params["additionalProperties"] is False
        assert set(params["required"]) <= set(params["properties"])
        assert len(dumped["function"]["description"]) > 40
        json.dumps(dumped)  # serialisable as is
    store = MEMORY_TOOLS[0].function.parameters["properties"]
    assert store["scope"]["enum"] == ["private", "shared"]
    assert store["category"]["enum"] == ["user_profile", "project_fact", "observation"]
    assert (store["importance"]["minimum"], store["importance"]["maximum"]) == (0.0, 1.0)
    recall = MEMORY_TOOLS[1].function.parameters["properties"]
    assert (recall["limit"]["minimum"], recall["limit"]["default"]) == (1, 5)
    assert "maximum" not in recall["limit"]  # above 20 is capped, not refused
    assert "capped at 20" in recall["limit"]["description"]


def test_arguments_parse_from_json_text_or_object_with_defaults() -> None:
    args = parse_arguments(
        "memory_store", '{"key": "user.name", "content": "Ada", "category": "user_profile"}'
    )
    assert args == StoreArgs(
        key="user.name", content="Ada", category="user_profile", scope="private", importance=0.5
    )
    assert parse_arguments("memory_recall", {"query": "bikes"}) == RecallArgs(query="bikes", limit=5)
    assert parse_arguments("memory_recall", {"query": "bikes", "limit": 50}) == RecallArgs(
        query="bikes", limit=50
    )  # the recaller caps it at 20
    assert parse_arguments("memory_forget", {"key": "k", "scope": "shared"}) == ForgetArgs(
        key="k", scope="shared"
    )
    assert parse_arguments(
        "memory_store", {"key": "k", "content": "c", "category": "observation", "importance": 1}
    )


@pytest.mark.parametrize(
    ("name", "arguments", "field", "fragment"),
    [
        ("memory_store", {"content": "c", "category": "observation"}, "arguments.key", "required"),
        (
            "memory_store",
            {"key": "k", "content": "c", "category": "diary"},
            "arguments.category",
            "user_profile",
        ),
        (
            "memory_store",
            {"key": "k", "content": "c", "category": "observation", "importance": 1.5},
            "arguments.importance",
            "1",
        ),
        (
            "memory_store",
            {"key": "k", "content": "c", "category": "observation", "scope": "global"},
            "arguments.scope",
            "private",
        ),
        (
            "memory_store",
            {"key": "k", "content": "", "category": "observation"},
            "arguments.content",
            "at least 1",
        ),
        (
            "memory_store",
            {"key": "k", "content": "c", "category": "observation", "ttl": 3},
            "arguments.ttl",
            "unknown argument",
        ),
        ("memory_recall", {"query": "q", "limit": 0}, "arguments.limit", "greater than or equal to 1"),
        ("memory_recall", {"query": "q", "limit": "5"}, "arguments.limit", "integer"),
        ("memory_recall", {"query": "q", "limit": True}, "arguments.limit", "integer"),
        ("memory_forget", {}, "arguments.key", "required"),
        ("memory_forget", "[1, 2]", "arguments", "JSON object"),
        ("memory_forget", "{not json", "arguments", "not valid JSON"),
    ],
)
def test_bad_arguments_name_the_argument(name: str, arguments: object, field: str, fragment: str) -> None:
    with pytest.raises(InvalidInput) as err:
        parse_arguments(name, arguments)  # type: ignore[arg-type]
    assert err.value.field == field
    assert fragment in err.value.message


def test_unknown_tool() -> None:
    with pytest.raises(UnknownTool, match="memory_store"):
        parse_arguments("memory_delete_everything", {})
