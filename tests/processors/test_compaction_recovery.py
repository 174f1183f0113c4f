"""Compaction recovery over the real broker, Redis, Postgres, SlateJournal and local object store:
requests lost with the broker or Redis are requested again, held-back crossings are compacted
after the summary, and nothing keeps a thread's guard for long."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from core.chat.offline import OfflineChatModel
from core.config import Settings
from core.journal.models import Message
from core.stores.thresholds import ThreadScope
from core.summaries.layered import CachedSummaryWriter, MonotonicSummaryStore
from processors.compaction_recovery import CompactionRecovery, requests_lost
from processors.summarizer import Summarizer
from processors.thresholds import OUTPUT_TOPIC, Thresholds
from sinks.objectstore.summaries import ObjectStoreSummaryWriter
from sinks.postgres.compactions import PostgresCompactions, PostgresSummaryVersions
from sinks.redis.locks import RedisLocks
from sinks.redis.summary_cache import RedisSummaryCache
from sinks.redis.thresholds import RedisThresholdStore
from sinks.slatedb.journal import SlateJournal
from streams.admin import apply_topics
from streams.runtime.processor import Record
from streams.topics import default_registry
from tests.processors.runtime_support import broker_settings
from tests.processors.test_thresholds_broker import append, feed, requests
from tests.processors.threshold_support import threshold_store, wipe

SCOPE = ThreadScope("test", "acme", "bot", "th-1")


@pytest.fixture
def settings_(broker: str, topic_prefix: str, redis_url: str, tmp_path: Path) -> Settings:
    settings = broker_settings(broker, topic_prefix, tmp_path, redis_url=redis_url)
    reg = default_registry()
    apply_topics(settings, reg, topics=[reg.get("journal.messages"), reg.get(OUTPUT_TOPIC)])
    return settings


@dataclass
class Rig:
    """A live `thresholds` (fed by hand), the recovery (its own `Thresholds` on the same Redis
    namespace, as in the node) and the ledger they share."""

    settings: Settings
    journal: SlateJournal
    store: RedisThresholdStore
    ledger: PostgresCompactions
    live: Thresholds
    pool: asyncpg.Pool

    def recovery(self, **options: Any) -> CompactionRecovery:
        own = Thresholds(
            self.settings,
            self.store,
            self.journal,
            ObjectStoreSummaryWriter.from_settings(self.settings),
            ledger=self.ledger,
            name="compaction-recovery",
            close_store=False,
        )
        return CompactionRecovery(own, self.ledger, **options)

    async def guard(self) -> int | None:
        held = await self.store.client.get(self.store.guard_key(SCOPE))
        return None if held is None else int(held)

    async def summarize(self, to_offset: int, from_offset: int = 0) -> None:
        """What flush + summarizer do for the request up to `to_offset`."""
        cache = RedisSummaryCache.from_settings(self.settings)
        summarizer = Summarizer(
            thresholds=self.store,
            summaries=MonotonicSummaryStore(
                CachedSummaryWriter(cache, ObjectStoreSummaryWriter.from_settings(self.settings)),
                PostgresSummaryVersions(self.pool),
            ),
            locks=RedisLocks(self.store.client, namespace=f"{self.store.namespace}/locks"),
            journal=self.journal,
            ledger=self.ledger,
            chat_model=OfflineChatModel(),
        )
        await summarizer.start()
        payload = {
            **next(r for r in requests(self.settings) if r["to_offset"] == to_offset),
            "flush": {"status": "skipped_no_memory", "facts_stored": 0, "facts_rejected": 0},
        }
        assert payload["from_offset"] == from_offset
        await summarizer.process(
            [Record("compaction.flushed", 0, 0, b"th-1", json.dumps(payload).encode(), (), None)]
        )
        await cache.aclose()


@pytest.fixture
async def rig(
    settings_: Settings, redis_url: str, journal: SlateJournal, pool: asyncpg.Pool
) -> AsyncIterator[Rig]:
    async with threshold_store(redis_url) as store:
        ledger = PostgresCompactions(pool)
        live = Thresholds(
            settings_,
            store,
            journal,
            ObjectStoreSummaryWriter.from_settings(settings_),
            ledger=ledger,
            close_store=False,
        )
        await live.start()
        try:
            yield Rig(settings_, journal, store, ledger, live, pool)
        finally:
            await live.stop()


async def crossed(rig: Rig, n: int = 60) -> list[Message]:
    """`n` messages counted by the live thresholds: the request at offset 49 is on the topic."""
    messages = await append(rig.journal, n)
    await feed(rig.live, messages)
    assert [r["to_offset"] for r in requests(rig.settings)] == [49]
    return messages


@contextlib.asynccontextmanager
async def running(recovery: CompactionRecovery) -> AsyncIterator[None]:
    """`recovery.run` in the background for the block."""
    stop = asyncio.Event()
    task = asyncio.create_task(recovery.run(stop))
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def requested(rig: Rig, count: int, within_s: float = 10.0) -> list[dict[str, Any]]:
    """The requests on the topic once there are `count` of them (fails after `within_s`)."""
    deadline = asyncio.get_running_loop().time() + within_s
    while len(found := requests(rig.settings)) < count:
        assert asyncio.get_running_loop().time() < deadline, "not requested again"
        await asyncio.sleep(0.2)
    return found


def test_only_lost_compaction_topics_mean_lost_requests() -> None:
    assert requests_lost(["journal.messages", "compaction.requested"])
    assert requests_lost(["compaction.flushed"])
    assert not requests_lost(["journal.messages", "memory.entries"])
    assert not requests_lost([])


async def test_when_the_topics_are_new_every_open_request_is_requested_again_at_once(rig: Rig) -> None:
    await crossed(rig)
    recovery = rig.recovery(interval_s=3600.0)  # only the start and the wake-up sweep
    async with running(recovery):
        await asyncio.sleep(1.0)  # the first sweep ran: the request is young, nothing to do
        assert len(requests(rig.settings)) == 1
        recovery.topics_applied(["journal.messages"])  # only the journal topic is new: not lost
        await asyncio.sleep(1.0)
        assert len(requests(rig.settings)) == 1
        recovery.topics_applied(["journal.messages", "compaction.requested", "compaction.flushed"])
        first, again = await requested(rig, 2)
    assert again == first  # the recorded value, produced again
    row = await rig.ledger.get(SCOPE)
    assert row is not None and (row.to_offset, row.rerequests) == (49, 1)
    assert await rig.guard() == 49


async def test_when_the_topic_check_finds_new_compaction_topics_every_open_request_is_requested_again(
    rig: Rig,
) -> None:
    """The node's topic check (`streams.topic_guards.CompactionTopicGuard`) saw another incarnation
    of a compaction topic: whoever declared it again, the open request is produced again at once."""
    await crossed(rig)
    recovery = rig.recovery(interval_s=3600.0)  # only the start and the wake-up sweep
    async with running(recovery):
        await asyncio.sleep(1.0)  # the first sweep ran: the request is young, nothing to do
        assert len(requests(rig.settings)) == 1
        recovery.topics_lost()
        await requested(rig, 2)
    row = await rig.ledger.get(SCOPE)
    assert row is not None and (row.to_offset, row.rerequests) == (49, 1)


async def test_at_start_with_new_topics_every_open_request_is_requested_again(rig: Rig) -> None:
    await crossed(rig)
    async with running(rig.recovery(interval_s=3600.0, lost_at_start=True)):
        await requested(rig, 2)


async def test_after_a_redis_wipe_the_guard_is_taken_again_and_no_second_compaction_starts(
    rig: Rig,
) -> None:
    await crossed(rig)
    await wipe(rig.store)  # counters, claims and the guard are gone; the compaction is in flight
    recovery = rig.recovery()
    await recovery.thresholds.start()
    try:
        await recovery.sweep(everything=True)
    finally:
        await recovery.thresholds.stop()
    assert await rig.guard() == 49
    more = await append(rig.journal, 10)  # offsets 60..69: still over the threshold
    await feed(rig.live, more)
    assert [r["to_offset"] for r in requests(rig.settings)] == [49, 49]  # no second compaction
    row = await rig.ledger.get(SCOPE)
    assert row is not None and (row.to_offset, row.crossed_offset) == (49, 69)


async def test_a_request_open_too_long_is_requested_again_then_given_up(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    await crossed(rig)
    recovery = rig.recovery(rerequest_after_s=0.0, max_rerequests=2)
    await recovery.thresholds.start()
    try:
        assert (await recovery.sweep()).requested_again == [SCOPE]
        assert (await recovery.sweep()).requested_again == [SCOPE]
        with caplog.at_level(logging.ERROR, logger="memstream.compaction_recovery"):
            given_up = await recovery.sweep()
    finally:
        await recovery.thresholds.stop()
    assert (given_up.requested_again, given_up.given_up) == ([], [SCOPE])
    assert len(requests(rig.settings)) == 3
    row = await rig.ledger.get(SCOPE)
    assert row is not None and row.request is None
    assert await rig.guard() is None  # the thread is not blocked: its next crossing requests again
    assert any("given up" in r.getMessage() for r in caplog.records)


async def test_a_crossing_held_back_is_compacted_after_the_summary_without_a_new_message(
    rig: Rig,
) -> None:
    await crossed(rig, 120)  # one burst: the request at 49, messages 50..119 held back by the guard
    recovery = rig.recovery()
    await recovery.thresholds.start()
    try:
        assert (await recovery.sweep()).reevaluated == []  # its compaction is still in flight
        await rig.summarize(49)
        result = await recovery.sweep()
    finally:
        await recovery.thresholds.stop()
    assert result.reevaluated == [SCOPE]
    first, second = requests(rig.settings)
    assert (second["from_offset"], second["to_offset"], second["messages"]) == (50, 119, 70)
    assert first["to_offset"] == 49
    row = await rig.ledger.get(SCOPE)
    assert row is not None and (row.to_offset, row.crossed_offset) == (119, None)
    assert await rig.guard() == 119


async def test_a_crossing_below_the_thresholds_after_the_summary_is_forgotten(rig: Rig) -> None:
    await crossed(rig, 60)  # 50..59 held back: 10 messages after the summary, under the limits
    await rig.summarize(49)
    recovery = rig.recovery()
    await recovery.thresholds.start()
    try:
        result = await recovery.sweep()
        assert result.reevaluated == [SCOPE]
        assert (await recovery.sweep()).reevaluated == []  # forgotten
    finally:
        await recovery.thresholds.stop()
    assert [r["to_offset"] for r in requests(rig.settings)] == [49]
    row = await rig.ledger.get(SCOPE)
    assert row is not None and (row.request, row.crossed_offset) == (None, None)
