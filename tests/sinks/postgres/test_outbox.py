"""The agent-memory outbox in Postgres: what only its tables, advisory lock and LISTEN connection
do. The interface (claims, published/applied rows, republishing, notifications) is asserted of every
store in `tests/core/stores/test_outbox.py`."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from sinks.postgres.outbox import RELAY_LOCK_KEY, PostgresAppliedOutbox, PostgresEntriesOutbox


async def _write(pool: asyncpg.Pool, *keys: str) -> None:
    rows = [(key, {"key": key}) for key in keys]
    await pool.executemany("INSERT INTO memory_outbox (record_key, value) VALUES ($1, $2)", rows)


async def _seqs(pool: asyncpg.Pool, table: str) -> list[int]:
    return [row["seq"] for row in await pool.fetch(f"SELECT seq FROM {table} ORDER BY seq")]


def _in_use(pool: asyncpg.Pool) -> int:
    return int(pool.get_size() - pool.get_idle_size())


async def test_published_rows_and_applied_notes_live_in_their_tables(pool: asyncpg.Pool) -> None:
    outbox = PostgresEntriesOutbox(pool)
    await _write(pool, "a", "b", "c")
    async with outbox.claim(2) as batch:
        assert batch is not None
        await batch.published()
    seqs = await _seqs(pool, "memory_outbox_published")
    assert len(seqs) == 2 and len(await _seqs(pool, "memory_outbox")) == 1
    await PostgresAppliedOutbox(pool).record([seqs[0], 999_999])
    async with outbox.claim(10) as batch:
        assert batch is not None
        last = [row.seq for row in batch.rows]
        await batch.published()
    assert await _seqs(pool, "memory_outbox_published") == [seqs[1], *last]  # the applied one forgotten
    assert await _seqs(pool, "memory_outbox_applied") == [999_999]  # kept until its row arrives


async def test_the_claim_is_an_advisory_lock_across_connections(pool: asyncpg.Pool) -> None:
    outbox = PostgresEntriesOutbox(pool)
    await _write(pool, "a")
    async with pool.acquire() as other, other.transaction():
        assert await other.fetchval("SELECT pg_try_advisory_xact_lock($1)", RELAY_LOCK_KEY)
        async with outbox.claim(10) as batch:
            assert batch is None  # another relay (another node) holds it
        republish = asyncio.create_task(outbox.republish_unapplied())
        await asyncio.sleep(0.2)
        assert not republish.done()
    assert await republish == 0


async def test_a_listener_holds_a_pool_connection_until_closed(pool: asyncpg.Pool) -> None:
    outbox = PostgresEntriesOutbox(pool)
    woken = asyncio.Event()
    listener = await outbox.listen(woken.set)
    try:
        assert _in_use(pool) == 1
        await pool.execute("NOTIFY memstream_memory_outbox")  # any NOTIFY on the channel wakes it
        await asyncio.wait_for(woken.wait(), 5)
    finally:
        await listener.close()
    await listener.close()  # never raises
    assert not listener.usable()
    assert _in_use(pool) == 0  # given back


async def test_applied_outbox_on_its_own_pool(pg_dsn: str, pool: asyncpg.Pool) -> None:
    applied = PostgresAppliedOutbox(dsn=pg_dsn)
    await applied.record([5, 7])  # opens its pool on first use
    await applied.record([7])
    await applied.stop()
    assert await _seqs(pool, "memory_outbox_applied") == [5, 7]
    with pytest.raises(ValueError):
        PostgresAppliedOutbox()
