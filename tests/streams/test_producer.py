"""produce_and_confirm against real brokers (Tansu; Apache Kafka with --kafka) and a closed port."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka import Message as KafkaMessage

from core.config import Settings
from memstream.embedded.process import free_port
from streams.admin import apply_topics
from streams.producer import (
    BatchPublisher,
    DeliveryAborted,
    DeliveryFailure,
    OutgoingRecord,
    ProduceRejected,
    RecordsNotConfirmed,
    discard_producer,
    make_producer,
    produce_and_confirm,
)
from streams.topics import load_topics

REGISTRY = load_topics()
KAFKA_LOG = logging.getLogger("tests.streams.producer.kafka")  # librdkafka's lines (refused connects)
TOPIC = "memory.entries"  # compacted: tombstones are valid records


def never() -> str | None:
    return None


def no_stall(pending: int, waited_s: float) -> None:
    raise AssertionError(f"unexpected stall: {pending} pending after {waited_s:.1f}s")


def consume(settings: Settings, expected: int, timeout_s: float = 20.0) -> list[KafkaMessage]:
    topic = settings.topic(TOPIC)
    consumer = Consumer(
        {
            "bootstrap.servers": settings.broker_bootstrap,
            "group.id": f"test-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
        }
    )
    partitions = REGISTRY.get(TOPIC).partitions
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    records: list[KafkaMessage] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(records) < expected and time.monotonic() < deadline:
            for record in consumer.consume(1000, 0.2):
                assert record.error() is None, record.error()
                records.append(record)
    finally:
        consumer.close()
    return records


@pytest.fixture
def broker_settings(broker: str, topic_prefix: str, tmp_path: Path) -> Settings:
    settings = Settings(data_dir=tmp_path, broker_url=f"kafka://{broker}", topic_prefix=topic_prefix)
    apply_topics(settings, REGISTRY)
    return settings


def unreachable(tmp_path: Path, **overrides: object) -> tuple[Settings, Producer]:
    settings = Settings(data_dir=tmp_path, broker_url=f"kafka://127.0.0.1:{free_port()}")
    producer = make_producer(settings, client_id="test-unreachable", overrides=overrides, logger=KAFKA_LOG)
    return settings, producer


def test_every_record_is_confirmed_in_order_through_a_full_local_queue(broker_settings: Settings) -> None:
    # A 5-record local queue: producing 300 records waits out BufferError many times.
    producer = make_producer(
        broker_settings, client_id="test-producer", overrides={"queue.buffering.max.messages": 5}
    )
    records = [
        OutgoingRecord(f"k{i % 3}".encode(), f"v{i}".encode(), [("n", str(i).encode())]) for i in range(300)
    ]
    records.append(OutgoingRecord(b"k0", None))  # a tombstone
    failures = produce_and_confirm(
        producer, broker_settings.topic(TOPIC), records, aborted=never, stall_warning_s=30, on_stall=no_stall
    )
    assert failures == []
    got = consume(broker_settings, len(records))
    assert len(got) == len(records)
    per_key: dict[bytes, list[bytes | None]] = {}
    for record in got:
        key = record.key()
        assert key is not None
        per_key.setdefault(key, []).append(record.value())
    for k in range(3):
        key = f"k{k}".encode()
        expected = [r.value for r in records if r.key == key]
        assert per_key[key] == expected  # produce order per key, the tombstone last for k0
    first = next(r for r in got if r.value() == b"v7")
    assert first.headers() == [("n", b"7")]


def test_failed_deliveries_are_returned_with_their_keys(tmp_path: Path, broker: str) -> None:
    settings = Settings(
        data_dir=tmp_path, broker_url=f"kafka://{broker}", topic_prefix=f"none{uuid.uuid4().hex[:8]}."
    )
    producer = make_producer(
        settings, client_id="test-missing", overrides={"topic.metadata.propagation.max.ms": 500}
    )
    records = [OutgoingRecord(b"a", b"1"), OutgoingRecord(b"b", b"2")]
    failures = produce_and_confirm(
        producer, settings.topic(TOPIC), records, aborted=never, stall_warning_s=30, on_stall=no_stall
    )
    assert sorted(f.key or b"" for f in failures) == [b"a", b"b"]
    assert {f.error.code() for f in failures} <= {
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError._UNKNOWN_PARTITION,
    }


def test_a_refused_record_names_its_index(tmp_path: Path) -> None:
    _, producer = unreachable(tmp_path, **{"message.max.bytes": 2000})
    records = [OutgoingRecord(b"a", b"small"), OutgoingRecord(b"b", b"x" * 5000)]
    with pytest.raises(ProduceRejected) as info:
        produce_and_confirm(producer, "t", records, aborted=never, stall_warning_s=30, on_stall=no_stall)
    assert info.value.index == 1
    assert info.value.cause.args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
    discard_producer(producer)
    # the queued first record is purged too: its (purge) delivery report is served by the next polls
    deadline = time.monotonic() + 10
    while len(producer) and time.monotonic() < deadline:
        producer.poll(0.05)
    assert len(producer) == 0


def test_waits_while_the_broker_is_away_reports_stalls_and_aborts(tmp_path: Path) -> None:
    _, producer = unreachable(tmp_path)
    stalls: list[tuple[int, float]] = []
    stop = threading.Event()

    def aborted() -> str | None:
        return "stopped" if stop.is_set() else None

    def stalled(pending: int, waited_s: float) -> None:
        stalls.append((pending, waited_s))
        if len(stalls) == 3:
            stop.set()

    records = [OutgoingRecord(b"a", b"1"), OutgoingRecord(b"b", b"2")]
    started = time.monotonic()
    with pytest.raises(DeliveryAborted) as info:
        produce_and_confirm(producer, "t", records, aborted=aborted, stall_warning_s=0.3, on_stall=stalled)
    assert time.monotonic() - started < 2
    assert (info.value.reason, info.value.pending) == ("stopped", 2)  # nothing expired: all kept
    assert [pending for pending, _ in stalls] == [2, 2, 2]
    waited = [w for _, w in stalls]
    assert waited == sorted(waited) and waited[0] >= 0.3
    discard_producer(producer)


def test_aborts_while_the_local_queue_is_full(tmp_path: Path) -> None:
    _, producer = unreachable(tmp_path, **{"queue.buffering.max.messages": 1})
    calls = 0

    def aborted() -> str | None:
        nonlocal calls
        calls += 1
        return "closed" if calls >= 3 else None

    records = [OutgoingRecord(b"a", b"1"), OutgoingRecord(b"b", b"2")]
    with pytest.raises(DeliveryAborted) as info:
        produce_and_confirm(producer, "t", records, aborted=aborted, stall_warning_s=30, on_stall=no_stall)
    assert (info.value.reason, info.value.pending) == ("closed", 2)
    assert len(producer) == 1  # the second record never entered the queue
    discard_producer(producer)


# ---- BatchPublisher ---------------------------------------------------------------------------------


async def test_a_publisher_returns_once_every_record_is_confirmed(broker_settings: Settings) -> None:
    publisher = BatchPublisher(
        broker_settings, broker_settings.topic(TOPIC), client_id="test-publisher", logger=KAFKA_LOG
    )
    try:
        await publisher.publish([OutgoingRecord(b"a", b"1"), OutgoingRecord(b"b", b"2")])
        await publisher.publish([OutgoingRecord(b"a", b"3")])
    finally:
        publisher.close()
    assert sorted(r.value() or b"" for r in consume(broker_settings, 3)) == [b"1", b"2", b"3"]


async def test_a_publisher_waiting_on_an_unreachable_broker_gives_up_when_aborted(tmp_path: Path) -> None:
    settings, _ = unreachable(tmp_path)
    publisher = BatchPublisher(settings, "t", client_id="test-unreachable", logger=KAFKA_LOG)
    waiting = asyncio.create_task(publisher.publish([OutgoingRecord(b"a", b"1")]))
    await asyncio.sleep(1.0)
    assert not waiting.done()  # records never expire: it waits for the broker
    aborted_at = time.monotonic()
    publisher.abort("the owner is stopping")
    with pytest.raises(DeliveryAborted, match="the owner is stopping"):
        await waiting
    assert time.monotonic() - aborted_at < 1.0
    with pytest.raises(DeliveryAborted):  # and at once from now on
        await publisher.publish([OutgoingRecord(b"b", b"2")])
    publisher.close()


async def test_a_publish_not_confirmed_in_time_gives_up_and_the_next_uses_a_new_producer(
    tmp_path: Path,
) -> None:
    """Regression (issue 9, broker kill): thresholds' idempotent producer waited over a minute on a
    compaction.requested partition the restarted broker had anew; every threshold stalled."""
    settings, _ = unreachable(tmp_path)
    built: list[Producer] = []

    def factory() -> Producer:
        built.append(make_producer(settings, client_id="test-give-up"))
        return built[-1]

    publisher = BatchPublisher(
        settings, "t", client_id="test-give-up", logger=KAFKA_LOG, factory=factory, give_up_after_s=1.0
    )
    started = time.monotonic()
    with pytest.raises(DeliveryAborted, match="not confirmed within 1s"):
        await publisher.publish([OutgoingRecord(b"a", b"1")])
    assert 1.0 <= time.monotonic() - started < 5.0
    assert not publisher.aborted  # not final: the batch is produced again
    with pytest.raises(DeliveryAborted, match="not confirmed within 1s"):
        await publisher.publish([OutgoingRecord(b"a", b"1")])
    assert len(built) == 2  # each attempt on a fresh producer
    publisher.close()


async def test_a_missing_topic_is_reported_with_the_failed_keys(tmp_path: Path, broker: str) -> None:
    settings = Settings(
        data_dir=tmp_path, broker_url=f"kafka://{broker}", topic_prefix=f"none{uuid.uuid4().hex[:8]}."
    )
    publisher = BatchPublisher(
        settings,
        settings.topic(TOPIC),
        client_id="test-missing",
        logger=KAFKA_LOG,
        factory=lambda: make_producer(
            settings, client_id="test-missing", overrides={"topic.metadata.propagation.max.ms": 500}
        ),
    )
    with pytest.raises(RecordsNotConfirmed) as info:
        await publisher.publish([OutgoingRecord(b"a", b"1")])
    assert [f.key for f in info.value.failures] == [b"a"]
    assert "were not delivered" in info.value.message
    publisher.close()


def test_unconfirmed_records_tell_whether_their_topic_is_missing() -> None:
    def failed(*codes: int) -> RecordsNotConfirmed:
        return RecordsNotConfirmed(
            "t", len(codes), [DeliveryFailure(KafkaError(code), b"k") for code in codes]
        )

    assert failed(KafkaError._MSG_TIMED_OUT, KafkaError.UNKNOWN_TOPIC_OR_PART).topic_missing
    assert failed(KafkaError._UNKNOWN_PARTITION).topic_missing
    assert failed(KafkaError._UNKNOWN_TOPIC).topic_missing
    assert not failed(KafkaError._MSG_TIMED_OUT, KafkaError.NOT_LEADER_FOR_PARTITION).topic_missing
