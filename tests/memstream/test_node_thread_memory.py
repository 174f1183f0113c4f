"""Thread memory end to end through a real node: appends cross the 50-message threshold ->
thresholds -> compaction.requested -> flush (facts into agent memory, Memory bound) ->
compaction.flushed -> summarizer -> summary.json -> the context shows pinned facts, then the
summary, then the 20-message window."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from core.config import Settings
from tests.memstream.node_process import running_node
from tests.memstream.thread_memory import append_messages as _append
from tests.memstream.thread_memory import wait_for_summary as _wait_for_summary


@pytest.fixture
def client(settings: Settings, tmp_path: Path) -> Iterator[httpx.Client]:
    with running_node(settings, tmp_path) as node:
        yield node.api


def test_crossing_the_threshold_flushes_facts_then_summarizes(client: httpx.Client) -> None:
    assert client.put("/v1/agents/bot", json={"capabilities": ["memory"]}).status_code == 200
    _append(client, "trip", "ada", 55, "My name is Ada. I prefer window seats.")

    context = _wait_for_summary(client, "trip")
    pinned, summary, *window = context["messages"]
    # the flush ran before the summarizer: Ada's facts are pinned first, then the summary
    assert pinned["role"] == "system" and "<remembered_facts>" in pinned["content"]
    assert "Ada" in pinned["content"]
    assert summary["role"] == "system" and summary["content"].startswith("Previous conversation summary:")
    assert context["metadata"]["summary_version"] == 1
    # the window is independent of the summary: still the last 20 messages
    assert len(window) == 20 and window[-1]["content"] == "Message 54 about the trip."

    # the pre-compaction flush stored Ada's explicit self-statements, private to her
    entries = client.get("/v1/agents/bot/memory", params={"user_id": "ada"}).json()["entries"]
    stored = {e["key"]: e for e in entries}
    assert any("Ada" in e["content"] for e in stored.values()), stored
    assert all(e["visibility"] == "private" and e["user_id"] == "ada" for e in stored.values())
    assert all(e["source"]["thread_id"] == "trip" for e in stored.values())


def test_without_memory_bound_a_thread_gets_a_summary_and_no_agent_memory(client: httpx.Client) -> None:
    _append(client, "plain", "bob", 52, "My name is Bob. I prefer aisle seats.")
    context = _wait_for_summary(client, "plain")
    assert context["metadata"]["summary_version"] == 1
    assert client.get("/v1/agents/bot/memory", params={"user_id": "bob"}).json()["entries"] == []
