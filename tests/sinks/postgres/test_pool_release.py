"""What a pooled connection carries to its next user now that release skips asyncpg's full reset
(`sinks.postgres.pool`): nothing our code paths leave. A transaction left open is rolled back; the
migrations' session advisory lock (also when the run is interrupted) and the LISTENs of the
outbox relay and the cache feed are undone by their users. Real PostgreSQL."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import asyncpg
import pytest

from core.cached_api_keys import CachedApiKeys
from core.memory.store import Scope
from sinks.postgres.api_keys import PostgresApiKeys
from sinks.postgres.invalidation import API_KEYS_CHANNEL, PostgresInvalidations
from sinks.postgres.memory import PostgresMemoryStore
from sinks.postgres.migrations import LOCK_KEY, migrate
from sinks.postgres.outbox import PostgresEntriesOutbox
from sinks.postgres.pool import create_pool


@pytest.fixture
async def small_pool(pg_dsn: str) -> AsyncIterator[asyncpg.Pool]:
    """Two connections, so that every check below sees each of them."""
    pool = await create_pool(pg_dsn, min_size=2, max_size=2)
    try:
        yield pool
    finally:
        await pool.close()


async def every_connection(pool: asyncpg.Pool, query: str) -> list[object]:
    """`query`'s value on each of the pool's connections (all taken at once)."""
    conns = [await pool.acquire() for _ in range(pool.get_max_size())]
    try:
        return [await conn.fetchval(query) for conn in conns]
    finally:
        for conn in conns:
            await pool.release(conn)


async def advisory_locks(pool: asyncpg.Pool) -> int:
    return int(
        await pool.fetchval(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND l.granted AND a.datname = current_database()"
        )
    )


async def test_a_transaction_left_open_is_rolled_back(small_pool: asyncpg.Pool) -> None:
    await small_pool.execute("CREATE TABLE t (x int)")
    conn = await small_pool.acquire()
    await conn.execute("BEGIN")
    await conn.execute("INSERT INTO t VALUES (1)")
    await small_pool.release(conn)
    # on each connection (the one released too): not inside the transaction, whose row is gone
    assert await every_connection(small_pool, "SELECT count(*) FROM t") == [0, 0]


async def test_migrations_leave_no_advisory_lock(small_pool: asyncpg.Pool) -> None:
    await migrate(small_pool)
    await migrate(small_pool)
    assert await advisory_locks(small_pool) == 0


async def test_an_interrupted_migration_leaves_no_advisory_lock(
    small_pool: asyncpg.Pool, pg_dsn: str
) -> None:
    other = await asyncpg.connect(pg_dsn)  # another node, migrating
    try:
        await other.execute("SELECT pg_advisory_lock($1)", LOCK_KEY)
        waiting = asyncio.create_task(migrate(small_pool))
        await asyncio.sleep(0.5)
        waiting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        await other.execute("SELECT pg_advisory_unlock($1)", LOCK_KEY)
    finally:
        await other.close()
    await asyncio.sleep(0.2)
    assert await advisory_locks(small_pool) == 0
    await asyncio.wait_for(migrate(small_pool), 30)  # nothing holds the lock
    assert await advisory_locks(small_pool) == 0


async def test_listeners_leave_no_listen(small_pool: asyncpg.Pool) -> None:
    await migrate(small_pool)
    outbox_listener = await PostgresEntriesOutbox(small_pool).listen(lambda: None)
    await outbox_listener.close()
    feed = PostgresInvalidations(small_pool, ping_s=0.1)
    feed.subscribe(API_KEYS_CHANNEL, CachedApiKeys(PostgresApiKeys(small_pool)))
    stop = asyncio.Event()
    task = asyncio.create_task(feed.run(stop))
    await asyncio.wait_for(feed.live.wait(), 10)
    stop.set()
    await task
    assert await every_connection(small_pool, "SELECT count(*) FROM pg_listening_channels()") == [0, 0]


async def test_recall_counters_leave_synchronous_commit_on(small_pool: asyncpg.Pool) -> None:
    """`record_recall` commits without waiting for the WAL flush, for its own transaction only."""
    await migrate(small_pool)
    store = PostgresMemoryStore(small_pool)
    scope = Scope(environment="test", account_id="acme", agent_id="agent", user_id=None)
    for _ in range(small_pool.get_max_size()):
        assert await store.record_recall(scope, [uuid.uuid4()], datetime.now(UTC)) == 0
    assert await every_connection(small_pool, "SHOW synchronous_commit") == ["on", "on"]
