"""Tests of the hygiene scheduler (`next_run`, `run_daily`) with a fake clock and sleep, running passes
of a `MemoryService` on the in-memory store."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, time, timedelta

from core.memory.hygiene import HygieneReport, next_run, run_daily
from core.memory.service import MemoryService
from tests.fakes.memory import InMemoryMemoryStore
from tests.fakes.outage import Outage

from .entries import make_entry

T0 = datetime(2026, 11, 1, 10, 0, tzinfo=UTC)


def test_next_run_is_the_next_daily_time_or_the_interval() -> None:
    assert next_run(T0, time(3, 0), None) == datetime(2026, 11, 2, 3, 0, tzinfo=UTC)
    assert next_run(T0, time(11, 30), None) == datetime(2026, 11, 1, 11, 30, tzinfo=UTC)
    assert next_run(T0, time(10, 0), None) == datetime(2026, 11, 2, 10, 0, tzinfo=UTC)
    assert next_run(T0, time(3, 0), timedelta(hours=6)) == T0 + timedelta(hours=6)


class FakeTime:
    """A clock advanced by the scheduler's sleeps."""

    def __init__(self) -> None:
        self.now = T0
        self.sleeps: list[float] = []

    def clock(self) -> datetime:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += timedelta(seconds=seconds)
        await asyncio.sleep(0)


async def seeded(fake: FakeTime) -> tuple[MemoryService, InMemoryMemoryStore]:
    """A memory service on an in-memory store holding, per daily pass at 03:00 on Nov 2, 3 and 4,
    2 observations that expire by then, and 3 project facts idle long enough to decay each day."""
    store = InMemoryMemoryStore()
    entries = [
        make_entry(
            str(uuid.uuid4()), category="observation", expires_at=datetime(2026, 11, day, 2, 0, tzinfo=UTC)
        )
        for day in (2, 2, 3, 3, 4, 4)
    ] + [
        make_entry(
            str(uuid.uuid4()), category="project_fact", importance=0.9, created_at=T0 - timedelta(days=91)
        )
        for _ in range(3)
    ]
    async with store.transaction() as tx:
        for entry in entries:
            await tx.insert(entry)
    return MemoryService(store, fake.clock), store


def pass_times(store: InMemoryMemoryStore) -> list[datetime]:
    """When each pass ran, from the changes it published: the decay's `updated_at`."""
    times = [value["entry"]["updated_at"] for _, value in store.outbox if value is not None]
    return sorted({datetime.fromisoformat(t.replace("Z", "+00:00")) for t in times})


async def test_run_daily_runs_at_the_daily_time_and_stops() -> None:
    fake, stop = FakeTime(), asyncio.Event()
    service, store = await seeded(fake)
    reports: list[HygieneReport] = []

    def on_report(report: HygieneReport) -> None:
        reports.append(report)
        if len(reports) == 3:
            stop.set()

    await asyncio.wait_for(
        run_daily(service, fake.clock, stop, at=time(3, 0), sleep=fake.sleep, on_report=on_report), 5
    )
    assert pass_times(store) == [datetime(2026, 11, d, 3, 0, tzinfo=UTC) for d in (2, 3, 4)]
    assert [r.ran_at for r in reports] == pass_times(store)
    assert [(r.expired, r.decayed) for r in reports] == [(2, 3)] * 3
    assert fake.sleeps == [17 * 3600.0, 24 * 3600.0, 24 * 3600.0]


async def test_a_failed_pass_is_retried_and_stop_interrupts_the_wait() -> None:
    fake, stop = FakeTime(), asyncio.Event()
    service, store = await seeded(fake)
    down = Outage(service, methods={"expire_due"}, error=RuntimeError("postgres is down"), times=1)
    reports: list[HygieneReport] = []

    def on_report(report: HygieneReport) -> None:
        reports.append(report)
        stop.set()

    await asyncio.wait_for(
        run_daily(
            down.proxy, fake.clock, stop, interval=timedelta(hours=1), sleep=fake.sleep, on_report=on_report
        ),
        5,
    )
    assert down.refused == 1 and down.calls["expire_due"] == 2
    assert [(r.ran_at, r.expired, r.decayed) for r in reports] == [
        (T0 + timedelta(hours=1, minutes=15), 0, 3)
    ]
    assert pass_times(store) == [T0 + timedelta(hours=1, minutes=15)]

    # stop while waiting (real sleep): returns at once
    stop2 = asyncio.Event()
    task = asyncio.create_task(run_daily((await seeded(fake))[0], fake.clock, stop2))
    await asyncio.sleep(0.01)
    stop2.set()
    await asyncio.wait_for(task, 1)
