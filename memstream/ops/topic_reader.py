"""Reading a whole topic from the beginning without moving any consumer group (for the rebuilds)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Protocol

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from core.config import Settings
from memstream.ops.rebuild_base import RebuildFailed
from streams.runtime.processor import Record
from streams.topics import topic_name

log = logging.getLogger("memstream.ops.rebuild")


class RecordSource(Protocol):
    """What a rebuild's read loop needs of a reader."""

    @property
    def topic(self) -> str: ...

    async def read(self, max_records: int = 2000, timeout_s: float = 0.5) -> list[Record]: ...


class TopicReader:
    """Reads every partition of a topic from the earliest offset, without a consumer group's
    commits (random group id, assignment, auto-commit off). confluent-kafka calls run in a thread."""

    def __init__(self, settings: Settings, topic: str) -> None:
        self.topic = topic_name(settings, topic)
        self._consumer = Consumer(
            {
                "bootstrap.servers": settings.broker_bootstrap,
                "group.id": f"memstream-rebuild-{uuid.uuid4().hex[:12]}",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest",
                "allow.auto.create.topics": False,
            }
        )
        self.records = 0

    async def open(self, timeout_s: float = 10.0) -> None:
        """Assign every partition from the beginning; RebuildFailed if the topic does not exist."""

        def assign() -> None:
            try:
                topics = self._consumer.list_topics(self.topic, timeout=timeout_s).topics
            except KafkaException as exc:
                raise RebuildFailed(f"cannot list topic {self.topic}: {exc}") from None
            meta = topics.get(self.topic)
            if meta is None or meta.error is not None or not meta.partitions:
                raise RebuildFailed(f"topic {self.topic} does not exist (run `memstream topics apply`)")
            self._consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in meta.partitions])

        await asyncio.to_thread(assign)

    async def read(self, max_records: int = 2000, timeout_s: float = 0.5) -> list[Record]:
        """The next records (possibly none after `timeout_s`); broker errors are logged and skipped
        (librdkafka retries them)."""
        messages = await asyncio.to_thread(self._consumer.consume, max_records, timeout_s)
        out: list[Record] = []
        for msg in messages:
            err = msg.error()
            if err is not None:
                log.warning("rebuild: reading %s: %s", self.topic, err)
                continue
            offset, partition = msg.offset(), msg.partition()
            assert offset is not None and partition is not None
            timestamp = msg.timestamp()[1]
            out.append(
                Record(
                    topic=self.topic,
                    partition=partition,
                    offset=offset,
                    key=msg.key(),
                    value=msg.value(),
                    headers=(),  # neither projection reads headers
                    timestamp_ms=timestamp if timestamp >= 0 else None,
                )
            )
        self.records += len(out)
        return out

    async def close(self) -> None:
        await asyncio.to_thread(self._consumer.close)
