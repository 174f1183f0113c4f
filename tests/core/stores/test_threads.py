"""The thread store's contract (`core.threads.ThreadStore`), on every store: the in-memory fake and
Postgres. Rows scoped by (environment, account_id, thread_id), upserts that never change a thread's
agent or user, creation in a transaction held open for a block, atomic metadata updates."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from core.errors import InvalidInput
from core.threads import Thread, ThreadStore
from sinks.postgres.threads import PostgresThreadStore
from tests.fakes.threads import InMemoryThreadStore


@pytest.fixture(params=["memory", pytest.param("postgres", marks=pytest.mark.engine)])
def store(request: pytest.FixtureRequest) -> ThreadStore:
    """The store under test, empty."""
    if request.param == "memory":
        return InMemoryThreadStore()
    return PostgresThreadStore(request.getfixturevalue("pool"))


async def test_get_missing_is_none(store: ThreadStore) -> None:
    assert await store.get("test", "acme", "t1") is None


async def test_upsert_inserts_then_replaces_metadata(store: ThreadStore) -> None:
    created, inserted = await store.upsert("test", "acme", "t1", "bot", "u1", {"a": 1, "b": {"c": [1, "x"]}})
    assert inserted is True
    assert (created.agent_id, created.user_id, created.metadata) == (
        "bot",
        "u1",
        {"a": 1, "b": {"c": [1, "x"]}},
    )
    assert created.updated_at == created.created_at
    updated, inserted = await store.upsert("test", "acme", "t1", "bot", "u1", {"z": True})
    assert inserted is False
    assert updated.metadata == {"z": True}
    assert updated.created_at == created.created_at
    assert updated.updated_at > created.updated_at
    assert await store.get("test", "acme", "t1") == updated


async def test_stored_metadata_is_a_copy(store: ThreadStore) -> None:
    metadata: dict[str, Any] = {"config": {"max_working_memory_messages": 5}}
    await store.upsert("test", "acme", "t1", "bot", None, metadata)
    metadata["config"]["max_working_memory_messages"] = 9
    got = await store.get("test", "acme", "t1")
    assert got is not None and got.metadata == {"config": {"max_working_memory_messages": 5}}
    assert got.window_size == 5


async def test_upsert_with_other_identity_writes_nothing(store: ThreadStore) -> None:
    original, _ = await store.upsert("test", "acme", "t1", "bot", None, {"keep": 1})
    for agent, user in (("other-bot", None), ("bot", "u1")):
        stored, inserted = await store.upsert("test", "acme", "t1", agent, user, {"keep": 2})
        assert inserted is False
        assert stored == original
    assert await store.get("test", "acme", "t1") == original


async def test_rows_are_scoped_by_environment_and_account(store: ThreadStore) -> None:
    await store.upsert("test", "acme", "t1", "bot-a", None, {"who": "acme"})
    await store.upsert("test", "globex", "t1", "bot-g", None, {"who": "globex"})
    await store.upsert("prod", "acme", "t1", "bot-p", None, {"who": "prod"})
    got = [
        await store.get(env, acc, "t1")
        for env, acc in (("test", "acme"), ("test", "globex"), ("prod", "acme"))
    ]
    assert [t.metadata["who"] for t in got if t] == ["acme", "globex", "prod"]
    assert await store.get("prod", "globex", "t1") is None
    assert await store.update_metadata("prod", "globex", "t1", lambda m: {"who": "nobody"}) is None


async def test_creating_commits_or_rolls_back(store: ThreadStore) -> None:
    with pytest.raises(InvalidInput):
        async with store.creating("test", "acme", "t1", "bot", None) as thread:
            assert thread.agent_id == "bot"
            raise InvalidInput("rejected", field="messages")
    assert await store.get("test", "acme", "t1") is None
    async with store.creating("test", "acme", "t1", "bot", "u1") as thread:
        assert (thread.user_id, thread.metadata) == ("u1", {})
        assert await store.get("test", "acme", "t1") is None  # not committed yet
    stored = await store.get("test", "acme", "t1")
    assert stored is not None and stored.user_id == "u1"
    # an existing thread is yielded as stored, whatever the caller named
    async with store.creating("test", "acme", "t1", "other", None) as existing:
        assert (existing.agent_id, existing.user_id) == ("bot", "u1")


async def test_concurrent_creators_wait_for_each_other(store: ThreadStore) -> None:
    entered = asyncio.Event()
    release = asyncio.Event()

    async def first() -> None:
        async with store.creating("test", "acme", "t1", "bot-1", None):
            entered.set()
            await release.wait()

    async def second() -> str:
        await entered.wait()
        async with store.creating("test", "acme", "t1", "bot-2", None) as thread:
            return thread.agent_id

    task1 = asyncio.create_task(first())
    task2 = asyncio.create_task(second())
    await entered.wait()
    await asyncio.sleep(0.2)
    assert not task2.done()  # blocked on the uncommitted insert of `first`
    release.set()
    await task1
    assert await task2 == "bot-1"


async def test_update_metadata_is_atomic_and_validated(store: ThreadStore) -> None:
    assert await store.update_metadata("test", "acme", "nope", lambda m: m) is None
    original, _ = await store.upsert("test", "acme", "t1", "bot", None, {"n": 0})

    def bad(current: dict[str, Any]) -> dict[str, Any]:
        raise InvalidInput("no", field="metadata")

    with pytest.raises(InvalidInput):
        await store.update_metadata("test", "acme", "t1", bad)
    assert await store.get("test", "acme", "t1") == original

    # concurrent read-modify-write increments are serialised
    await asyncio.gather(
        *(store.update_metadata("test", "acme", "t1", lambda m: {"n": m["n"] + 1}) for _ in range(10))
    )
    thread = await store.get("test", "acme", "t1")
    assert thread is not None and thread.metadata == {"n": 10}
    assert thread.updated_at > original.updated_at and thread.created_at == original.created_at


async def test_list_threads_pages_by_id_within_one_account_and_filters(store: ThreadStore) -> None:
    for tid, agent, user in [("t3", "a1", "u1"), ("t1", "a1", None), ("t2", "a2", "u1"), ("t4", "a1", "u2")]:
        await store.upsert("prod", "acme", tid, agent, user, {})
    await store.upsert("prod", "other", "t0", "a1", "u1", {})  # another account
    await store.upsert("dev", "acme", "t0", "a1", "u1", {})  # another environment

    def ids(threads: list[Thread]) -> list[str]:
        return [t.thread_id for t in threads]

    assert ids(await store.list_threads("prod", "acme", limit=10)) == ["t1", "t2", "t3", "t4"]
    assert ids(await store.list_threads("prod", "acme", limit=2)) == ["t1", "t2"]
    assert ids(await store.list_threads("prod", "acme", after="t2", limit=10)) == ["t3", "t4"]
    assert ids(await store.list_threads("prod", "acme", agent_id="a1", limit=10)) == ["t1", "t3", "t4"]
    assert ids(await store.list_threads("prod", "acme", user_id="u1", limit=10)) == ["t2", "t3"]
    assert ids(await store.list_threads("prod", "acme", agent_id="a1", user_id="u1", limit=10)) == ["t3"]
    assert await store.list_threads("prod", "nobody", limit=10) == []
    assert await store.agent_ids("prod", "acme") == ["a1", "a2"]
    assert await store.agent_ids("prod", "nobody") == []


async def test_the_threads_of_a_user_page_and_shrink_as_they_are_deleted(store: ThreadStore) -> None:
    """What a user erasure relies on (`core.user_erasure`): one user's threads of one account, every
    agent's, in id order, paged by `after`, and listed again after deletions, what is left."""
    for tid in ("u1-c", "u1-a", "u1-b", "u1-d"):
        await store.upsert("prod", "acme", tid, "a2" if tid == "u1-b" else "a1", "u1", {})
    await store.upsert("prod", "acme", "u2-a", "a1", "u2", {})
    await store.upsert("prod", "acme", "none", "a1", None, {})
    await store.upsert("prod", "other", "u1-x", "a1", "u1", {})

    async def of_u1(**page: str | int) -> list[str]:
        listed = await store.list_threads(
            "prod",
            "acme",
            user_id="u1",
            limit=int(page.get("limit", 10)),
            after=str(page["after"]) if "after" in page else None,
        )
        return [t.thread_id for t in listed]

    assert await of_u1(limit=2) == ["u1-a", "u1-b"]
    assert await of_u1(limit=2, after="u1-b") == ["u1-c", "u1-d"]
    for tid in ("u1-a", "u1-c"):
        assert await store.delete("prod", "acme", tid)
    assert await of_u1() == ["u1-b", "u1-d"]
    for tid in ("u1-b", "u1-d"):
        await store.delete("prod", "acme", tid)
    assert await of_u1() == []
    left = await store.list_threads("prod", "acme", limit=10)
    assert [t.thread_id for t in left] == ["none", "u2-a"]
    assert [t.thread_id for t in await store.list_threads("prod", "other", user_id="u1", limit=10)] == [
        "u1-x"
    ]


async def test_delete_removes_only_the_named_thread(store: ThreadStore) -> None:
    await store.upsert("dev", "acc1", "t1", "agent", None, {})
    await store.upsert("dev", "acc2", "t1", "agent", None, {})
    assert await store.delete("dev", "acc1", "t1") is True
    assert await store.get("dev", "acc1", "t1") is None
    assert await store.get("dev", "acc2", "t1") is not None
    assert await store.delete("dev", "acc1", "t1") is False
