"""Read a thread-keyed output topic of a processor, without joining a consumer group."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from core.config import Settings
from streams.topics import default_registry, topic_name


def read_thread_topic(settings: Settings, name: str, timeout: float = 20.0) -> list[dict[str, Any]]:
    """Every record on topic `name` so far, read by assignment up to each partition's high
    watermark; each key is checked against its payload's thread_id and each payload against the
    topic's schema in topics.yaml."""
    consumer = Consumer(
        {
            "bootstrap.servers": settings.broker_bootstrap,
            "group.id": f"check-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
        }
    )
    topic = topic_name(settings, name)
    found: list[dict[str, Any]] = []
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions
        }
        pending = {p for p, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in pending])
        deadline = time.monotonic() + timeout
        while pending:
            assert time.monotonic() < deadline, f"timed out reading {name}"
            msg = consumer.poll(0.2)
            if msg is None or msg.error() is not None:
                continue
            value, offset = msg.value(), msg.offset()
            assert value is not None and offset is not None
            payload = json.loads(value)
            assert msg.key() == payload["thread_id"].encode()
            found.append(payload)
            if offset + 1 >= ends[msg.partition()]:
                pending.discard(msg.partition())
    finally:
        consumer.close()
    registry = default_registry()
    for payload in found:
        registry.validate(name, payload)
    return found
