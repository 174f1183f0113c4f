"""Transcript search end to end through a real node process: HTTP append -> journal -> relay ->
journal.messages -> clickhouse-projection -> chdb -> journal_message_search and
journal_tool_call_view over the tools endpoint (no Memory binding needed)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.config import Settings
from tests.memstream.node_process import running_node

SEARCH = "journal_message_search"
BIG_RESULT = "line of the nightly report: Zürich ok, 42 € settled\n" * 4_000  # ~210 KB


@pytest.fixture
def api(settings: Settings, tmp_path: Path) -> Iterator[httpx.Client]:
    with running_node(settings, tmp_path) as node:
        yield node.api


def _append(api: httpx.Client, thread: str, user: str | None, messages: list[dict[str, Any]]) -> None:
    body = {"agent_id": "bot", "user_id": user, "messages": messages}
    response = api.post(f"/v1/threads/{thread}/messages", json=body)
    assert response.status_code == 201, response.text


def _call(api: httpx.Client, name: str, arguments: dict[str, Any], **extra: str) -> httpx.Response:
    return api.post(f"/v1/agents/bot/tools/{name}", json={"arguments": arguments, **extra})


def _tool(api: httpx.Client, name: str, arguments: dict[str, Any], **extra: str) -> dict[str, Any]:
    response = _call(api, name, arguments, **extra)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()["result"]
    return result


def test_appended_messages_are_searchable_and_tool_output_pageable(api: httpx.Client) -> None:
    tools = [t["function"]["name"] for t in api.get("/v1/agents/bot/tools").json()["tools"]]
    assert tools == ["journal_message_search", "journal_tool_call_view"]  # Memory not bound

    _append(
        api,
        "t-ada-1",
        "ada",
        [
            {"message_id": "a1-0", "role": "system", "content": "Secret system prompt about the lighthouse."},
            {"message_id": "a1-1", "role": "user", "content": "Book the lighthouse tour for Saturday."},
            {
                "message_id": "a1-2",
                "role": "assistant",
                "content": "",
                "reasoning": "The lighthouse tour needs a booking call.",
                "tool_call": {"id": "call-7", "name": "book_tour", "arguments": '{"tour": "lighthouse"}'},
            },
            {"message_id": "a1-3", "role": "tool", "tool_call": {"id": "call-7", "result": BIG_RESULT}},
            {"message_id": "a1-4", "role": "assistant", "content": "The lighthouse tour is booked."},
        ],
    )
    _append(api, "t-ada-2", "ada", [{"message_id": "a2-0", "role": "user", "content": "Lighthouse open?"}])
    _append(api, "t-bob-1", "bob", [{"message_id": "b1-0", "role": "user", "content": "Lighthouse, Bob?"}])
    _append(api, "t-anon", None, [{"message_id": "n-0", "role": "user", "content": "Lighthouse, anyone?"}])

    # the projection is asynchronous: wait until Ada's three searchable messages are visible
    deadline = time.monotonic() + 90
    while True:
        found = _tool(api, SEARCH, {"query": "lighthouse", "summarize": False}, user_id="ada")
        anonymous = _tool(api, SEARCH, {"query": "lighthouse", "summarize": False}, thread_id="t-anon")
        if found["count"] == 3 and anonymous["count"] >= 1:
            break
        assert time.monotonic() < deadline, found
        time.sleep(0.5)
    ids = sorted(m["message_id"] for m in found["messages"])
    assert ids == ["a1-1", "a1-4", "a2-0"]  # no system, tool or reasoning text; not Bob's thread
    assert {m["role"] for m in found["messages"]} == {"user", "assistant"}
    # a thread without a user sees only the threads without a user (issue 9, finding 11)
    assert [m["message_id"] for m in anonymous["messages"]] == ["n-0"]
    for arguments in ({"tool_call_id": "call-7"}, {"tool_call_id": "call-7", "thread_id": "t-ada-1"}):
        hidden = _call(api, "journal_tool_call_view", arguments, thread_id="t-anon")
        assert hidden.status_code == 404, hidden.text

    current = _tool(
        api,
        "journal_message_search",
        {"query": "lighthouse tour", "scope": "current_thread", "summarize": False},
        thread_id="t-ada-2",
    )
    assert [m["message_id"] for m in current["messages"]] == ["a2-0"]

    summarized = _tool(api, "journal_message_search", {"query": "lighthouse"}, user_id="ada")
    threads = {t["thread_id"]: t for t in summarized["threads"]}
    assert set(threads) == {"t-ada-1", "t-ada-2"}
    assert all(t["summary"] for t in threads.values())
    assert sorted(m["message_id"] for m in threads["t-ada-1"]["matches"]) == ["a1-1", "a1-4"]

    bad = _call(api, SEARCH, {"query": "x", "limit": 51})
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "arguments.limit"

    # the whole 200 KB tool result comes back in 32 KB pages
    pages: list[str] = []
    offset: int | None = 0
    while offset is not None:
        page = _tool(
            api, "journal_tool_call_view", {"tool_call_id": "call-7", "offset": offset}, thread_id="t-ada-1"
        )
        assert page["length"] <= 32_768 and page["total_bytes"] == len(BIG_RESULT.encode())
        pages.append(page["content"])
        offset = page["next_offset"]
    assert "".join(pages) == BIG_RESULT and len(pages) == 7
    arguments = _tool(
        api, "journal_tool_call_view", {"tool_call_id": "call-7", "part": "arguments"}, user_id="ada"
    )
    assert arguments["content"] == '{"tour": "lighthouse"}' and arguments["tool_name"] == "book_tour"

    missing = _call(api, "journal_tool_call_view", {"tool_call_id": "nope"})
    assert missing.status_code == 404, missing.text
