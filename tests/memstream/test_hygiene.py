"""`memstream hygiene` (`hygiene_once(settings)`): one pass on a pool of its own."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import asyncpg
from pydantic import SecretStr

from core.config import Settings
from core.memory.service import MemoryService
from memstream.hygiene import hygiene_once
from sinks.postgres.memory import PostgresMemoryStore
from tests.core.memory.helpers import FakeClock, scope


async def test_hygiene_once_uses_the_settings_database(
    tmp_path: Path, pg_dsn: str, pool: asyncpg.Pool
) -> None:
    clock = FakeClock()
    service = MemoryService(PostgresMemoryStore(pool), clock)
    await service.store(
        scope("alice"), "seen", "content of seen", "observation", scope_visibility="shared", importance=0.5
    )
    settings = Settings(data_dir=tmp_path / "data", environment="test", postgres_dsn=SecretStr(pg_dsn))
    later = FakeClock(clock.now + timedelta(days=31))
    report = await hygiene_once(settings, later)
    assert (report.expired, report.decayed, report.ran_at) == (1, 0, later.now)
    assert await pool.fetchval("SELECT count(*) FROM memory_entries") == 0
