"""Testing a relay on the real broker: settings with every topic of topics.yaml created, and reading
back everything a relay published to a topic."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
from confluent_kafka import Message as KafkaMessage

from core.config import Settings
from streams.admin import apply_topics
from streams.codecs import journal_messages
from streams.sequencing import shard_of_record
from streams.topics import load_topics


def relay_settings_on(broker: str, topic_prefix: str, tmp_path: Path) -> Settings:
    """Settings on `broker` under the test's own topic prefix, every topic of topics.yaml created."""
    settings = Settings(data_dir=tmp_path / "data", broker_url=f"kafka://{broker}", topic_prefix=topic_prefix)
    apply_topics(settings, load_topics())
    return settings


def consume_from_start(
    settings: Settings, name: str, expected: int, *, quiet_s: float, timeout_s: float = 20.0
) -> list[KafkaMessage]:
    """Every record of topic `name` from the beginning (by assignment, no consumer group), until
    `expected` arrived and then nothing more for `quiet_s`, so unexpected extra records are seen.
    Does not rely on the high watermark (wrong on Tansu)."""
    topic = settings.topic(name)
    consumer = Consumer(
        {
            "bootstrap.servers": settings.broker_bootstrap,
            "group.id": f"test-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    partitions = load_topics().get(name).partitions
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    records: list[KafkaMessage] = []
    deadline = time.monotonic() + timeout_s
    last_new = time.monotonic()
    try:
        while time.monotonic() < deadline:
            batch = consumer.consume(1000, 0.2)
            for record in batch:
                assert record.error() is None, record.error()
                records.append(record)
            if batch:
                last_new = time.monotonic()
            elif len(records) >= expected and time.monotonic() - last_new >= quiet_s:
                break
    finally:
        consumer.close()
    return records


def journal_seqs(settings: Settings) -> Counter[int]:
    """How many records of each journal seq `journal.messages` holds, read to the end of every
    partition (end-of-partition events, not the watermark Tansu reports wrongly)."""
    seqs: Counter[int] = Counter()
    for (_, seq), n in journal_shard_seqs(settings).items():
        seqs[seq] += n
    return seqs


def journal_shard_seqs(settings: Settings) -> Counter[tuple[int, int]]:
    """How many records of each (journal shard, seq) `journal.messages` holds (as `journal_seqs`);
    a record's `shard` header must agree with its value's."""
    topic = settings.topic("journal.messages")
    consumer = Consumer(
        {
            "bootstrap.servers": settings.broker_bootstrap,
            "group.id": f"check-{uuid.uuid4().hex[:8]}",  # assigned, never joined nor committed
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    seqs: Counter[tuple[int, int]] = Counter()
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        pending = set(partitions)
        deadline = time.monotonic() + 30
        while pending:
            assert time.monotonic() < deadline, f"partitions {pending} of {topic} not read to the end"
            message = consumer.poll(0.2)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                pending.discard(message.partition())
                continue
            decoded = journal_messages.decode(message.value())
            assert shard_of_record(message.headers()) == decoded.shard
            seqs[(decoded.shard, decoded.seq)] += 1
    finally:
        consumer.close()
    return seqs
