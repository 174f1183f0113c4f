"""Agent memory end to end through a real node process: tool store -> Postgres + outbox -> Kafka ->
qdrant-projection -> Qdrant Edge -> hybrid recall, and pinning into the context."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.config import Settings
from tests.memstream.node_process import running_node


@pytest.fixture
def node_api(settings: Settings, tmp_path: Path) -> Iterator[httpx.Client]:
    with running_node(settings, tmp_path) as node:
        yield node.api


MEMORY_TOOLS = ["memory_forget", "memory_recall", "memory_store"]


def _tool(client: httpx.Client, name: str, arguments: dict[str, Any], **extra: str) -> dict[str, Any]:
    response = client.post(f"/v1/agents/bot/tools/{name}", json={"arguments": arguments, **extra})
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()["result"]
    return result


def test_stored_memory_is_recalled_through_the_index_and_pinned(node_api: httpx.Client) -> None:
    client = node_api
    assert client.put("/v1/agents/bot", json={"capabilities": ["memory"]}).status_code == 200
    tools = client.get("/v1/agents/bot/tools").json()["tools"]
    names = sorted(t["function"]["name"] for t in tools)  # the journal tools are offered without Memory too
    assert names == ["journal_message_search", "journal_tool_call_view", *MEMORY_TOOLS]

    stored = _tool(
        client,
        "memory_store",
        {
            "key": "user.diet",
            "content": "Ada is vegetarian and allergic to peanuts.",
            "category": "user_profile",
            "scope": "private",
            "importance": 0.9,
        },
        user_id="ada",
    )
    assert stored["visibility"] == "private"
    _tool(
        client,
        "memory_store",
        {"key": "deploy.day", "content": "Deploys happen on Tuesdays.", "category": "project_fact"},
        user_id="ada",
    )

    # the projection reaches the index asynchronously: recall answers from Qdrant once it has
    deadline = time.monotonic() + 90
    while True:
        recalled = _tool(client, "memory_recall", {"query": "what food can Ada not eat?"}, user_id="ada")
        if recalled["path"] == "qdrant" and recalled["count"]:
            break
        assert time.monotonic() < deadline, f"recall never answered from the index: {recalled}"
        time.sleep(0.5)
    assert recalled["results"][0]["key"] == "user.diet"

    # another user never sees Ada's private entry, through the index or the fallback
    other = _tool(client, "memory_recall", {"query": "what food can Ada not eat?"}, user_id="bob")
    assert all(hit["key"] != "user.diet" for hit in other["results"])

    # pinned into Ada's context, as the first system message
    appended = client.post(
        "/v1/threads/t1/messages",
        json={"agent_id": "bot", "user_id": "ada", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert appended.status_code == 201, appended.text
    context = client.get("/v1/threads/t1/context").json()
    first = context["messages"][0]
    assert first["role"] == "system" and "<remembered_facts>" in first["content"]
    assert "allergic to peanuts" in first["content"]

    # forgetting removes it from recall once the tombstone is projected
    assert _tool(client, "memory_forget", {"key": "user.diet"}, user_id="ada")
    deadline = time.monotonic() + 60
    while True:
        recalled = _tool(client, "memory_recall", {"query": "peanuts vegetarian"}, user_id="ada")
        if all(hit["key"] != "user.diet" for hit in recalled["results"]):
            break
        assert time.monotonic() < deadline, recalled
        time.sleep(0.5)
