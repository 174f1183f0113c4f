"""summarizer on the runtime: real broker, Redis, SlateJournal, local object store, offline model."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from core.chat.offline import OfflineChatModel
from core.config import Settings
from core.journal.models import NewMessage, ThreadRef
from core.stores.thresholds import ThreadScope
from core.summaries.layered import CachedSummaryWriter
from processors.summarizer import NAME, SOURCE_TOPIC, Summarizer
from sinks.objectstore.summaries import ObjectStoreSummaryReader, ObjectStoreSummaryWriter
from sinks.postgres.compactions import PostgresCompactions
from sinks.redis.client import redis_client
from sinks.redis.locks import RedisLocks
from sinks.redis.summary_cache import RedisSummaryCache
from sinks.redis.thresholds import RedisThresholdStore
from sinks.slatedb.journal import SlateJournal
from streams.admin import apply_topics
from streams.runtime import RuntimeOptions
from streams.topics import TopicRegistry, default_registry
from tests.processors.runtime_support import (
    broker_settings,
    dead_letters,
    produce,
    run_until_caught_up,
    short_options,
)


@pytest.fixture
def settings_(broker: str, topic_prefix: str, redis_url: str, tmp_path: Path) -> Settings:
    return broker_settings(broker, topic_prefix, tmp_path, redis_url=redis_url)


@pytest.fixture
def registry(settings_: Settings) -> TopicRegistry:
    reg = default_registry().with_dead_letter(NAME)
    apply_topics(settings_, reg, topics=[reg.get(SOURCE_TOPIC), reg.dlq_topic(NAME)])
    return reg


@pytest.fixture
def options(request: pytest.FixtureRequest) -> RuntimeOptions:
    return short_options(request, batch_size=9, batch_wait_s=0.05)


@pytest.fixture
async def summarizer(
    settings_: Settings, redis_url: str, journal: SlateJournal, pool: asyncpg.Pool
) -> AsyncIterator[Summarizer]:
    namespace = f"t{uuid.uuid4().hex[:12]}/thresholds"
    client = redis_client(redis_url)
    store = RedisThresholdStore(client, token_limit=2_000, message_limit=50, namespace=namespace)
    cache = RedisSummaryCache.from_settings(settings_)
    processor = Summarizer(
        thresholds=store,
        summaries=CachedSummaryWriter(cache, ObjectStoreSummaryWriter.from_settings(settings_)),
        locks=RedisLocks(client, namespace=f"{namespace}/locks"),
        journal=journal,
        ledger=PostgresCompactions(pool),
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
    """Produce `payloads` (validated against topics.yaml) to compaction.requested, keyed by thread."""
    for value in payloads:
        default_registry().validate(SOURCE_TOPIC, value)
    return produce(
        settings, SOURCE_TOPIC, [(v["thread_id"].encode(), json.dumps(v).encode()) for v in payloads]
    )


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

    await run_until_caught_up(settings_, options, registry, summarizer, SOURCE_TOPIC, ends)

    summary = await ObjectStoreSummaryReader.from_settings(settings_).read(ref, "bot")
    assert summary is not None
    assert (summary.version, summary.last_message_offset, summary.last_message_id, summary.message_count) == (
        1,
        49,
        stored[49].message_id,
        50,
    )
    (letter,) = dead_letters(settings_, NAME)
    assert letter["processor"] == NAME and "no message of agent 'bot' at offset 9" in letter["reason"]
    assert await summarizer.thresholds.client.get(summarizer.thresholds.guard_key(ghost)) is None
