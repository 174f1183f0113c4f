"""`AsyncMemstreamClient` against a real node process: every method, and typed errors."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.config import Settings
from memstream.client import AsyncMemstreamClient, ConflictError, NotFoundError, chat_messages
from tests.memstream.client.node_scenario import RECORDED, TOOL_RESULT, node_with_key


@pytest.fixture
def node(settings: Settings, tmp_path: Path) -> Iterator[tuple[str, str]]:
    yield from node_with_key(settings, tmp_path)


async def test_every_method_against_a_real_node(node: tuple[str, str]) -> None:
    url, key = node
    async with AsyncMemstreamClient(url, key) as ms:
        created = await ms.put_thread("t-a", agent_id="bot", user_id="ada")
        assert created.created and created.metadata == {}
        updated = await ms.update_thread("t-a", {"tag": "x"})
        assert updated.metadata == {"tag": "x"} and await ms.get_thread("t-a") == updated
        with pytest.raises(ConflictError):
            await ms.put_thread("t-a", agent_id="bot", user_id="bob")

        appended = await ms.append("t-a", RECORDED, agent_id="bot", user_id="ada")
        assert [m.offset for m in appended.messages] == [0, 1, 2, 3]
        page = await ms.read_messages("t-a", after=2)
        assert [m.offset for m in page.messages] == [3] and page.next_after == 3
        context = await ms.get_context("t-a")
        assert context.metadata.window_messages == 4 and chat_messages(context)[2]["tool_call_id"] == "call-7"
        assert (await ms.get_context("t-a", as_subagent=True)).metadata.window_size == 0

        agent = await ms.bind_agent("bot", ["memory"])
        assert await ms.get_agent("bot") == agent
        assert {t.function.name for t in await ms.list_tools("bot")} == set(agent.tools)
        stored = await ms.memory_store(
            "bot", key="team", content="The team is Ada and Bob.", category="project_fact", scope="shared"
        )
        entry_id = stored.result["entry"]["entry_id"]
        recalled = await ms.memory_recall("bot", "team", user_id="ada")
        assert [hit["entry_id"] for hit in recalled.result["results"]] == [entry_id]
        assert [e.entry_id for e in (await ms.list_memory("bot", visibility="shared")).entries] == [entry_id]
        assert (await ms.get_memory("bot", entry_id)).key == "team"
        edited = await ms.edit_memory("bot", entry_id, importance=0.8)
        assert edited.changed and edited.entry.importance == 0.8
        assert [e.importance for e in await ms.export_memory("bot")] == [0.8]
        await ms.delete_memory("bot", entry_id)
        with pytest.raises(NotFoundError):
            await ms.delete_memory("bot", entry_id)
        await ms.memory_store("bot", key="k", content="Temporary.", category="observation", user_id="ada")
        assert (await ms.memory_forget("bot", "k", user_id="ada")).result["forgotten"] is True
        called = await ms.call_tool("bot", "memory_recall", {"query": "Temporary"}, user_id="ada")
        assert called.tool == "memory_recall" and called.result["count"] == 0

        deadline = time.monotonic() + 90
        while (await ms.journal_message_search("bot", "lighthouse", user_id="ada")).result["count"] < 2:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.5)
        view = await ms.journal_tool_call_view("bot", "call-7", part="arguments", thread_id="t-a")
        assert view.result["content"] == '{"tour": "lighthouse"}'
        page_one = await ms.journal_tool_call_view("bot", "call-7", length=7, thread_id="t-a")
        assert page_one.result["content"] == TOOL_RESULT[:7] and page_one.result["next_offset"] == 7
