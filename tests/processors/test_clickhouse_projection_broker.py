"""clickhouse-projection on the real broker and real ClickHouse (chdb): journal records become
rows, redelivery and replay never duplicate reads, an outage of ClickHouse is waited out."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from memstream.config import Settings
from memstream.journal.models import Message, ToolCall
from processors.clickhouse_projection import NAME, ClickHouseProjection, RetryPolicy
from sinks.clickhouse.base import TranscriptRow, TranscriptScope, TranscriptUnavailable
from sinks.clickhouse.store import ClickHouseTranscriptStore
from streams.admin import apply_topics
from streams.events import encode_message
from streams.runtime import RuntimeOptions, run_processors
from streams.runtime.processor import Record, group_id
from streams.topics import TopicRegistry, default_registry, topic_name
from tests.processors.transcript_support import message, tool_result

REPLAY = f"{NAME}-replay"
SOURCE = "journal.messages"
SCOPE = TranscriptScope(environment="test", account_id="acme", agent_id="bot")


@pytest.fixture
def settings_(broker: str, topic_prefix: str, tmp_path: Path) -> Settings:
    return Settings(
        data_dir=tmp_path / "data",
        environment="test",
        topic_prefix=topic_prefix,
        broker_url=f"kafka://{broker}",
    )


@pytest.fixture
def options(request: pytest.FixtureRequest) -> RuntimeOptions:
    """Short timings (Apache Kafka refuses sessions under 6 s); few attempts, so that only the
    processor's own wait can carry a batch through an outage."""
    session = 2.0 if request.node.callspec.params.get("broker", "tansu") == "tansu" else 6.0
    return RuntimeOptions(
        max_attempts=2,
        backoff_initial_s=0.05,
        backoff_max_s=0.1,
        session_timeout_s=session,
        heartbeat_interval_s=0.5,
        commit_interval_s=0.5,
        drain_timeout_s=2.0,
    )


@pytest.fixture
def registry(settings_: Settings) -> TopicRegistry:
    reg = default_registry().with_dead_letter(REPLAY)
    apply_topics(settings_, reg, topics=[reg.get(SOURCE), reg.dlq_topic(NAME), reg.dlq_topic(REPLAY)])
    return reg


def produce(settings: Settings, records: Sequence[tuple[bytes | None, bytes | None]]) -> None:
    producer = Producer({"bootstrap.servers": settings.broker_bootstrap, "enable.idempotence": True})
    errors: list[Any] = []
    for key, value in records:
        producer.produce(
            topic_name(settings, SOURCE),
            key=key,
            value=value,
            on_delivery=lambda err, _msg: errors.append(err) if err is not None else None,
        )
    assert producer.flush(30) == 0 and errors == []


def encoded(messages: Sequence[Message]) -> list[tuple[bytes | None, bytes | None]]:
    return [(e.key, e.value) for e in map(encode_message, messages)]


def committed(settings: Settings, processor: str) -> int:
    """Records committed by the group, over every partition of journal.messages."""
    topic = topic_name(settings, SOURCE)
    consumer = Consumer(
        {"bootstrap.servers": settings.broker_bootstrap, "group.id": group_id(processor, settings)}
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        done = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=10)
        return sum(max(tp.offset, 0) for tp in done)
    finally:
        consumer.close()


def dead_letters(settings: Settings, processor: str, wait_s: float = 1.5) -> list[dict[str, Any]]:
    """Every record on the processor's dead-letter topic (read by assignment from the beginning)."""
    topic = topic_name(settings, f"dlq.{processor}")
    consumer = Consumer(
        {"bootstrap.servers": settings.broker_bootstrap, "group.id": f"check-{uuid.uuid4().hex[:8]}"}
    )
    found: list[dict[str, Any]] = []
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        idle_until = time.monotonic() + wait_s
        while time.monotonic() < idle_until:
            msg = consumer.poll(0.2)
            if msg is None or msg.error() is not None:
                continue
            found.append(json.loads(msg.value()))
            idle_until = time.monotonic() + wait_s
    finally:
        consumer.close()
    return found


async def project(
    settings: Settings,
    options: RuntimeOptions,
    registry: TopicRegistry,
    processor: ClickHouseProjection,
    total: int,
    timeout_s: float = 90,
) -> None:
    """Run `processor` until its group committed `total` records."""
    stop = asyncio.Event()
    task = asyncio.create_task(
        run_processors([processor], settings, stop, options=options, registry=registry)
    )
    try:
        deadline = time.monotonic() + timeout_s
        while await asyncio.to_thread(committed, settings, processor.name) < total:
            assert not task.done(), f"the processor stopped: {task.exception() if task.done() else ''}"
            assert time.monotonic() < deadline, "timed out"
            await asyncio.sleep(0.2)
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


class BatchRecording(ClickHouseProjection):
    """Records the size of every batch the runtime hands over."""

    sizes: list[int]

    async def process(self, batch: Sequence[Record]) -> None:
        self.sizes.append(len(batch))
        await super().process(batch)


def conversation(threads: int, per_thread: int) -> list[Message]:
    out: list[Message] = []
    seq = 0
    for t in range(threads):
        for o in range(per_thread):
            seq += 1
            role = "user" if o % 2 == 0 else "assistant"
            out.append(
                message(f"th-{t}", o, f"thread {t} message {o} about topic{t % 3}", seq=seq, role=role)
            )
    return out


