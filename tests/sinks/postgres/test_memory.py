"""Schema 0003 of agent memory: constraints, unique keys per visibility scope, FTS column, NOTIFY."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
import pytest

_INSERT = """INSERT INTO memory_entries (entry_id, environment, account_id, agent_id, user_id, key, content,
                 category, visibility, importance, content_hash, created_at, updated_at)
             VALUES ($1, 'test', 'acme', 'bot', $2, $3, $4, $5, $6, $7, 'h', now(), now())"""


async def _insert(
    pool: asyncpg.Pool,
    *,
    user: str | None = None,
    key: str = "k",
    content: str = "c",
    category: str = "project_fact",
    visibility: str = "shared",
    importance: float = 0.5,
) -> uuid.UUID:
    entry_id = uuid.uuid4()
    await pool.execute(_INSERT, entry_id, user, key, content, category, visibility, importance)
    return entry_id


async def test_key_unique_per_visibility_scope(pool: asyncpg.Pool) -> None:
    await _insert(pool)
    with pytest.raises(asyncpg.UniqueViolationError):
        await _insert(pool)
    await _insert(pool, user="alice", visibility="private")
    await _insert(pool, user="bob", visibility="private")
    with pytest.raises(asyncpg.UniqueViolationError):
        await _insert(pool, user="alice", visibility="private")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"user": "alice", "visibility": "shared"},  # shared entries have no owner
        {"user": None, "visibility": "private"},  # private entries have one
        {"category": "secret"},
        {"visibility": "public"},
        {"importance": 1.5},
        {"key": ""},
    ],
)
async def test_check_constraints(pool: asyncpg.Pool, kwargs: dict[str, object]) -> None:
    with pytest.raises(asyncpg.CheckViolationError):
        await _insert(pool, **kwargs)  # type: ignore[arg-type]


async def test_search_column_is_generated_from_content_and_key(pool: asyncpg.Pool) -> None:
    entry_id = await _insert(pool, key="user.favourite_colour", content="Running marathons")
    search = await pool.fetchval("SELECT search::text FROM memory_entries WHERE entry_id = $1", entry_id)
    assert "'run':1A" in search and "'marathon':2A" in search and "'colour'" in search
    hit = await pool.fetchval(
        "SELECT count(*) FROM memory_entries WHERE search @@ plainto_tsquery('english', 'marathon running')"
    )
    assert hit == 1


async def test_outbox_insert_notifies_at_commit(pool: asyncpg.Pool) -> None:
    got: asyncio.Queue[str] = asyncio.Queue()
    async with pool.acquire() as listener:

        def on_notify(*args: object) -> None:
            got.put_nowait(str(args[2]))

        await listener.add_listener("memstream_memory_outbox", on_notify)
        async with pool.acquire() as conn, conn.transaction():
            await conn.execute("INSERT INTO memory_outbox (record_key, value) VALUES ('a/b/c', NULL)")
            await asyncio.sleep(0.1)
            assert got.empty()  # not before commit
        assert await asyncio.wait_for(got.get(), 2) == "memstream_memory_outbox"
        await listener.remove_listener("memstream_memory_outbox", on_notify)
