"""Helpers of the agent-memory tests: an injectable clock, scopes, and an outbox reader."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from core.memory.models import MemoryScope

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


async def legacy_shared_profile(pool: asyncpg.Pool, key: str, content: str) -> None:
    """A shared user_profile entry as a flush of a thread without a user wrote it before profile
    facts needed a user (no user, no author), inserted as it sits in existing databases."""
    await pool.execute(
        """INSERT INTO memory_entries (entry_id, environment, account_id, agent_id, user_id, author_user_id,
               key, content, category, visibility, importance, content_hash, created_at, updated_at)
           VALUES (gen_random_uuid(), 'test', 'acme', 'bot', NULL, NULL, $1, $2, 'user_profile', 'shared',
                   0.8, 'h', now(), now())""",
        key,
        content,
    )
