from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest

from core.errors import InvalidInput
from sinks.postgres.threads import PostgresThreadStore


async def test_get_missing_is_none(pool: asyncpg.Pool) -> None:
    assert await PostgresThreadStore(pool).get("test", "acme", "t1") is None


async def test_upsert_inserts_then_replaces_metadata(pool: asyncpg.Pool) -> None:
    store = PostgresThreadStore(pool)
    created, inserted = await store.upsert("test", "acme", "t1", "bot", "u1", {"a": 1, "b": {"c": [1, "x"]}})
    assert inserted is True
    assert (created.agent_id, created.user_id, created.metadata) == (
        "bot",
        "u1",
        {"a": 1, "b": {"c": [1, "x"]}},
    )
    updated, inserted = await store.upsert("test", "acme", "t1", "bot", "u1", {"z": True})
    assert inserted is False
    assert updated.metadata == {"z": True}
    assert updated.created_at == created.created_at
    assert updated.updated_at > created.updated_at
    assert await store.get("test", "acme", "t1") == updated


async def test_upsert_with_other_identity_writes_nothing(pool: asyncpg.Pool) -> None:
    store = PostgresThreadStore(pool)
    original, _ = await store.upsert("test", "acme", "t1", "bot", None, {"keep": 1})
    for agent, user in (("other-bot", None), ("bot", "u1")):
        stored, inserted = await store.upsert("test", "acme", "t1", agent, user, {"keep": 2})
        assert inserted is False
        assert stored == original
    assert await store.get("test", "acme", "t1") == original


async def test_rows_are_scoped_by_environment_and_account(pool: asyncpg.Pool) -> None:
    store = PostgresThreadStore(pool)
    await store.upsert("test", "acme", "t1", "bot-a", None, {"who": "acme"})
    await store.upsert("test", "globex", "t1", "bot-g", None, {"who": "globex"})
    await store.upsert("prod", "acme", "t1", "bot-p", None, {"who": "prod"})
    got = [
        await store.get(env, acc, "t1")
        for env, acc in (("test", "acme"), ("test", "globex"), ("prod", "acme"))
    ]
    assert [t.metadata["who"] for t in got if t] == ["acme", "globex", "prod"]
    assert await store.get("prod", "globex", "t1") is None


async def test_creating_commits_or_rolls_back(pool: asyncpg.Pool) -> None:
    store = PostgresThreadStore(pool)
    with pytest.raises(InvalidInput):
        async with store.creating("test", "acme", "t1", "bot", None) as thread:
            assert thread.agent_id == "bot"
            raise InvalidInput("rejected", field="messages")
    assert await store.get("test", "acme", "t1") is None
    async with store.creating("test", "acme", "t1", "bot", "u1") as thread:
        assert thread.user_id == "u1"
    stored = await store.get("test", "acme", "t1")
    assert stored is not None and stored.user_id == "u1"
    # an existing thread is yielded as stored, whatever the caller named
    async with store.creating("test", "acme", "t1", "other", None) as existing:
        assert (existing.agent_id, existing.user_id) == ("bot", "u1")


async def test_concurrent_creators_wait_for_each_other(pool: asyncpg.Pool) -> None:
    store = PostgresThreadStore(pool)
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


async def test_update_metadata_is_atomic_and_validated(pool: asyncpg.Pool) -> None:
    store = PostgresThreadStore(pool)
    assert await store.update_metadata("test", "acme", "nope", lambda m: m) is None
    await store.upsert("test", "acme", "t1", "bot", None, {"n": 0})

    def bad(current: dict[str, Any]) -> dict[str, Any]:
        raise InvalidInput("no", field="metadata")

    with pytest.raises(InvalidInput):
        await store.update_metadata("test", "acme", "t1", bad)
    thread = await store.get("test", "acme", "t1")
    assert thread is not None and thread.metadata == {"n": 0}

    # concurrent read-modify-write increments are serialised by the row lock
    await asyncio.gather(
        *(store.update_metadata("test", "acme", "t1", lambda m: {"n": m["n"] + 1}) for _ in range(10))
    )
    thread = await store.get("test", "acme", "t1")
    assert thread is not None and thread.metadata == {"n": 10}
