"""`memstream hygiene`: one agent-memory hygiene pass (`core.memory.hygiene.run_hygiene`) against
the configured Postgres, on a pool of its own."""

from __future__ import annotations

from core.config import Settings
from core.memory.clock import Clock, utc_now
from core.memory.hygiene import HygieneReport, run_hygiene
from core.memory.service import MemoryService
from sinks.postgres.memory import PostgresMemoryStore
from sinks.postgres.migrations import migrate
from sinks.postgres.pool import create_pool


async def hygiene_once(settings: Settings, clock: Clock = utc_now) -> HygieneReport:
    """`memstream hygiene`: one pass against `settings.postgres` (schema migrated first, which is
    idempotent and safe alongside running nodes). The changes are published by the node's entries
    outbox relay (rows written here wait in `memory_outbox` until a relay runs)."""
    pool = await create_pool(settings.postgres, max_size=2)
    try:
        await migrate(pool)
        return await run_hygiene(MemoryService(PostgresMemoryStore(pool), clock), clock())
    finally:
        await pool.close()
