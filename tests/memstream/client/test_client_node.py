"""`MemstreamClient` against a real node process: every method, the typed errors, and a retry
across a refused connection."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.config import Settings
from memstream.client import (
    AuthError,
    ConflictError,
    InvalidInputError,
    MemstreamClient,
    NewMessage,
    NotFoundError,
    RetryPolicy,
    UnavailableError,
    chat_messages,
    tool_definitions,
)
from memstream.embedded.process import free_port
from tests.memstream.client.node_scenario import RECORDED, TOOL_RESULT, node_with_key


@pytest.fixture
def node(settings: Settings, tmp_path: Path) -> Iterator[tuple[str, str]]:
    yield from node_with_key(settings, tmp_path)


def test_every_method_against_a_real_node(node: tuple[str, str]) -> None:
    url, key = node
    with MemstreamClient(url, key) as ms:
        # threads
        created = ms.put_thread("t-1", agent_id="bot", user_id="ada", metadata={"channel": "web"})
        assert created.created and (created.agent_id, created.user_id) == ("bot", "ada")
        replaced = ms.put_thread("t-1", agent_id="bot", user_id="ada", metadata={"channel": "web"})
        assert not replaced.created
        updated = ms.update_thread("t-1", {"config": {"max_working_memory_messages": 5}, "channel": None})
        assert updated.metadata == {"config": {"max_working_memory_messages": 5}} and updated.window_size == 5
        assert ms.get_thread("t-1") == updated

        # appends: generated ids, and a resend of the same ids returns the same stored messages
        appended = ms.append("t-1", RECORDED)
        assert [m.offset for m in appended.messages] == [0, 1, 2, 3]
        assert all(m.message_id.startswith("m-") for m in appended.messages)
        resend = [
            NewMessage(message_id=m.message_id, role=m.role, content=m.content, tool_call=m.tool_call)
            for m in appended.messages
        ]
        assert ms.append("t-1", resend).messages == appended.messages
        page = ms.read_messages("t-1", after=0, limit=2)
        assert [m.offset for m in page.messages] == [1, 2] and page.next_after == 2

        # the context, as OpenAI messages
        messages = chat_messages(ms.get_context("t-1"))
        assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
        assert messages[1]["tool_calls"][0]["id"] == "call-7" and messages[2]["content"] == TOOL_RESULT
        assert ms.get_context("t-1", as_subagent=True).messages == []
        audit = ms.get_context("t-1", at_offset=1)  # the context when the thread had 2 messages
        assert [m["role"] for m in chat_messages(audit)] == ["user", "assistant"]
        assert audit.metadata.at_offset == 1

        # agents and tools
        agent = ms.bind_agent("bot", ["memory"])
        assert agent.capabilities == ["memory"] and "memory_store" in agent.tools
        assert ms.get_agent("bot") == agent
        tools = ms.list_tools("bot", user_id="ada")
        assert sorted(t.function.name for t in tools) == sorted(agent.tools)
        assert tool_definitions(tools)[0]["type"] == "function"

        stored = ms.memory_store(
            "bot",
            key="user.diet",
            content="Ada is vegetarian.",
            category="user_profile",
            importance=0.9,
            user_id="ada",
            thread_id="t-1",
        )
        entry_id = stored.result["entry"]["entry_id"]
        recalled = ms.memory_recall("bot", "vegetarian", user_id="ada")
        assert [hit["entry_id"] for hit in recalled.result["results"]] == [entry_id]
        pinned = ms.get_context("t-1").messages[0]
        assert pinned.role == "system" and "Ada is vegetarian." in (pinned.content or "")

        # memory entries
        listed = ms.list_memory("bot", user_id="ada", category="user_profile")
        assert [e.entry_id for e in listed.entries] == [entry_id] and listed.next_cursor is None
        assert ms.list_memory("bot").entries == []  # private to Ada
        assert ms.get_memory("bot", entry_id, user_id="ada").content == "Ada is vegetarian."
        edited = ms.edit_memory("bot", entry_id, user_id="ada", content="Ada is vegan.")
        assert edited.changed and edited.entry.content == "Ada is vegan."
        assert [e.content for e in ms.export_memory("bot", user_id="ada")] == ["Ada is vegan."]
        ms.delete_memory("bot", entry_id, user_id="ada")
        with pytest.raises(NotFoundError) as missing:
            ms.get_memory("bot", entry_id, user_id="ada")
        assert missing.value.status == 404

        ms.memory_store(
            "bot", key="deploy.day", content="Deploys on Tuesdays.", category="project_fact", user_id="ada"
        )
        forgotten = ms.memory_forget("bot", "deploy.day", scope="private", user_id="ada")
        assert forgotten.result["forgotten"] is True
        assert (
            ms.call_tool("bot", "memory_forget", '{"key": "deploy.day"}', user_id="ada").result["forgotten"]
            is False
        )

        # journal tools (the transcript projection is asynchronous)
        deadline = time.monotonic() + 90
        while (
            found := ms.journal_message_search("bot", "lighthouse", summarize=False, thread_id="t-1")
        ).result["count"] < 2:
            assert time.monotonic() < deadline, found
            time.sleep(0.5)
        view = ms.journal_tool_call_view("bot", "call-7", in_thread="t-1", user_id="ada")
        assert view.result["content"] == TOOL_RESULT

        # deleting the thread: everywhere, the transcript projection included; a repeat: same report
        def ada_hits() -> int:
            return int(
                ms.journal_message_search("bot", "lighthouse", summarize=False, user_id="ada").result["count"]
            )

        assert ada_hits() >= 2
        deleted = ms.delete_thread("t-1")
        assert deleted.deleted["journal"] == {"messages": 4, "up_to_seq": deleted.up_to_seq}
        assert ms.delete_thread("t-1") == deleted
        with pytest.raises(NotFoundError):
            ms.get_thread("t-1")
        while ada_hits():
            assert time.monotonic() < deadline + 60, "the projection kept the deleted messages"
            time.sleep(0.5)

        # erasing the user: their threads and private entries; a repeat is a new erasure of zeros
        ms.append("t-ada", [{"role": "user", "content": "Hello again."}], agent_id="bot", user_id="ada")
        ms.memory_store("bot", key="ada.k", content="Ada likes tea.", category="project_fact", user_id="ada")
        erased = ms.erase_user("ada")
        assert erased.completed_at is not None and erased.erased["threads"]["threads"] == 1
        assert erased.erased["threads"]["deletions"][0]["thread_id"] == "t-ada"
        assert erased.erased["memory"]["private_entries"] >= 1
        with pytest.raises(NotFoundError):
            ms.get_thread("t-ada")
        again = ms.erase_user("ada")
        assert again.erasure_id != erased.erasure_id and again.erased["threads"]["threads"] == 0
        with pytest.raises(NotFoundError):
            ms.erase_user("nobody")


def test_errors_are_typed_with_the_servers_code_status_and_field(node: tuple[str, str]) -> None:
    url, key = node
    with MemstreamClient(url, key) as ms:
        with pytest.raises(NotFoundError) as not_found:
            ms.get_thread("nope")
        assert (not_found.value.status, not_found.value.code) == (404, "not_found")
        ms.put_thread("t-2", agent_id="bot")
        with pytest.raises(ConflictError) as conflict:
            ms.put_thread("t-2", agent_id="other-bot")
        assert conflict.value.status == 409
        with pytest.raises(InvalidInputError) as invalid:
            ms.append("t-2", [{"role": "user", "content": ""}])
        assert (invalid.value.status, invalid.value.field) == (422, "messages[0]")
        with pytest.raises(ConflictError) as unbound:
            ms.memory_recall("bot", "anything")
        assert unbound.value.code == "capability_not_bound"
    with MemstreamClient(url, "msk_not_a_key") as stranger, pytest.raises(AuthError) as denied:
        stranger.get_thread("t-2")
    assert denied.value.status == 401


def test_a_refused_connection_is_retried_within_the_bounds() -> None:
    policy = RetryPolicy(max_attempts=3, initial_backoff_s=0.05, max_backoff_s=0.05)
    waits: list[float] = []
    url = f"http://127.0.0.1:{free_port()}"
    with MemstreamClient(url, "msk_x", retry=policy, sleep=waits.append) as ms:
        with pytest.raises(UnavailableError) as raised:
            ms.delete_memory("bot", "e-1")  # not idempotent, but never sent: retried
    assert (raised.value.status, raised.value.code) == (None, "connect_failed")
    assert len(waits) == 2 and all(0.025 <= w <= 0.05 for w in waits)


def test_the_readme_python_example_runs(
    node: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url, key = node
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    blocks = [
        b for b in re.findall(r"```python\n(.*?)```", readme, flags=re.DOTALL) if "MemstreamClient(" in b
    ]
    assert len(blocks) == 1
    (tmp_path / ".memstream").mkdir()
    (tmp_path / ".memstream" / "api-key").write_text(key + "\n")
    monkeypatch.chdir(tmp_path)
    exec(compile(blocks[0].replace("http://127.0.0.1:8080", url), "README.md", "exec"), {})
    assert "Prefers short answers." in capsys.readouterr().out
