"""Hygiene primitives: expiry (tombstones) and decay (published upserts), with an injected clock."""

from __future__ import annotations

from datetime import timedelta

import asyncpg
import pytest

from core.memory.models import EntryEvent, entry_key
from core.memory.service import MemoryService

from .helpers import FakeClock, outbox, scope


async def test_expire_due_deletes_and_publishes_tombstones(
    service: MemoryService, pool: asyncpg.Pool, clock: FakeClock
) -> None:
    obs = (await service.store(scope(), "o", "seen", "observation", scope_visibility="shared")).entry
    keep = (await service.store(scope(), "f", "fact", "project_fact", scope_visibility="shared")).entry
    other = (
        await service.store(scope(account="globex"), "o", "seen", "observation", scope_visibility="shared")
    ).entry
    assert await service.expire_due(clock.now + timedelta(days=29)) == 0
    assert await service.expire_due(clock.now + timedelta(days=30), batch_size=1) == 2
    rows = await outbox(pool)
    tombstones = {r["record_key"] for r in rows if r["value"] is None}
    assert tombstones == {
        entry_key("test", "acme", obs.entry_id),
        entry_key("test", "globex", other.entry_id),
    }
    remaining = await pool.fetch("SELECT entry_id::text FROM memory_entries")
    assert [r["entry_id"] for r in remaining] == [keep.entry_id]


async def _idle_entries(service: MemoryService, clock: FakeClock) -> dict[str, str]:
    ids = {}
    for category in ("user_profile", "project_fact", "observation"):
        result = await service.store(
            scope(),
            category,
            f"a {category}",
            category,
            scope_visibility="shared",
            importance=0.5,
            expires_at=clock.now + timedelta(days=400),
        )
        ids[category] = result.entry.entry_id
    return ids


async def test_decay_after_90_idle_days_never_user_profile(
    service: MemoryService, pool: asyncpg.Pool, clock: FakeClock
) -> None:
    ids = await _idle_entries(service, clock)
    assert await service.decay(clock.now + timedelta(days=89)) == 0
    day90 = clock.now + timedelta(days=90)
    assert await service.decay(day90) == 2
    assert await service.decay(day90 + timedelta(hours=2)) == 0  # at most once per daily pass
    imp = {k: (await service.get(scope(), v, include_expired=True)).importance for k, v in ids.items()}
    assert imp == {"user_profile": 0.5, "project_fact": 0.4, "observation": 0.4}
    decayed = [EntryEvent.model_validate(r["value"]) for r in (await outbox(pool))[3:]]
    assert sorted((e.entry.category, e.version, e.entry.importance) for e in decayed) == [
        ("observation", 2, 0.4),
        ("project_fact", 2, 0.4),
    ]


async def test_decay_floor_and_recall_resets_idle_time(service: MemoryService, clock: FakeClock) -> None:
    ids = await _idle_entries(service, clock)
    start = clock.now
    await service.record_recall(scope(), [ids["observation"]], at=start + timedelta(days=60))
    for day in range(90, 100):
        clock.now = start + timedelta(days=day)
        await service.decay()
    fact = await service.get(scope(), ids["project_fact"])
    obs = await service.get(scope(), ids["observation"])
    assert fact.importance == pytest.approx(0.1)  # 0.5 -> 0.1 in 4 passes, then stays at the floor
    assert obs.importance == 0.5  # recalled on day 60: idle only since day 150