async def test_journal_to_rows_then_replay_adds_no_duplicates(
    settings_: Settings,
    options: RuntimeOptions,
    registry: TopicRegistry,
    transcript_store: ClickHouseTranscriptStore,
    chdb_client: Any,
) -> None:
    messages = [
        *conversation(threads=4, per_thread=25),
        message(
            "th-call", 0, "", role="assistant", tool_call=ToolCall(id="c-1", name="fetch", arguments="{}")
        ),
        tool_result("th-call", 1, "c-1", "x" * 50_000),
        message("th-other", 0, "thread 0 message 0 about topic0", account_id="globex"),
    ]
    records = encoded(messages)
    records.insert(10, (b"th-0", b"not a journal message"))  # dead-lettered, the rest goes on
    produce(settings_, records)
    produce(settings_, records[:30])  # the relay published some again (at-least-once)
    total = len(records) + 30

    live = BatchRecording(transcript_store, close_store=False, batch_size=40)
    live.sizes = []
    await project(settings_, options, registry, live, total)
    # the processor's own batch size, not the run's (500)
    assert max(live.sizes) <= 40 and sum(live.sizes) >= total
    assert await transcript_store.row_count() == len(messages)
    counts = await transcript_store.thread_counts("test")
    assert {(c.account_id, c.thread_id): (c.messages, c.max_offset) for c in counts} == {
        **{("acme", f"th-{t}"): (25, 24) for t in range(4)},
        ("acme", "th-call"): (2, 1),
        ("globex", "th-other"): (1, 0),
    }
    hits = await transcript_store.search(SCOPE, "topic1", limit=50)
    assert sorted((h.thread_id, h.offset) for h in hits) == [("th-1", o) for o in range(25)]
    [info] = await transcript_store.tool_call(SCOPE, "c-1")
    assert (info.tool_name, info.call_offset, info.result_offset, info.result_bytes) == (
        "fetch",
        0,
        1,
        50_000,
    )
    dead = dead_letters(settings_, NAME)  # the bad record was published twice too
    assert [(d["value_text"], d["processor"]) for d in dead] == [("not a journal message", NAME)] * 2
    raw_before = chdb_client.query(f"SELECT count() FROM {transcript_store.database}.messages").result_rows[
        0
    ][0]
    assert raw_before >= len(messages)

    # replay from the earliest offset (a new group) into the same live table: reads unchanged
    await project(
        settings_,
        options,
        registry,
        ClickHouseProjection(transcript_store, name=REPLAY, close_store=False),
        total,
    )
    raw_after = chdb_client.query(f"SELECT count() FROM {transcript_store.database}.messages").result_rows[0][
        0
    ]
    assert raw_after > raw_before or raw_after == len(messages)  # copies inserted (or already merged away)
    assert await transcript_store.row_count() == len(messages)
    assert await transcript_store.thread_counts("test") == counts
    again = await transcript_store.search(SCOPE, "topic1", limit=50)
    assert sorted((h.thread_id, h.offset) for h in again) == [("th-1", o) for o in range(25)]


class OutageStore:
    """The real store behind a switch: every call raises TranscriptUnavailable until `restore()`."""

    def __init__(self, store: ClickHouseTranscriptStore) -> None:
        self.store = store
        self.down = True
        self.refused = 0

    def restore(self) -> None:
        self.down = False

    def _check(self) -> None:
        if self.down:
            self.refused += 1
            raise TranscriptUnavailable("ClickHouse insert failed: connection refused (test outage)")

    async def ensure_schema(self) -> None:
        self._check()
        await self.store.ensure_schema()

    async def insert(self, rows: Sequence[TranscriptRow], *, table: str | None = None) -> None:
        self._check()
        await self.store.insert(rows, table=table)

    async def close(self) -> None:
        await self.store.close()


async def test_an_outage_of_clickhouse_is_waited_out_without_dead_letters(
    settings_: Settings,
    options: RuntimeOptions,
    registry: TopicRegistry,
    transcript_store: ClickHouseTranscriptStore,
) -> None:
    outage = OutageStore(transcript_store)
    processor = ClickHouseProjection(
        outage,  # type: ignore[arg-type]
        close_store=False,
        batch_size=25,
        retry=RetryPolicy(initial_s=0.05, max_s=0.2, log_every_s=1.0),
    )
    first = conversation(threads=3, per_thread=20)
    produce(settings_, encoded(first))
    later = [message(f"late-{i}", 0, f"written during the outage {i}", seq=1000 + i) for i in range(10)]

    async def outage_then_recovery() -> None:
        await asyncio.sleep(1.0)  # the processor joins and fails for a while ...
        produce(settings_, encoded(later))  # ... while more messages arrive
        await asyncio.sleep(4.0)  # longer than the runtime's own retries (2 attempts) would last
        assert await transcript_store.row_count() == 0
        outage.restore()

    recovery = asyncio.create_task(outage_then_recovery())
    await project(settings_, options, registry, processor, len(first) + len(later))
    await recovery
    assert outage.refused >= 10
    assert processor.outages >= 1
    assert await transcript_store.row_count() == len(first) + len(later)
    assert dead_letters(settings_, NAME) == []
