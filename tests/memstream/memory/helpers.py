"""Helpers of the agent-memory tests: an injectable clock, scopes, and an outbox reader."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from memstream.pinned import MemoryScope

START = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


class FakeClock:
    """An injectable clock: returns `now`, moved forward by `advance`."""

    def __init__(self, now: datetime = START) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> datetime:
        self.now += timedelta(**delta)
        return self.now


def scope(
    user: str | None = "alice", *, account: str = "acme", agent: str = "bot", env: str = "test"
) -> MemoryScope:
    return MemoryScope(environment=env, account_id=account, agent_id=agent, user_id=user)


async def outbox(pool: asyncpg.Pool) -> list[dict[str, Any]]:
    """Every outbox row, in seq order."""
    rows = await pool.fetch("SELECT seq, record_key, value FROM memory_outbox ORDER BY seq")
    return [dict(row) for row in rows]
