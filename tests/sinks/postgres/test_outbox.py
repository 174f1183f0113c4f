"""The agent-memory outbox in Postgres: claims, the published/applied rows, republishing, LISTEN."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from core.stores.outbox import OutboxRow
from sinks.postgres.outbox import PostgresAppliedOutbox, PostgresEntriesOutbox


async def _write(pool: asyncpg.Pool, *keys: str) -> None:
    rows = [(key, {"key": key}) for key in keys]
    await pool.executemany("INSERT INTO memory_outbox (record_key, value) VALUES ($1, $2)", rows)


async def _seqs(pool: asyncpg.Pool, table: str) -> list[int]:
    return [row["seq"] for row in await pool.fetch(f"SELECT seq FROM {table} ORDER BY seq")]


async def test_a_published_claim_moves_its_rows_and_forgets_what_was_applied(pool: asyncpg.Pool) -> None:
    outbox = PostgresEntriesOutbox(pool)
    await _write(pool, "a", "b", "c")
    assert await outbox.pending() == 3
    async with outbox.claim(2) as batch:
        assert batch is not None
        assert [row.record_key for row in batch.rows] == ["a", "b"]
        assert batch.rows[0] == OutboxRow(batch.rows[0].seq, "a", {"key": "a"})
        await batch.published()
    seqs = await _seqs(pool, "memory_outbox_published")
    assert len(seqs) == 2 and await outbox.pending() == 1
    await PostgresAppliedOutbox(pool).record(seqs[:1])
    async with outbox.claim(10) as batch:
        assert batch is not None
        last = [row.seq for row in batch.rows]
        await batch.published()
    assert len(last) == 1 and await outbox.pending() == 0
    assert await _seqs(pool, "memory_outbox_published") == [seqs[1], *last]  # the applied one forgotten
    assert await _seqs(pool, "memory_outbox_applied") == []


async def test_a_claim_that_fails_keeps_its_rows(pool: asyncpg.Pool) -> None:
    outbox = PostgresEntriesOutbox(pool)
    await _write(pool, "a")
    with pytest.raises(RuntimeError):
        async with outbox.claim(10) as batch:
            assert batch is not None
            await batch.published()
            raise RuntimeError("the broker did not confirm")
    assert await outbox.pending() == 1
    assert await _seqs(pool, "memory_outbox_published") == []


async def test_one_claim_at_a_time_and_republish_waits_for_it(pool: asyncpg.Pool) -> None:
    outbox = PostgresEntriesOutbox(pool)
    await _write(pool, "a", "b")
    async with outbox.claim(1) as batch:
        assert batch is not None
        async with outbox.claim(1) as other:
            assert other is None  # another relay holds the claim
        republish = asyncio.create_task(outbox.republish_unapplied())
        await asyncio.sleep(0.2)
        assert not republish.done()
        await batch.published()
    assert await republish == 1  # the row just published goes back, before the newer one
    keys = await pool.fetch("SELECT record_key FROM memory_outbox ORDER BY seq")
    assert [row["record_key"] for row in keys] == ["a", "b"]
    assert await _seqs(pool, "memory_outbox_published") == []


async def test_listen_is_notified_when_outbox_rows_commit(pool: asyncpg.Pool) -> None:
    outbox = PostgresEntriesOutbox(pool)
    woken = asyncio.Event()
    listener = await outbox.listen(woken.set)
    try:
        assert listener.usable()
        await _write(pool, "a")
        await asyncio.wait_for(woken.wait(), 5)
    finally:
        await listener.close()
    assert not listener.usable()


async def test_applied_outbox_on_its_own_pool(pg_dsn: str, pool: asyncpg.Pool) -> None:
    applied = PostgresAppliedOutbox(dsn=pg_dsn)
    await applied.record([5, 7])  # opens its pool on first use
    await applied.record([7])
    await applied.stop()
    assert await _seqs(pool, "memory_outbox_applied") == [5, 7]
    with pytest.raises(ValueError):
        PostgresAppliedOutbox()
