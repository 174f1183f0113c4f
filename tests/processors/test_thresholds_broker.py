"""thresholds over real Redis, a real SlateJournal, the real object store and the real broker."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from core.config import Settings
from core.journal.models import Message, NewMessage, Role, ThreadRef
from core.stores.thresholds import ThreadScope
from core.summaries.models import Summary
from memstream.wiring.processors import build_thresholds
from processors.thresholds import NAME, OUTPUT_TOPIC, Counters, Thresholds, advance
from sinks.objectstore.summaries import ObjectStoreSummaryWriter
from sinks.postgres.compactions import PostgresCompactions
from sinks.postgres.migrations import migrate
from sinks.postgres.pool import create_pool
from sinks.redis.thresholds import RedisThresholdStore
from sinks.slatedb.journal import SlateJournal
from streams.admin import apply_topics
from streams.codecs import journal_messages
from streams.runtime import RuntimeOptions
from streams.runtime.processor import InvalidMessage, Processor, Record
from streams.topics import TopicRegistry, default_registry
from tests.processors.runtime_support import (
    broker_settings,
    committed_total,
    produce,
    run_until_caught_up,
    seconds_to_stop,
    short_options,
    unreachable_publisher,
)
from tests.processors.threshold_support import threshold_store, wipe
from tests.processors.topic_reading import read_thread_topic

REPLAY = f"{NAME}-replay"
SOURCE = "journal.messages"
SCOPE = ThreadScope("test", "acme", "bot", "th-1")


@pytest.fixture
def settings_(broker: str, topic_prefix: str, redis_url: str, tmp_path: Path) -> Settings:
    return broker_settings(broker, topic_prefix, tmp_path, redis_url=redis_url)


@pytest.fixture
def registry(settings_: Settings) -> TopicRegistry:
    reg = default_registry().with_dead_letter(NAME, REPLAY)
    apply_topics(
        settings_,
        reg,
        topics=[reg.get(SOURCE), reg.get(OUTPUT_TOPIC), reg.dlq_topic(NAME), reg.dlq_topic(REPLAY)],
    )
    return reg


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[RedisThresholdStore]:
    async with threshold_store(redis_url) as store:
        yield store


@pytest.fixture
def summaries(settings_: Settings) -> ObjectStoreSummaryWriter:
    return ObjectStoreSummaryWriter.from_settings(settings_)


@pytest.fixture
def ledger(pool: asyncpg.Pool) -> PostgresCompactions:
    return PostgresCompactions(pool)


@pytest.fixture
async def processor(
    settings_: Settings,
    registry: TopicRegistry,
    store: RedisThresholdStore,
    journal: SlateJournal,
    summaries: ObjectStoreSummaryWriter,
    ledger: PostgresCompactions,
) -> AsyncIterator[Thresholds]:
    processor = Thresholds(settings_, store, journal, summaries, ledger=ledger, close_store=False)
    await processor.start()
    try:
        yield processor
    finally:
        await processor.stop()


async def append(
    journal: SlateJournal, n: int, *, account: str = "acme", thread: str = "th-1", words: int = 3
) -> list[Message]:
    ref = ThreadRef(environment="test", account_id=account, thread_id=thread)
    stored: list[Message] = []
    for i in range(n):
        role: Role = "user" if i % 2 == 0 else "assistant"
        text = " ".join(f"word{i}x{w}" for w in range(words))
        stored += await journal.append(
            ref, "bot", "u1" if role == "user" else None, [NewMessage(role=role, content=text)]
        )
    return stored


def record(message: Message, offset: int = 0) -> Record:
    event = journal_messages.encode(message)
    headers = tuple((k, v.encode() if isinstance(v, str) else v) for k, v in event.headers)
    return Record(SOURCE, 0, offset, event.key, event.value, headers, None)


async def feed(processor: Thresholds, messages: Sequence[Message], batch: int = 7) -> None:
    for start in range(0, len(messages), batch):
        await processor.process([record(m) for m in messages[start : start + batch]])


def requests(settings: Settings) -> list[dict[str, Any]]:
    """Every record on compaction.requested so far (validated, keys checked), sorted by thread."""
    found = read_thread_topic(settings, OUTPUT_TOPIC)
    return sorted(found, key=lambda p: (p["account_id"], p["thread_id"], p["to_offset"]))


def crossing_at(messages: Sequence[Message], start: int = 0) -> tuple[int, Counters, str]:
    """Where the pure rule says the messages from `start` cross: (offset, counters, reason)."""
    counters = Counters()
    for m in messages[start:]:
        counters, reason = advance(counters, m.token_count)
        if reason is not None:
            return m.offset, counters, reason
    raise AssertionError("never crosses")


def summary_at(offset: int, messages: Sequence[Message]) -> Summary:
    return Summary(
        version=1,
        timestamp=datetime.now(UTC),
        last_message_offset=offset,
        last_message_id=messages[offset].message_id,
        content="earlier",
        token_count=1,
        message_count=offset + 1,
    )


async def test_fifty_messages_request_once_and_redelivery_changes_nothing(
    processor: Thresholds, journal: SlateJournal, store: RedisThresholdStore, settings_: Settings
) -> None:
    messages = await append(journal, 110)
    assert sum(m.token_count for m in messages[:50]) < 2_000  # the message limit is what crosses
    await feed(processor, messages[:60])
    await feed(processor, messages[:60], batch=13)  # redelivery, other batch boundaries
    await feed(processor, messages[60:])  # guard held: no second request
    (request,) = requests(settings_)
    assert (request["from_offset"], request["to_offset"], request["messages"], request["reason"]) == (
        0,
        49,
        50,
        "messages",
    )
    assert request["tokens"] == sum(m.token_count for m in messages[:50])
    scope = ThreadScope("test", "acme", "bot", "th-1")
    assert await store.counters(scope) == {
        "base": 0,
        "upto": 109,
        "tokens": sum(m.token_count for m in messages),
        "messages": 110,
    }


async def test_two_thousand_tokens_request_at_the_crossing_message(
    processor: Thresholds, journal: SlateJournal, settings_: Settings
) -> None:
    messages = await append(journal, 20, words=60)
    offset, counters, reason = crossing_at(messages)
    assert reason == "tokens" and offset < 19
    await feed(processor, messages)
    await feed(processor, messages)
    (request,) = requests(settings_)
    assert (request["to_offset"], request["tokens"], request["messages"], request["reason"]) == (
        offset,
        counters.tokens,
        counters.messages,
        "tokens",
    )


async def test_wiping_redis_mid_run_still_requests_at_the_right_message(
    processor: Thresholds, journal: SlateJournal, store: RedisThresholdStore, settings_: Settings
) -> None:
    messages = await append(journal, 70)
    await feed(processor, messages[:30])
    await wipe(store)
    await feed(processor, messages[20:])  # redelivers 20..29 too, after the wipe
    (request,) = requests(settings_)
    assert (request["from_offset"], request["to_offset"], request["messages"]) == (0, 49, 50)
    assert request["tokens"] == sum(m.token_count for m in messages[:50])
    assert await store.counters(ThreadScope("test", "acme", "bot", "th-1")) == {
        "base": 0,
        "upto": 69,
        "tokens": sum(m.token_count for m in messages),
        "messages": 70,
    }


async def test_counting_starts_after_the_last_summary_also_when_rebuilt(
    processor: Thresholds,
    journal: SlateJournal,
    store: RedisThresholdStore,
    summaries: ObjectStoreSummaryWriter,
    settings_: Settings,
) -> None:
    messages = await append(journal, 80)
    ref = messages[0].thread
    await summaries.write(ref, "bot", summary_at(9, messages), expected_version=None)
    await feed(processor, messages[:35])
    await wipe(store)
    await feed(processor, messages[35:])
    (request,) = requests(settings_)
    assert (request["from_offset"], request["to_offset"], request["messages"]) == (10, 59, 50)
    # the summarizer's side: counters restart after its summary and the guard is released
    await summaries.write(
        ref, "bot", summary_at(59, messages).model_copy(update={"version": 2}), expected_version=1
    )
    scope = ThreadScope("test", "acme", "bot", "th-1")
    await store.reset_counters(scope, 60)
    assert await store.release_guard(scope)
    more = await append(journal, 30)
    await feed(processor, more)
    second = requests(settings_)[-1]
    assert (second["from_offset"], second["to_offset"], second["messages"]) == (60, 109, 50)


async def test_a_request_decided_but_not_delivered_is_sent_on_redelivery(
    processor: Thresholds, journal: SlateJournal, store: RedisThresholdStore, settings_: Settings
) -> None:
    messages = await append(journal, 52)
    await feed(processor, messages[:49])
    crossing = messages[49]
    # the script ran for the 50th message, then the worker died before producing the request
    decided = await store.count(ThreadScope("test", "acme", "bot", "th-1"), 49, crossing.token_count)
    assert decided.kind == "request"
    assert requests(settings_) == []
    await feed(processor, messages[45:])  # redelivery after the crash
    await feed(processor, messages[45:])  # delivered and marked sent: not again
    (request,) = requests(settings_)
    assert (request["to_offset"], request["messages"]) == (49, 50)


async def test_tenants_are_counted_apart(
    processor: Thresholds, journal: SlateJournal, settings_: Settings
) -> None:
    acme = await append(journal, 50, account="acme")
    globex = await append(journal, 30, account="globex")  # same thread id, other account
    initech = await append(journal, 49, account="initech")
    interleaved = [
        m for group in itertools.zip_longest(acme, globex, initech) for m in group if m is not None
    ]
    assert len(interleaved) == 129
    await feed(processor, interleaved)
    found = requests(settings_)
    assert [(r["account_id"], r["to_offset"], r["messages"]) for r in found] == [("acme", 49, 50)]


async def test_an_invalid_record_is_rejected_before_anything_is_counted(
    processor: Thresholds, journal: SlateJournal, store: RedisThresholdStore
) -> None:
    (good,) = await append(journal, 1)
    bad = Record(SOURCE, 0, 1, b"th-1", b'{"schema_version": 1}', (), None)
    with pytest.raises(InvalidMessage, match=r"journal\.messages value is invalid"):
        await processor.process([record(good), bad])
    assert await store.counters(ThreadScope("test", "acme", "bot", "th-1")) is None


def test_outside_the_node_the_processor_refuses_to_start(settings_: Settings) -> None:
    from processors.errors import NeedsNodeJournal

    processor = build_thresholds(settings_)
    with pytest.raises(NeedsNodeJournal, match="runs inside the node"):
        asyncio.run(processor.start())
    asyncio.run(processor.stop())


# ---------------------------------------------------------------- on the runtime


@pytest.fixture
def options(request: pytest.FixtureRequest) -> RuntimeOptions:
    return short_options(request, batch_size=9, batch_wait_s=0.05)


def publish(settings: Settings, messages: Sequence[Message]) -> dict[int, int]:
    """Produce `messages` to journal.messages as the relay does (key, value and headers)."""
    return produce(
        settings, SOURCE, [(e.key, e.value, e.headers) for e in map(journal_messages.encode, messages)]
    )


async def test_on_the_runtime_a_replay_group_does_not_request_again(
    settings_: Settings,
    options: RuntimeOptions,
    registry: TopicRegistry,
    store: RedisThresholdStore,
    journal: SlateJournal,
    summaries: ObjectStoreSummaryWriter,
    ledger: PostgresCompactions,
) -> None:
    messages = await append(journal, 60)
    ends = publish(settings_, messages)
    live = Thresholds(settings_, store, journal, summaries, ledger=ledger, close_store=False)
    await run_until_caught_up(settings_, options, registry, live, SOURCE, ends)
    replay = Thresholds(settings_, store, journal, summaries, ledger=ledger, name=REPLAY, close_store=False)
    await run_until_caught_up(settings_, options, registry, replay, SOURCE, ends)
    (request,) = requests(settings_)
    assert (request["to_offset"], request["messages"]) == (49, 50)
    assert await store.counters(ThreadScope("test", "acme", "bot", "th-1")) == {
        "base": 0,
        "upto": 59,
        "tokens": sum(m.token_count for m in messages),
        "messages": 60,
    }


async def test_requests_and_held_back_crossings_are_recorded_in_postgres(
    processor: Thresholds, journal: SlateJournal, ledger: PostgresCompactions, settings_: Settings
) -> None:
    messages = await append(journal, 60)
    await feed(processor, messages)
    (request,) = requests(settings_)
    recorded = await ledger.get(SCOPE)
    assert recorded is not None
    # the request in flight is what the topic got, so it can be produced again if the topic loses it
    assert (recorded.request, recorded.to_offset) == (request, 49)
    # messages 50..59 crossed again while it was in flight (the guard held them back)
    assert recorded.crossed_offset == 59


def test_stopping_while_the_broker_is_unreachable_takes_seconds_and_commits_nothing(
    settings_: Settings,
    registry: TopicRegistry,
    redis_url: str,
    pg_dsn: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    # the default drain timeout: a stop must not wait for it, nor for a broker that never answers
    options = short_options(request, batch_size=100, batch_wait_s=0.05, drain_timeout_s=10.0)
    journal_url = f"file://{tmp_path}/journal"
    ends: dict[int, int] = {}
    crossing: list[int] = []  # the request's to_offset (one thread: its partition offsets are its offsets)

    @asynccontextmanager
    async def opened() -> AsyncIterator[tuple[SlateJournal, asyncpg.Pool, RedisThresholdStore]]:
        journal = await SlateJournal.open(journal_url, flush_interval_ms=1)
        pool = await create_pool(pg_dsn)
        await migrate(pool)
        try:
            async with threshold_store(redis_url) as store:
                yield journal, pool, store
        finally:
            await pool.close()
            await journal.close()

    @asynccontextmanager
    async def blocked_thresholds() -> AsyncIterator[tuple[Processor, Callable[[], Awaitable[bool]]]]:
        async with opened() as (journal, pool, store):
            ends.update(publish(settings_, await append(journal, 55)))
            ledger = PostgresCompactions(pool)
            processor = Thresholds(
                settings_,
                store,
                journal,
                ObjectStoreSummaryWriter.from_settings(settings_),
                ledger=ledger,
                publisher=unreachable_publisher(settings_, OUTPUT_TOPIC, tmp_path),
                close_store=False,
            )

            async def blocked() -> bool:  # the request is decided and waits for the broker
                # (a row without to_offset is the crossings held back, recorded just before it)
                row = await ledger.get(SCOPE)
                if row is None or row.to_offset is None:
                    return False
                crossing.append(row.to_offset)
                return True

            yield processor, blocked

    assert seconds_to_stop(settings_, options, registry, blocked_thresholds) < 5.0
    # the batch holding the crossing is never committed (a loaded machine may have committed an
    # earlier, smaller batch): everything from the crossing message on is redelivered
    assert crossing, "the request was never decided"
    assert committed_total(settings_, NAME, SOURCE) <= crossing[-1]
    assert requests(settings_) == []

    async def next_run() -> None:
        async with opened() as (journal, pool, store):
            live = Thresholds(
                settings_,
                store,
                journal,
                ObjectStoreSummaryWriter.from_settings(settings_),
                ledger=PostgresCompactions(pool),
                close_store=False,
            )
            await run_until_caught_up(settings_, options, registry, live, SOURCE, ends)

    asyncio.run(next_run())
    (sent,) = requests(settings_)  # the request decided before the stop, sent once by the next run
    assert (sent["to_offset"], sent["messages"]) == (49, 50)
