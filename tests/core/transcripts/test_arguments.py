"""Validation of the journal tools' arguments: every argument, with the error naming it."""

from __future__ import annotations

from typing import Any

import pytest

from core.errors import InvalidInput
from core.transcripts.search import MAX_QUERY_CHARS, SearchArgs, parse_search_arguments
from core.transcripts.tool_call_view import MAX_PAGE_BYTES, ViewArgs, parse_view_arguments


def test_search_defaults_and_json_text() -> None:
    assert parse_search_arguments({"query": "refund"}) == SearchArgs(
        query="refund", scope="all_threads", limit=10, summarize=True
    )
    assert parse_search_arguments(
        '{"query": "refund", "scope": "current_thread", "limit": 50, "summarize": false}'
    ) == (SearchArgs(query="refund", scope="current_thread", limit=50, summarize=False))
    assert parse_search_arguments({"query": "q" * MAX_QUERY_CHARS, "limit": 1}).limit == 1
    assert parse_search_arguments({"query": "x", "limit": 5.0}).limit == 5  # JSON's one number type


def test_null_optional_arguments_count_as_absent() -> None:
    """Models often send every argument, with null for the unused ones."""
    nulls = '{"query": "refund", "scope": null, "limit": null, "summarize": null}'
    assert parse_search_arguments(nulls) == SearchArgs(query="refund")
    every = {"part": None, "offset": None, "length": None, "thread_id": None, "occurrence": None}
    assert parse_view_arguments({"tool_call_id": "c", **every}) == ViewArgs(tool_call_id="c")
    with pytest.raises(InvalidInput, match=r"arguments\.tool_call_id: required") as info:
        parse_view_arguments({"tool_call_id": None, **every})
    assert info.value.field == "arguments.tool_call_id"


@pytest.mark.parametrize(
    ("arguments", "field", "message"),
    [
        ("{not json", "arguments", "not valid JSON"),
        ([], "arguments", "must be a JSON object"),
        ({}, "arguments.query", "required by journal_message_search"),
        ({"query": None}, "arguments.query", "must be a string, got null"),
        ({"query": 42}, "arguments.query", "must be a string, got a number"),
        ({"query": ""}, "arguments.query", "must not be empty or blank"),
        ({"query": "  \n\t"}, "arguments.query", "must not be empty or blank"),
        ({"query": "?!- ..."}, "arguments.query", "at least one word"),
        ({"query": "q" * (MAX_QUERY_CHARS + 1)}, "arguments.query", "1001 characters; at most 1000"),
        (
            {"query": "x", "scope": "everything"},
            "arguments.scope",
            "must be one of 'current_thread', 'all_threads'",
        ),
        ({"query": "x", "limit": 0}, "arguments.limit", "must be 1..50, got 0"),
        ({"query": "x", "limit": 51}, "arguments.limit", "must be 1..50, got 51"),
        ({"query": "x", "limit": -3}, "arguments.limit", "must be 1..50, got -3"),
        ({"query": "x", "limit": "10"}, "arguments.limit", "must be an integer, got a string"),
        ({"query": "x", "limit": True}, "arguments.limit", "must be an integer, got a boolean"),
        ({"query": "x", "limit": 2.5}, "arguments.limit", "must be an integer, got 2.5"),
        ({"query": "x", "summarize": "yes"}, "arguments.summarize", "must be true or false, got 'yes'"),
        ({"query": "x", "summarize": 1}, "arguments.summarize", "must be true or false, got a number"),
        (
            {"query": "x", "user_id": "bob"},
            "arguments.user_id",
            "unknown argument for journal_message_search",
        ),
    ],
)
def test_search_argument_errors(arguments: Any, field: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=message) as info:
        parse_search_arguments(arguments)
    assert info.value.field == field
    assert info.value.message.startswith(field) or field == "arguments"


def test_view_defaults() -> None:
    assert parse_view_arguments({"tool_call_id": "call_1"}) == ViewArgs(
        tool_call_id="call_1", part="result", offset=0, length=MAX_PAGE_BYTES, thread_id=None
    )
    assert parse_view_arguments(
        {"tool_call_id": "call_1", "part": "arguments", "offset": 7, "length": 1, "thread_id": "t-1"}
    ) == ViewArgs(tool_call_id="call_1", part="arguments", offset=7, length=1, thread_id="t-1")
    assert parse_view_arguments({"tool_call_id": "c", "thread_id": None}).thread_id is None
    assert parse_view_arguments({"tool_call_id": "c", "occurrence": 3}).occurrence == 3


@pytest.mark.parametrize(
    ("arguments", "field", "message"),
    [
        ({}, "arguments.tool_call_id", "required by journal_tool_call_view"),
        ({"tool_call_id": None}, "arguments.tool_call_id", "required"),
        ({"tool_call_id": 12}, "arguments.tool_call_id", "must be a string, got a number"),
        ({"tool_call_id": ""}, "arguments.tool_call_id", "must be 1-128 characters"),
        ({"tool_call_id": "has space"}, "arguments.tool_call_id", "must be 1-128 characters"),
        ({"tool_call_id": "c" * 129}, "arguments.tool_call_id", "must be 1-128 characters"),
        ({"tool_call_id": "c", "part": "output"}, "arguments.part", "must be one of 'result', 'arguments'"),
        ({"tool_call_id": "c", "offset": -1}, "arguments.offset", "must be >= 0, got -1"),
        ({"tool_call_id": "c", "offset": "0"}, "arguments.offset", "must be an integer"),
        ({"tool_call_id": "c", "length": 0}, "arguments.length", "must be 1..32768, got 0"),
        ({"tool_call_id": "c", "length": 32769}, "arguments.length", "must be 1..32768, got 32769"),
        ({"tool_call_id": "c", "length": False}, "arguments.length", "got a boolean"),
        ({"tool_call_id": "c", "thread_id": "bad id"}, "arguments.thread_id", "must be 1-128 characters"),
        ({"tool_call_id": "c", "thread_id": 3}, "arguments.thread_id", "must be a string"),
        ({"tool_call_id": "c", "occurrence": 0}, "arguments.occurrence", "must be >= 1, got 0"),
        ({"tool_call_id": "c", "occurrence": "2"}, "arguments.occurrence", "must be an integer"),
        ({"tool_call_id": "c", "page": 2}, "arguments.page", "unknown argument for journal_tool_call_view"),
    ],
)
def test_view_argument_errors(arguments: Any, field: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=message) as info:
        parse_view_arguments(arguments)
    assert info.value.field == field
