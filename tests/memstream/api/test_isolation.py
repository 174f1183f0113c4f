"""Cross-account isolation: account B's key never reaches account A's thread of the same id."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from memstream.api import ApiDeps

from ..summary_files import write_summary
from .conftest import Keys


async def _seed_acme(client: httpx.AsyncClient, keys: Keys, deps: ApiDeps) -> None:
    put = await client.put(
        "/v1/threads/shared",
        json={"agent_id": "bot", "user_id": "u1", "metadata": {"secret": "acme"}},
        headers=keys.acme,
    )
    assert put.status_code == 201
    appended = await client.post(
        "/v1/threads/shared/messages",
        json={"messages": [{"message_id": "a1", "role": "user", "content": "acme secret"}]},
        headers=keys.acme,
    )
    assert appended.status_code == 201
    write_summary(
        Path(deps.settings.object_store.removeprefix("file://")),
        "acme",
        "bot",
        "shared",
        "acme summary",
        version=1,
        last_message_offset=0,
        last_message_id="a1",
        message_count=1,
    )


async def test_other_account_cannot_read_or_update(
    client: httpx.AsyncClient, keys: Keys, deps: ApiDeps
) -> None:
    await _seed_acme(client, keys, deps)
    for method, path, body in [
        ("GET", "/v1/threads/shared", None),
        ("PATCH", "/v1/threads/shared", {"metadata": {"secret": "globex"}}),
        ("GET", "/v1/threads/shared/messages", None),
        ("GET", "/v1/threads/shared/context", None),
        ("POST", "/v1/threads/shared/messages", {"messages": [{"role": "user", "content": "x"}]}),
    ]:
        response = await client.request(method, path, json=body, headers=keys.globex)
        assert response.status_code == 404, (method, path, response.text)
        assert "acme" not in response.text
    # acme's thread is untouched
    thread = (await client.get("/v1/threads/shared", headers=keys.acme)).json()
    assert thread["metadata"] == {"secret": "acme"}
    page = (await client.get("/v1/threads/shared/messages", headers=keys.acme)).json()
    assert [m["content"] for m in page["messages"]] == ["acme secret"]


async def test_same_thread_id_is_a_separate_thread(
    client: httpx.AsyncClient, keys: Keys, deps: ApiDeps
) -> None:
    await _seed_acme(client, keys, deps)
    # globex creates its own "shared" thread, even with another agent: no conflict with acme's
    put = await client.put("/v1/threads/shared", json={"agent_id": "other-bot"}, headers=keys.globex)
    assert put.status_code == 201
    assert (put.json()["account_id"], put.json()["metadata"]) == ("globex", {})
    appended = await client.post(
        "/v1/threads/shared/messages",
        json={"messages": [{"message_id": "a1", "role": "user", "content": "globex words"}]},
        headers=keys.globex,
    )
    assert appended.status_code == 201
    # the same message_id in another account is another message: offset 0 of globex's thread
    [message] = appended.json()["messages"]
    assert (message["account_id"], message["offset"], message["content"]) == ("globex", 0, "globex words")

    context = (await client.get("/v1/threads/shared/context", headers=keys.globex)).json()
    assert context["messages"] == [
        {"role": "user", "content": "globex words"}
    ]  # no acme summary, no acme messages
    assert "acme" not in json.dumps(context)

    acme_context = (await client.get("/v1/threads/shared/context", headers=keys.acme)).json()
    assert [m["content"] for m in acme_context["messages"]] == [
        "Previous conversation summary: acme summary",
        "acme secret",
    ]


async def test_auto_create_by_append_is_per_account(
    client: httpx.AsyncClient, keys: Keys, deps: ApiDeps
) -> None:
    await _seed_acme(client, keys, deps)
    response = await client.post(
        "/v1/threads/shared/messages",
        json={"agent_id": "bot", "user_id": "u1", "messages": [{"role": "user", "content": "globex first"}]},
        headers=keys.globex,
    )
    assert response.status_code == 201
    assert [(m["account_id"], m["offset"]) for m in response.json()["messages"]] == [("globex", 0)]
    acme_page = (await client.get("/v1/threads/shared/messages", headers=keys.acme)).json()
    assert [m["content"] for m in acme_page["messages"]] == ["acme secret"]
