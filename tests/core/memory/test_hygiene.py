"""Hygiene over the real service (Postgres) with an injected clock (`hygiene_once(settings)`:
tests/memstream/test_hygiene.py)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from core.errors import NotFound
from core.memory.hygiene import HygieneReport, run_daily, run_hygiene
from core.memory.service import MemoryService

from .helpers import FakeClock, scope

ALICE = scope("alice")


async def put(service: MemoryService, key: str, category: str, importance: float = 0.5) -> str:
    result = await service.store(
        ALICE, key, f"content of {key}", category, scope_visibility="shared", importance=importance
    )
    return result.entry.entry_id


async def importance(service: MemoryService, entry_id: str) -> float:
    return (await service.get(ALICE, entry_id)).importance


async def test_expiry_and_decay_with_an_injected_clock(service: MemoryService, clock: FakeClock) -> None:
    seen = await put(service, "seen", "observation", 0.5)
    fact = await put(service, "fact", "project_fact", 0.15)
    recalled = await put(service, "recalled", "project_fact", 0.5)
    profile = await put(service, "profile", "user_profile", 0.5)

    clock.advance(days=29)
    assert await run_hygiene(service, clock()) == HygieneReport(ran_at=clock(), expired=0, decayed=0)
    clock.advance(days=1)
    report = await run_hygiene(service, clock())
    assert (report.expired, report.decayed) == (1, 0)
    with pytest.raises(NotFound):
        await service.get(ALICE, seen, include_expired=True)

    await service.record_recall(ALICE, [recalled])  # day 30: recalled
    clock.advance(days=60, minutes=1)  # day 90: fact idle 90 days, recalled only 60
    report = await run_hygiene(service, clock())
    assert (report.expired, report.decayed) == (0, 1)
    assert await importance(service, fact) == pytest.approx(0.1)  # 0.15 - 0.1, floored at 0.1
    assert await importance(service, recalled) == 0.5
    assert await importance(service, profile) == 0.5  # user_profile never decays

    assert (await run_hygiene(service, clock())).decayed == 0  # a second pass the same day: no change
    clock.advance(days=30)  # day 120: recalled idle 90 days
    assert (await run_hygiene(service, clock())).decayed == 1  # fact is at the floor: unchanged
    assert await importance(service, fact) == pytest.approx(0.1)
    assert await importance(service, recalled) == pytest.approx(0.4)
    assert await importance(service, profile) == 0.5


async def test_run_daily_over_postgres(service: MemoryService, clock: FakeClock) -> None:
    await put(service, "seen", "observation")
    stop = asyncio.Event()
    reports: list[HygieneReport] = []

    async def sleep(seconds: float) -> None:
        clock.advance(seconds=seconds)
        await asyncio.sleep(0)

    def on_report(report: HygieneReport) -> None:
        reports.append(report)
        if report.expired:
            stop.set()

    await asyncio.wait_for(
        run_daily(service, clock, stop, interval=timedelta(days=1), sleep=sleep, on_report=on_report), 10
    )
    assert [r.expired for r in reports] == [0] * 29 + [1]
