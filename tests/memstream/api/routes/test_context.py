from __future__ import annotations

from pathlib import Path

import httpx

from core.journal.models import ThreadRef
from core.summaries.models import summary_key
from core.turn_context import SUMMARY_PREFIX
from memstream.api import ApiDeps
from sinks.slatedb.journal import SlateJournal

from ... import summary_files
from ..conftest import Keys


async def append(client: httpx.AsyncClient, keys: Keys, count: int, thread: str = "t1") -> None:
    messages = [{"message_id": f"m{i}", "role": "user", "content": f"message {i}"} for i in range(count)]
    response = await client.post(
        f"/v1/threads/{thread}/messages", json={"agent_id": "bot", "messages": messages}, headers=keys.acme
    )
    assert response.status_code == 201


def write_summary(deps: ApiDeps, content: str) -> None:
    root = Path(deps.settings.object_store.removeprefix("file://"))
    summary_files.write_summary(root, "acme", "bot", "t1", content, version=7)


async def test_context_summary_then_window(client: httpx.AsyncClient, keys: Keys, deps: ApiDeps) -> None:
    await append(client, keys, 25)
    write_summary(deps, "The user is planning a trip.")
    response = await client.get("/v1/threads/t1/context", headers=keys.acme)
    assert response.status_code == 200
    body = response.json()
    assert body["messages"][0] == {
        "role": "system",
        "content": SUMMARY_PREFIX + "The user is planning a trip.",
    }
    assert body["messages"][1:] == [{"role": "user", "content": f"message {i}"} for i in range(5, 25)]
    meta = body["metadata"]
    assert (meta["window_size"], meta["window_messages"], meta["summary_version"], meta["pinned_count"]) == (
        20,
        20,
        7,
        0,
    )
    assert meta["token_count"] > 20
    assert (meta["first_offset"], meta["last_offset"]) == (5, 24)


async def test_metadata_lowers_window(client: httpx.AsyncClient, keys: Keys) -> None:
    await append(client, keys, 10)
    patched = await client.patch(
        "/v1/threads/t1", json={"metadata": {"config": {"max_working_memory_messages": 2}}}, headers=keys.acme
    )
    assert patched.status_code == 200
    body = (await client.get("/v1/threads/t1/context", headers=keys.acme)).json()
    assert [m["content"] for m in body["messages"]] == ["message 8", "message 9"]
    assert body["metadata"]["window_size"] == 2
    assert body["metadata"]["summary_version"] is None  # none yet


async def test_tool_calls_are_openai_shaped(client: httpx.AsyncClient, keys: Keys) -> None:
    messages = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "tool_call": {"id": "c1", "name": "weather", "arguments": '{"city": "Oslo"}'}},
        {"role": "tool", "tool_call": {"id": "c1", "result": "rain"}},
        {"role": "assistant", "content": "Rain in Oslo.", "reasoning": "the tool said rain"},
    ]
    await client.post(
        "/v1/threads/t1/messages", json={"agent_id": "bot", "messages": messages}, headers=keys.acme
    )
    body = (await client.get("/v1/threads/t1/context", headers=keys.acme)).json()
    assert body["messages"] == [
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city": "Oslo"}'},
                }
            ],
        },
        {"role": "tool", "content": "rain", "tool_call_id": "c1"},
        {"role": "assistant", "content": "Rain in Oslo."},
    ]


async def test_context_of_missing_thread_is_404(client: httpx.AsyncClient, keys: Keys) -> None:
    assert (await client.get("/v1/threads/nope/context", headers=keys.acme)).status_code == 404


async def test_closed_journal_is_503(client: httpx.AsyncClient, keys: Keys, journal: SlateJournal) -> None:
    await append(client, keys, 3)
    await journal.close()
    response = await client.get("/v1/threads/t1/context", headers=keys.acme)
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "journal_unavailable"


async def test_fenced_journal_is_503_with_its_message(
    client: httpx.AsyncClient, keys: Keys, deps: ApiDeps
) -> None:
    await append(client, keys, 3)
    other = await SlateJournal.open(deps.settings.journal, flush_interval_ms=1)
    try:
        # opening `other` fenced the API's writer; its next write discovers that
        write = await client.post(
            "/v1/threads/t1/messages",
            json={"messages": [{"role": "user", "content": "x"}]},
            headers=keys.acme,
        )
        assert write.status_code == 503
        ref = ThreadRef(environment="test", account_id="acme", thread_id="t1")
        assert [m.content for m in await other.last(ref, 10)] == ["message 0", "message 1", "message 2"]
        response = await client.get("/v1/threads/t1/context", headers=keys.acme)
        assert response.status_code == 503
        error = response.json()["error"]
        assert error["code"] == "journal_fenced"
        assert "fenced" in error["message"]
    finally:
        await other.close()


async def test_corrupt_summary_is_503(client: httpx.AsyncClient, keys: Keys, deps: ApiDeps) -> None:
    await append(client, keys, 1)
    path = Path(deps.settings.object_store.removeprefix("file://")) / summary_key("test", "acme", "bot", "t1")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("not json")
    response = await client.get("/v1/threads/t1/context", headers=keys.acme)
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "summary_unavailable"


async def test_context_at_an_offset_audits_an_earlier_turn(
    client: httpx.AsyncClient, keys: Keys, deps: ApiDeps
) -> None:
    await append(client, keys, 25)
    write_summary(deps, "The user is planning a trip.")  # covers offsets 0..9, written before them
    early = (await client.get("/v1/threads/t1/context?at_offset=5", headers=keys.acme)).json()
    assert early["messages"] == [{"role": "user", "content": f"message {i}"} for i in range(6)]
    assert (early["metadata"]["at_offset"], early["metadata"]["summary_version"]) == (5, None)
    later = (await client.get("/v1/threads/t1/context?at_offset=20", headers=keys.acme)).json()
    assert later["messages"][0]["content"] == SUMMARY_PREFIX + "The user is planning a trip."
    assert later["messages"][1:] == [{"role": "user", "content": f"message {i}"} for i in range(1, 21)]
    assert (later["metadata"]["last_offset"], later["metadata"]["summary_version"]) == (20, 7)
    current = (await client.get("/v1/threads/t1/context", headers=keys.acme)).json()
    assert current["metadata"]["at_offset"] is None


async def test_context_at_a_bad_offset_is_422_and_another_accounts_thread_404(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    await append(client, keys, 3)
    for query in ("at_offset=3", "at_offset=-1", "at_offset=x", "at_offset=1&as_subagent=true"):
        response = await client.get(f"/v1/threads/t1/context?{query}", headers=keys.acme)
        assert response.status_code == 422, (query, response.text)
        assert response.json()["error"]["field"] == "at_offset"
    other = await client.get("/v1/threads/t1/context?at_offset=0", headers=keys.globex)
    assert other.status_code == 404
