"""Hygiene: the daily pass that expires and decays agent-memory entries.

`run_hygiene(service, now)` deletes the entries whose expiry has passed (observations expire 30
days after creation) and lowers by 0.1 (floor 0.1) the importance of `project_fact` and
`observation` entries not recalled in 90 days (`user_profile` never decays). Both changes go
through `MemoryService`, so they reach the index through the `memory.entries` outbox like any
other change.

It runs three ways: `memstream hygiene` (`memstream.hygiene.hygiene_once`, one pass), inside the node
(`run_daily(service, clock, stop)`, once a day at `at` UTC, or every `interval`), and in production
as a scheduled job running `memstream hygiene`. Running a pass twice in a day changes nothing more:
the service decays an entry at most once per daily pass (`DECAY_MIN_SPACING`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, time, timedelta
from typing import Protocol

from pydantic import BaseModel, ConfigDict

from core.memory.clock import Clock

log = logging.getLogger("memstream.memory.hygiene")

DEFAULT_RUN_AT = time(3, 0)
"""When the node's daily pass runs (UTC)."""
RETRY_AFTER = timedelta(minutes=15)
"""How long the node waits before retrying a failed pass."""

Sleep = Callable[[float], Awaitable[None]]


class HygieneStore(Protocol):
    """The part of `MemoryService` hygiene needs."""

    async def expire_due(self, now: datetime) -> int:
        """Delete the entries whose expiry is <= now; the number deleted."""
        ...

    async def decay(self, now: datetime) -> int:
        """Lower the importance of idle project_fact/observation entries; the number changed."""
        ...


class HygieneReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    ran_at: datetime
    expired: int
    decayed: int


async def run_hygiene(service: HygieneStore, now: datetime) -> HygieneReport:
    """One pass at `now`: expiry first (an expired entry is never decayed), then decay."""
    expired = await service.expire_due(now)
    decayed = await service.decay(now)
    return HygieneReport(ran_at=now, expired=expired, decayed=decayed)


def next_run(now: datetime, at: time, interval: timedelta | None) -> datetime:
    """When the next pass is due after `now`: `now + interval` when an interval is set, else the
    next `at` (UTC; tomorrow's when today's has passed). Pure."""
    if interval is not None:
        return now + interval
    today = datetime.combine(now.date(), at, tzinfo=now.tzinfo)
    return today if today > now else today + timedelta(days=1)


async def _sleep_or_stop(seconds: float, stop: asyncio.Event, sleep: Sleep) -> bool:
    """Sleep `seconds` unless `stop` is set first; True when stopped."""
    sleeper = asyncio.ensure_future(sleep(max(seconds, 0.0)))
    stopper = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({sleeper, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (sleeper, stopper):
            task.cancel()
        await asyncio.gather(sleeper, stopper, return_exceptions=True)
    return stop.is_set()


async def run_daily(
    service: HygieneStore,
    clock: Clock,
    stop: asyncio.Event,
    *,
    at: time = DEFAULT_RUN_AT,
    interval: timedelta | None = None,
    sleep: Sleep = asyncio.sleep,
    on_report: Callable[[HygieneReport], None] | None = None,
) -> None:
    """Run a pass at every `next_run(...)` until `stop` is set (the node's scheduler task).

    A failing pass is logged and retried after `RETRY_AFTER`; it never stops the node. Returns
    promptly when `stop` is set, also while waiting.
    """
    due = next_run(clock(), at, interval)
    while not stop.is_set():
        if await _sleep_or_stop((due - clock()).total_seconds(), stop, sleep):
            return
        if clock() < due:
            continue  # woke early (a clock adjustment): wait the rest
        try:
            report = await run_hygiene(service, clock())
        except Exception:
            log.exception("hygiene pass failed; retrying in %s", RETRY_AFTER)
            due = clock() + RETRY_AFTER
            continue
        log.info("hygiene: %d expired, %d decayed", report.expired, report.decayed)
        if on_report is not None:
            on_report(report)
        due = next_run(clock(), at, interval)
