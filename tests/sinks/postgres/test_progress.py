"""PostgresProgress: what only the Postgres store does (the contract it shares with the fake is
tests/core/stores/test_progress.py)."""

from __future__ import annotations

import asyncpg

from core.sequencing import PartitionBounds
from sinks.postgres.migrations import load_migrations, migrate
from sinks.postgres.progress import PostgresProgress

TOPIC = "p.journal.messages"


async def test_a_partial_set_of_bound_rows_is_not_used(pool: asyncpg.Pool) -> None:
    progress = PostgresProgress(pool)
    await progress.save_bounds(TOPIC, PartitionBounds(3, 40, (38, 40, 25)))
    await pool.execute("DELETE FROM relay_bounds WHERE partition = 2")
    assert await progress.load_bounds(TOPIC, 0, 3) is None


async def test_progress_stored_before_shards_is_shard_0_after_the_upgrade(raw_pool: asyncpg.Pool) -> None:
    """Migration 0017 keeps what an existing deployment stored (one journal, which is shard 0)."""
    before = [m for m in load_migrations() if m.version < 17]
    await migrate(raw_pool, before)
    await raw_pool.execute(
        "INSERT INTO relay_bounds (topic, partitions, partition, bound, cursor_seq) VALUES "
        "($1, 2, 0, 9, 10), ($1, 2, 1, 10, 10)",
        TOPIC,
    )
    await raw_pool.execute(
        "INSERT INTO consumer_progress (group_id, topic, partitions, partition, done_seq) VALUES "
        "('g', $1, 2, 0, 9), ('g', $1, 2, 1, 10)",
        TOPIC,
    )
    await raw_pool.execute(
        "INSERT INTO consumer_watermarks (group_id, topic, watermark) VALUES ('g', $1, 10)", TOPIC
    )
    assert [m.version for m in await migrate(raw_pool)] == [
        m.version for m in load_migrations() if m.version >= 17
    ]
    progress = PostgresProgress(raw_pool)
    assert await progress.load_bounds(TOPIC, 0, 2) == PartitionBounds(2, 10, (9, 10))
    loaded = await progress.load("g")
    assert loaded.watermarks == {(TOPIC, 0): 10}
    assert loaded.done == {(TOPIC, 0, 2, 0): 9, (TOPIC, 0, 2, 1): 10}
    assert await progress.low_watermark(["g"], TOPIC, 0) == 10
    assert await progress.low_watermark(["g"], TOPIC, 1) == 0
    # the same group on another shard is a row of its own
    await progress.save_bounds(TOPIC, PartitionBounds(2, 4, (4, 4), shard=1))
    assert (await progress.checkpoint("g", TOPIC, 1, 2, {0: 4, 1: 4})).watermark == 4
    assert await progress.watermark("g", TOPIC, 0) == 10
