"""PostgresProgress: what only the Postgres store does (the contract it shares with the fake is
tests/core/stores/test_progress.py)."""

from __future__ import annotations

import asyncpg

from core.sequencing import PartitionBounds
from sinks.postgres.progress import PostgresProgress

TOPIC = "p.journal.messages"


async def test_a_partial_set_of_bound_rows_is_not_used(pool: asyncpg.Pool) -> None:
    progress = PostgresProgress(pool)
    await progress.save_bounds(TOPIC, PartitionBounds(3, 40, (38, 40, 25)))
    await pool.execute("DELETE FROM relay_bounds WHERE partition = 2")
    assert await progress.load_bounds(TOPIC, 3) is None
