"""summarizer on the runtime: real broker, Redis, SlateJournal, local object store, offline model."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from pydantic import SecretStr

from memstream.config import Settings
from memstream.journal.models import NewMessage, ThreadRef
from memstream.journal.store import SlateJournal
from memstream.models.offline import OfflineChatModel
from memstream.summary_store import CachedSummaryWriter
from processors.summarizer import NAME, SOURCE_TOPIC, Summarizer
from sinks.objectstore.summaries import ObjectStoreSummaryReader, ObjectStoreSummaryWriter
from sinks.redis.client import redis_client
from sinks.redis.locks import RedisLocks
from sinks.redis.summary_cache import RedisSummaryCache
from sinks.redis.thresholds import ThreadScope, ThresholdStore
from streams.admin import apply_topics
from streams.runtime import RuntimeOptions, run_processors
from streams.runtime.processor import group_id
from streams.topics import TopicRegistry, default_registry, topic_name


@pytest.fixture
def settings_(broker: str, topic_prefix: str, redis_url: str, tmp_path: Path) -> Settings:
    return Settings(
        data_dir=tmp_path / "data",
        environment="test",
        topic_prefix=topic_prefix,
        broker_url=f"kafka://{broker}",
        redis_url=SecretStr(redis_url),
    )


@pytest.fixture
def registry(settings_: Settings) -> TopicRegistry:
    reg = default_registry().with_dead_letter(NAME)
    apply_topics(settings_, reg, topics=[reg.get(SOURCE_TOPIC), reg.dlq_topic(NAME)])
    return reg


@pytest.fixture
def options(request: pytest.FixtureRequest) -> RuntimeOptions:
    session = 2.0 if request.node.callspec.params.get("broker", "tansu") == "tansu" else 6.0
    return RuntimeOptions(
        batch_size=9,
        batch_wait_s=0.05,
        max_attempts=3,
        backoff_initial_s=0.05,
        backoff_max_s=0.1,
        session_timeout_s=session,
        heartbeat_interval_s=0.5,
        commit_interval_s=0.5,
        drain_timeout_s=2.0,
    )


@pytest.fixture
async def summarizer(settings_: Settings, redis_url: str, journal: SlateJournal) -> AsyncIterator[Summarizer]:
    namespace = f"t{uuid.uuid4().hex[:12]}/thresholds"
    client = redis_client(redis_url)
    store = ThresholdStore(client, token_limit=2_000, message_limit=50, namespace=namespace)
    cache = RedisSummaryCache.from_settings(settings_)
    processor = Summarizer(
        thresholds=store,
        summaries=CachedSummaryWriter(cache, ObjectStoreSummaryWriter.from_settings(settings_)),
        locks=RedisLocks(client, namespace=f"{namespace}/locks"),
        journal=journal,
        chat_model=OfflineChatModel(),
        retry_delays=(0.01,),
    )
    try:
        yield processor
    finally:
        keys = [k async for k in client.scan_iter(match=f"{namespace}/*")]
        if keys:
            await client.delete(*keys)
        await cache.aclose()
        await client.aclose()


def payload(thread: str, to_offset: int) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "environment": "test",
        "account_id": "acme",
        "agent_id": "bot",
        "user_id": "u1",
        "thread_id": thread,
        "from_offset": 0,
        "to_offset": to_offset,
        "tokens": 500,
        "messages": to_offset + 1,
        "reason": "messages",
        "requested_at": "2026-11-02T10:05:00Z",
        "flush": {"status": "stored", "facts_stored": 1, "facts_rejected": 0},
    }


def publish(settings: Settings, payloads: list[dict[str, Any]]) -> dict[int, int]:
    producer = Producer({"bootstrap.servers": settings.broker_bootstrap, "enable.idempotence": True})
    ends: dict[int, int] = {}

    def delivered(err: Any, msg: Any) -> None:
        assert err is None
        ends[msg.partition()] = max(ends.get(msg.partition(), 0), msg.offset() + 1)

    for value in payloads:
        default_registry().validate(SOURCE_TOPIC, value)
        producer.produce(
            topic_name(settings, SOURCE_TOPIC),
            key=value["thread_id"].encode(),
            value=json.dumps(value).encode(),
            on_delivery=delivered,
        )
    assert producer.flush(30) == 0
    return ends


def caught_up(settings: Settings, ends: dict[int, int]) -> bool:
    consumer = Consumer(
        {"bootstrap.servers": settings.broker_bootstrap, "group.id": group_id(NAME, settings)}
    )
    try:
        committed = consumer.committed(
            [TopicPartition(topic_name(settings, SOURCE_TOPIC), p) for p in ends], timeout=10
        )
        return all(tp.offset >= ends[tp.partition] for tp in committed)
    finally:
        consumer.close()


def dead_letters(settings: Settings, registry: TopicRegistry) -> list[dict[str, Any]]:
    consumer = Consumer(
        {
            "bootstrap.servers": settings.broker_bootstrap,
            "group.id": f"check-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
        }
    )
    topic = registry.dlq_topic(NAME).broker_name(settings)
    found: list[dict[str, Any]] = []
    try:
        end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 20
        while len(found) < end:
            assert time.monotonic() < deadline, "timed out reading the dead letters"
            msg = consumer.poll(0.2)
            if msg is None or msg.error() is not None:
                continue
            value = msg.value()
            assert value is not None
            found.append(json.loads(value))
    finally:
        consumer.close()
    return found


async def test_on_the_runtime_requests_become_summaries_and_a_bad_one_is_dead_lettered(
    settings_: Settings,
    options: RuntimeOptions,
    registry: TopicRegistry,
    summarizer: Summarizer,
    journal: SlateJournal,
) -> None:
    ref = ThreadRef(environment="test", account_id="acme", thread_id="th-1")
    stored = []
    for i in range(50):
        stored += await journal.append(
            ref, "bot", "u1", [NewMessage(role="user", content=f"I need help with order {i}.")]
        )
    good, redelivered, beyond = payload("th-1", 49), payload("th-1", 49), payload("th-2", 9)
    ghost = ThreadScope("test", "acme", "bot", "th-2")
    await summarizer.thresholds.client.set(summarizer.thresholds.guard_key(ghost), 9)
    ends = publish(settings_, [good, redelivered, beyond])

    stop = asyncio.Event()
    task = asyncio.create_task(
        run_processors([summarizer], settings_, stop, options=options, registry=registry)
    )
    try:
        deadline = time.monotonic() + 60
        while not await asyncio.to_thread(caught_up, settings_, ends):
            assert not task.done(), "the processor stopped"
            assert time.monotonic() < deadline, "timed out"
            await asyncio.sleep(0.2)
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)

    summary = await ObjectStoreSummaryReader.from_settings(settings_).read(ref, "bot")
    assert summary is not None
    assert (summary.version, summary.last_message_offset, summary.last_message_id, summary.message_count) == (
        1,
        49,
        stored[49].message_id,
        50,
    )
    (letter,) = dead_letters(settings_, registry)
    assert letter["processor"] == NAME and "no message of agent 'bot' at offset 9" in letter["reason"]
    assert await summarizer.thresholds.client.get(summarizer.thresholds.guard_key(ghost)) is None
