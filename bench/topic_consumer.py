"""A plain Kafka consumer on every partition of one topic, from the start (for benches' arrival clocks).

The benches run as scripts (`.venv/bin/python bench/bench_x.py`), so this module is imported as
`topic_consumer` from the bench directory.
"""

from __future__ import annotations

import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from core.config import Settings
from streams.topics import load_topics


def consumer_from_start(settings: Settings, name: str) -> Consumer:
    """A consumer of topic `name` (as in topics.yaml), assigned every partition at the beginning.

    Its own random group, no commits, `fetch.wait.max.ms` 5 (arrivals seen within milliseconds);
    the caller polls it and closes it."""
    consumer = Consumer(
        {
            "bootstrap.servers": settings.broker_bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 5,
        }
    )
    partitions = load_topics().get(name).partitions
    consumer.assign([TopicPartition(settings.topic(name), p, OFFSET_BEGINNING) for p in range(partitions)])
    return consumer
