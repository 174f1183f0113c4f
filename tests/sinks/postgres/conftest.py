from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from sinks.postgres.migrations import migrate
from sinks.postgres.pool import create_pool


@pytest.fixture
async def raw_pool(pg_dsn: str) -> AsyncIterator[asyncpg.Pool]:
    """A pool on a fresh, empty database (no migrations applied)."""
    pool = await create_pool(pg_dsn, min_size=1, max_size=8)
    try:
        yield pool
    finally:
        await pool.close()


@pytest.fixture
async def pool(raw_pool: asyncpg.Pool) -> asyncpg.Pool:
    """A pool on a fresh database with the schema migrated."""
    await migrate(raw_pool)
    return raw_pool
