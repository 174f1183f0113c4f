"""summarizer over real Redis, a real SlateJournal and the real (local) object store, offline model."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import obstore
import pytest
from pydantic import SecretStr
from redis.asyncio import Redis

from core.chat.base import ChatModel, ModelUnavailable, SummaryDraft
from core.chat.offline import OfflineChatModel
from core.config import Settings
from core.journal.models import Message, NewMessage, Role, ThreadRef
from core.stores.thresholds import ThreadScope
from core.summaries.layered import CachedSummaryWriter, MonotonicSummaryStore
from core.summaries.models import Summary, summarization_lock_name, summary_version_key
from memstream.wiring.processors import build_summarizer
from processors.errors import NeedsNodeJournal
from processors.summarizer import (
    LOCK_TTL_S,
    SUMMARY_MAX_TOKENS,
    Summarizer,
)
from sinks.objectstore.summaries import (
    ObjectStoreSummaryReader,
    ObjectStoreSummaryWriter,
    open_object_store,
)
from sinks.postgres.compactions import PostgresCompactions, PostgresSummaryVersions
from sinks.redis.client import redis_client
from sinks.redis.locks import RedisLocks
from sinks.redis.summary_cache import RedisSummaryCache
from sinks.redis.thresholds import RedisThresholdStore
from sinks.slatedb.journal import SlateJournal
from streams.runtime.processor import InvalidMessage, Record
from tests.processors.threshold_support import threshold_store

REF = ThreadRef(environment="test", account_id="acme", thread_id="th-1")
SCOPE = ThreadScope("test", "acme", "bot", "th-1")


@pytest.fixture
def settings_(redis_url: str, tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path / "data", environment="test", redis_url=SecretStr(redis_url))


class Slow(OfflineChatModel):
    """The offline model, slower (so racing summarizers overlap) and counting its calls."""

    def __init__(self, delay_s: float = 0.05) -> None:
        self.delay_s = delay_s
        self.calls: list[tuple[Summary | None, list[Message]]] = []
        self.called = asyncio.Event()

    async def summarize(
        self, previous: Summary | None, messages: Sequence[Message], *, max_tokens: int
    ) -> SummaryDraft:
        self.calls.append((previous, list(messages)))
        self.called.set()
        await asyncio.sleep(self.delay_s)
        return await super().summarize(previous, messages, max_tokens=max_tokens)


class Unreachable(Slow):
    """An endpoint that cannot be reached: every summarize fails (after `fail` calls it works)."""

    def __init__(self, fail: int = 1_000) -> None:
        super().__init__(0.0)
        self.fail = fail

    async def summarize(
        self, previous: Summary | None, messages: Sequence[Message], *, max_tokens: int
    ) -> SummaryDraft:
        if len(self.calls) < self.fail:
            self.calls.append((previous, list(messages)))
            raise ModelUnavailable("connection refused (127.0.0.1:9)")
        return await super().summarize(previous, messages, max_tokens=max_tokens)


@dataclass
class Rig:
    """What a summarizer of the test works on: thresholds, summary cache, lock client, journal."""

    settings: Settings
    store: RedisThresholdStore
    cache: RedisSummaryCache
    lock_client: Redis
    journal: SlateJournal
    pool: asyncpg.Pool

    async def summarizer(self, model: ChatModel, *, lock_namespace: str | None = None) -> Summarizer:
        """A started summarizer using `model` (locks under `lock_namespace`, else the test's own)."""
        summarizer = Summarizer(
            thresholds=self.store,
            summaries=MonotonicSummaryStore(
                CachedSummaryWriter(self.cache, ObjectStoreSummaryWriter.from_settings(self.settings)),
                PostgresSummaryVersions(self.pool),
            ),
            locks=RedisLocks(self.lock_client, namespace=lock_namespace or f"{self.store.namespace}/locks"),
            journal=self.journal,
            ledger=PostgresCompactions(self.pool),
            chat_model=model,
            retry_delays=(0.01, 0.01),
            lock_wait_s=5.0,
        )
        await summarizer.start()
        return summarizer

    async def summary(self) -> Summary | None:
        """The thread's current summary, as the context reader sees it."""
        return await ObjectStoreSummaryReader.from_settings(self.settings).read(REF, "bot")

    async def append(self, n: int) -> list[Message]:
        stored: list[Message] = []
        for i in range(n):
            role: Role = "user" if i % 2 == 0 else "assistant"
            text = f"Message {i}: the customer asked about invoice {1000 + i} and the refund policy."
            stored += await self.journal.append(
                REF, "bot", "u1" if role == "user" else None, [NewMessage(role=role, content=text)]
            )
        return stored

    async def take_guard(self, crossing: int) -> None:
        """What the thresholds processor did at the crossing: the guard is held (value: its offset)."""
        assert await self.store.client.set(self.store.guard_key(SCOPE), crossing, nx=True, px=60_000)

    async def guard(self) -> int | None:
        held = await self.store.client.get(self.store.guard_key(SCOPE))
        return None if held is None else int(held)


@pytest.fixture
async def rig(
    settings_: Settings, redis_url: str, journal: SlateJournal, pool: asyncpg.Pool
) -> AsyncIterator[Rig]:
    async with threshold_store(redis_url) as store:
        cache = RedisSummaryCache.from_settings(settings_)
        lock_client = redis_client(redis_url)
        try:
            yield Rig(settings_, store, cache, lock_client, journal, pool)
        finally:
            await lock_client.aclose()
            await cache.aclose()


def request(to_offset: int, from_offset: int = 0, offset: int = 0, **changes: Any) -> Record:
    payload: dict[str, Any] = {
        "schema_version": 1,
        "environment": "test",
        "account_id": "acme",
        "agent_id": "bot",
        "user_id": "u1",
        "thread_id": "th-1",
        "from_offset": from_offset,
        "to_offset": to_offset,
        "tokens": 100,
        "messages": to_offset - from_offset + 1,
        "reason": "messages",
        "requested_at": "2026-11-02T10:05:00Z",
        "flush": {"status": "stored", "facts_stored": 0, "facts_rejected": 0},
        **changes,
    }
    return Record("compaction.flushed", 0, offset, b"th-1", json.dumps(payload).encode(), (), None)


async def stored_versions(settings: Settings) -> list[Summary]:
    """Every `summary.v{N}.json` object of the thread, by N."""
    objects = open_object_store(settings.object_store)
    found: list[Summary] = []
    for n in range(1, 100):
        key = summary_version_key("test", "acme", "bot", "th-1", n)
        try:
            raw = await obstore.get_async(objects, key)
        except FileNotFoundError:
            continue
        found.append(Summary.model_validate_json(bytes(await raw.bytes_async())))
    return found


async def test_a_request_produces_version_one_visible_to_the_context_reader(rig: Rig) -> None:
    messages = await rig.append(60)
    await rig.take_guard(49)
    model = Slow(0)
    summarizer = await rig.summarizer(model)
    await summarizer.process([request(49)])

    summary = await rig.summary()
    assert summary is not None
    assert (summary.version, summary.last_message_offset, summary.last_message_id) == (
        1,
        49,
        messages[49].message_id,
    )
    assert summary.message_count == 50
    assert 0 < summary.token_count <= SUMMARY_MAX_TOKENS and summary.content
    (call,) = model.calls
    assert call[0] is None and [m.offset for m in call[1]] == list(range(50))
    assert await rig.cache.get(REF, "bot") == summary  # the context path's cache shows it too
    # the thresholds restart after the summary, and the thread can be compacted again
    assert await rig.guard() is None
    assert await rig.store.counters(SCOPE) == {"base": 50, "upto": 49, "tokens": 0, "messages": 0, "stale": 1}


async def test_a_second_request_folds_the_previous_summary(rig: Rig) -> None:
    messages = await rig.append(100)
    model = Slow(0)
    summarizer = await rig.summarizer(model)
    await summarizer.process([request(49)])
    first = await rig.summary()
    await rig.take_guard(89)
    await summarizer.process([request(89, from_offset=50)])

    second = await rig.summary()
    assert second is not None and first is not None
    assert (second.version, second.last_message_offset, second.last_message_id, second.message_count) == (
        2,
        89,
        messages[89].message_id,
        90,
    )
    previous, folded = model.calls[1]
    assert previous == first  # progressive: the previous summary plus only the new messages
    assert [m.offset for m in folded] == list(range(50, 90))
    assert await rig.guard() is None
    assert await rig.store.counters(SCOPE) == {"base": 90, "upto": 89, "tokens": 0, "messages": 0, "stale": 1}


async def test_redelivery_creates_no_new_version_and_frees_no_newer_guard(rig: Rig) -> None:
    await rig.append(80)
    model = Slow(0)
    summarizer = await rig.summarizer(model)
    await summarizer.process([request(49), request(49, offset=1)])  # duplicated within a batch
    await rig.take_guard(75)  # a later crossing is in flight
    await summarizer.process([request(49)])  # late redelivery
    summary = await rig.summary()
    assert summary is not None and summary.version == 1
    assert len(model.calls) == 1
    assert await rig.guard() == 75  # belongs to the later crossing: kept


async def test_racing_summarizers_write_one_linear_history(rig: Rig) -> None:
    await rig.append(60)
    models = [Slow(0.05) for _ in range(4)]
    # two share the lock; two have their own lock namespace (a lease that expired mid-work):
    # only the version check keeps them apart
    racers = [
        await rig.summarizer(m, lock_namespace=ns)
        for m, ns in zip(models, ["shared", "shared", "a", "b"], strict=True)
    ]
    writer = ObjectStoreSummaryWriter.from_settings(rig.settings)
    for to_offset in (9, 19, 29, 39, 49, 59):
        await asyncio.gather(*(r.process([request(to_offset)]) for r in racers))
        current = await writer.current(REF, "bot")
        assert current is not None and current.last_message_offset == to_offset
    versions = await stored_versions(rig.settings)
    assert [s.version for s in versions] == list(range(1, len(versions) + 1))  # no gaps
    offsets = [s.last_message_offset for s in versions]
    assert offsets == sorted(offsets) and offsets[-1] == 59 and len(set(offsets)) == len(offsets)
    counts = [s.message_count for s in versions]
    assert counts[-1] == 60  # every message folded exactly once along the history
    assert sum(len(m.calls) for m in models) >= 2 * len(versions)  # the racers really raced


async def test_a_model_that_keeps_failing_dead_letters_and_releases_the_guard(rig: Rig) -> None:
    await rig.append(50)
    await rig.take_guard(49)
    model = Unreachable()
    summarizer = await rig.summarizer(model)
    record = request(49)
    with pytest.raises(InvalidMessage) as caught:
        await summarizer.process([record])
    assert caught.value.record == record
    assert "ModelUnavailable" in caught.value.reason and "connection refused" in caught.value.reason
    assert isinstance(caught.value.error, ModelUnavailable)
    assert len(model.calls) == 3  # the first attempt and two retries
    assert await rig.guard() is None
    assert await rig.summary() is None
    # the lock was released: another summarizer can work on the thread right away
    healthy = await rig.summarizer(Slow(0))
    healthy.lock_wait_s = 0.0
    await healthy.process([record])
    summary = await rig.summary()
    assert summary is not None and summary.version == 1


async def test_a_model_failing_once_is_retried(rig: Rig) -> None:
    await rig.append(50)
    await rig.take_guard(49)
    model = Unreachable(fail=2)
    summarizer = await rig.summarizer(model)
    await summarizer.process([request(49)])
    summary = await rig.summary()
    assert summary is not None and summary.version == 1 and summary.message_count == 50
    assert await rig.guard() is None


async def test_a_request_beyond_the_journal_is_dead_lettered_at_once(rig: Rig) -> None:
    await rig.append(10)
    await rig.take_guard(49)
    model = Slow(0)
    summarizer = await rig.summarizer(model)
    with pytest.raises(InvalidMessage, match="no message of agent 'bot' at offset 49"):
        await summarizer.process([request(49)])
    assert model.calls == [] and await rig.guard() is None


async def test_an_invalid_record_is_rejected_before_anything_happens(rig: Rig) -> None:
    await rig.append(50)
    model = Slow(0)
    summarizer = await rig.summarizer(model)
    for bad in (request(49, account_id="no/slashes"), request(49, agent_id="../other")):
        with pytest.raises(InvalidMessage, match=r"compaction\.flushed value is invalid"):
            await summarizer.process([request(49), bad])
    assert model.calls == []
    assert await rig.summary() is None


def test_outside_the_node_the_summarizer_refuses_to_start(settings_: Settings) -> None:
    processor = build_summarizer(settings_)
    with pytest.raises(NeedsNodeJournal, match="runs inside the node"):
        asyncio.run(processor.start())
    asyncio.run(processor.stop())


# ---------------------------------------------------------------- durable state (Postgres)


def requested(to_offset: int, from_offset: int = 0) -> dict[str, Any]:
    """The `compaction.requested` value behind `request(to_offset, from_offset)`."""
    payload = json.loads(request(to_offset, from_offset).value or b"{}")
    del payload["flush"]
    return dict(payload)


async def test_the_summary_settles_the_compaction_in_flight(rig: Rig) -> None:
    await rig.append(80)
    ledger = PostgresCompactions(rig.pool)
    await ledger.record_requests([(SCOPE, requested(49))])
    await ledger.record_crossings({SCOPE: 79})  # crossed again while it was in flight
    await rig.take_guard(49)
    summarizer = await rig.summarizer(Slow(0))
    await summarizer.process([request(49)])
    settled = await ledger.get(SCOPE)
    assert settled is not None and (settled.request, settled.to_offset) == (None, None)
    assert settled.crossed_offset == 79  # left for the recovery to re-evaluate
    # a late redelivery changes nothing, and does not close a newer request in flight
    await ledger.record_requests([(SCOPE, requested(79, from_offset=50))])
    await summarizer.process([request(49)])
    newer = await ledger.get(SCOPE)
    assert newer is not None and newer.to_offset == 79


async def test_a_dead_lettered_request_is_settled_too(rig: Rig) -> None:
    await rig.append(10)
    ledger = PostgresCompactions(rig.pool)
    await ledger.record_requests([(SCOPE, requested(49))])
    await rig.take_guard(49)
    summarizer = await rig.summarizer(Slow(0))
    with pytest.raises(InvalidMessage):
        await summarizer.process([request(49)])  # beyond the journal: given up
    settled = await ledger.get(SCOPE)
    assert settled is not None and settled.request is None  # never requested again
    assert await rig.guard() is None


async def test_the_lock_is_kept_while_a_slow_model_works(rig: Rig) -> None:
    await rig.append(50)
    model = Slow(1.2)
    summarizer = await rig.summarizer(model)
    summarizer.lock_ttl_s = 0.3  # a lease far shorter than the model call: renewed meanwhile
    working = asyncio.create_task(summarizer.process([request(49)]))
    await model.called.wait()
    await asyncio.sleep(0.8)
    key = summarizer.locks.key(summarization_lock_name(REF, "bot"))
    assert await rig.lock_client.exists(key) == 1  # still held: no second summarizer may start
    await working
    assert await rig.lock_client.exists(key) == 0  # released when done


async def test_a_holder_that_died_frees_the_thread_within_its_lease(rig: Rig) -> None:
    await rig.append(50)
    summarizer = await rig.summarizer(Slow(0))
    assert LOCK_TTL_S <= 15  # seconds, not minutes, after a restart
    dead = await summarizer.locks.acquire(summarization_lock_name(REF, "bot"), LOCK_TTL_S)
    assert dead is not None  # a node killed mid-summary never releases its lock
    summarizer.lock_wait_s = LOCK_TTL_S + 5.0
    started = asyncio.get_running_loop().time()
    await summarizer.process([request(49)])
    assert asyncio.get_running_loop().time() - started <= LOCK_TTL_S + 1.0
    summary = await rig.summary()
    assert summary is not None and summary.version == 1


# ---------------------------------------------------------------- summaries folder deleted


async def write_two_versions(rig: Rig, summarizer: Summarizer) -> None:
    await rig.append(100)
    await summarizer.process([request(49)])
    await summarizer.process([request(89, from_offset=50)])
    summary = await rig.summary()
    assert summary is not None and summary.version == 2


@pytest.mark.parametrize("also_lost", ["nothing", "the cache", "the Postgres mark"])
async def test_after_the_summaries_folder_is_deleted_versions_never_go_backwards(
    rig: Rig, also_lost: str
) -> None:
    model = Slow(0)
    summarizer = await rig.summarizer(model)
    await write_two_versions(rig, summarizer)
    shutil.rmtree(rig.settings.data_path / "objects")  # the summaries folder is gone
    if also_lost == "the cache":
        await rig.cache.invalidate(REF, "bot")
    elif also_lost == "the Postgres mark":
        await rig.pool.execute("UPDATE thread_compactions SET summary_version = 0")

    await summarizer.process([request(99, from_offset=90)])

    summary = await rig.summary()
    assert summary is not None
    assert summary.version == 3  # above v2, which the cache and/or Postgres still knew: not v1
    assert summary.last_message_offset == 99
    assert summary.message_count == 100  # the lost history is summarized again from the journal
    assert [m.offset for m in model.calls[-1][1]] == list(range(100))
    assert await rig.cache.get(REF, "bot") == summary  # the context path shows it, not v2
    assert await PostgresSummaryVersions(rig.pool).highest(REF, "bot") == 3
    assert [s.version for s in await stored_versions(rig.settings)] == [3]
