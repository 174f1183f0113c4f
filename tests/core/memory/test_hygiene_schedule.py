"""Pure tests of the hygiene scheduler (`next_run`, `run_daily`) with a fake clock and sleep."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, time, timedelta

from core.memory.hygiene import HygieneReport, next_run, run_daily

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


class CountingStore:
    """Records the `now` of every pass; fails the pass when told to."""

    def __init__(self, fail_first: int = 0) -> None:
        self.runs: list[datetime] = []
        self.fail_first = fail_first

    async def expire_due(self, now: datetime) -> int:
        if self.fail_first:
            self.fail_first -= 1
            raise RuntimeError("postgres is down")
        self.runs.append(now)
        return 2

    async def decay(self, now: datetime) -> int:
        return 3


async def test_run_daily_runs_at_the_daily_time_and_stops() -> None:
    fake, store, stop = FakeTime(), CountingStore(), asyncio.Event()
    reports: list[HygieneReport] = []

    def on_report(report: HygieneReport) -> None:
        reports.append(report)
        if len(reports) == 3:
            stop.set()

    await asyncio.wait_for(
        run_daily(store, fake.clock, stop, at=time(3, 0), sleep=fake.sleep, on_report=on_report), 5
    )
    assert store.runs == [datetime(2026, 11, d, 3, 0, tzinfo=UTC) for d in (2, 3, 4)]
    assert [(r.expired, r.decayed) for r in reports] == [(2, 3)] * 3
    assert fake.sleeps == [17 * 3600.0, 24 * 3600.0, 24 * 3600.0]


async def test_a_failed_pass_is_retried_and_stop_interrupts_the_wait() -> None:
    fake, store, stop = FakeTime(), CountingStore(fail_first=1), asyncio.Event()
    reports: list[HygieneReport] = []

    def on_report(report: HygieneReport) -> None:
        reports.append(report)
        stop.set()

    await asyncio.wait_for(
        run_daily(
            store, fake.clock, stop, interval=timedelta(hours=1), sleep=fake.sleep, on_report=on_report
        ),
        5,
    )
    assert store.runs == [T0 + timedelta(hours=1, minutes=15)]
    assert len(reports) == 1

    # stop while waiting (real sleep): returns at once
    stop2 = asyncio.Event()
    task = asyncio.create_task(run_daily(CountingStore(), fake.clock, stop2))
    await asyncio.sleep(0.01)
    stop2.set()
    await asyncio.wait_for(task, 1)
