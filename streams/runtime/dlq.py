"""Dead-lettering: a processor's poison records go to its topic `dlq.<processor>`.

`DeadLetterQueue.send` builds the record of the `dead_letter` schema in topics.yaml
(`streams.codecs.dead_letter.payload`), produces it with an idempotent producer keyed by the
original key, and returns only when the broker acknowledged it, so the runtime can commit past
the original record afterwards. Before producing it checks the `DeadLetterLimit`: when the
processor has already dead-lettered `limit` records within the window, it raises
`DeadLetterLimitExceeded` instead (and produces nothing).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from confluent_kafka import KafkaError, Message, Producer

from core.config import Settings
from streams.codecs import dead_letter
from streams.producer import make_producer
from streams.runtime.errors import DeadLetterLimitExceeded, DeadLetterUnavailable
from streams.runtime.processor import Record
from streams.topics import TopicRegistry, dlq_topic


class DeadLetterSink(Protocol):
    """Where the runtime sends a poison record; `send` returns once it is durable."""

    async def send(self, record: Record, *, reason: str, error: BaseException, attempts: int) -> None: ...


class DeadLetterLimit:
    """At most `limit` dead letters within any `window_s` seconds (sliding window)."""

    def __init__(self, limit: int, window_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.window_s = window_s
        self._clock = clock
        self._sent: deque[float] = deque()

    def check(self, processor: str) -> None:
        """Raise `DeadLetterLimitExceeded` if one more dead letter would exceed the limit."""
        now = self._clock()
        while self._sent and now - self._sent[0] >= self.window_s:
            self._sent.popleft()
        if len(self._sent) >= self.limit:
            raise DeadLetterLimitExceeded(
                f"processor {processor!r} dead-lettered {len(self._sent)} records within "
                f"{self.window_s:g} s (limit {self.limit}): stopping instead of dead-lettering more. "
                f"Inspect the dead-letter topic; a bad deploy or a bad producer is likely."
            )

    def record(self) -> None:
        self._sent.append(self._clock())


class DeadLetterQueue:
    """The dead-letter topic of one processor (must be declared: `dlq_topic(processor)`)."""

    def __init__(
        self,
        processor: str,
        settings: Settings,
        *,
        limit: DeadLetterLimit,
        ack_timeout_s: float = 30.0,
        registry: TopicRegistry | None = None,
    ) -> None:
        self.processor = processor
        self.spec = dlq_topic(processor, registry=registry)
        self.topic = self.spec.broker_name(settings)
        self.limit = limit
        self.ack_timeout_s = ack_timeout_s
        self._settings = settings
        self._registry = registry
        self._producer: Producer | None = None

    def _ensure_producer(self) -> Producer:
        if self._producer is None:
            self._producer = make_producer(
                self._settings,
                client_id=f"memstream.{self.processor}.dlq",
                registry=self._registry,
                # a DLQ record that is not delivered in time fails (and is retried) instead of
                # lingering in the queue and being delivered twice
                overrides={"message.timeout.ms": int(self.ack_timeout_s * 1000)},
                logger=logging.getLogger("memstream.runtime.dlq"),
            )
        return self._producer

    async def send(self, record: Record, *, reason: str, error: BaseException, attempts: int) -> None:
        """Dead-letter `record`; raises `DeadLetterLimitExceeded` or `DeadLetterUnavailable`."""
        self.limit.check(self.processor)
        payload = dead_letter.payload(
            processor=self.processor,
            original_topic=record.topic,
            partition=record.partition,
            offset=record.offset,
            key=record.key,
            value=record.value,
            headers=record.headers,
            reason=reason,
            error=error,
            attempts=attempts,
        )
        self.spec.validate(payload)
        await self._produce(record.key, json.dumps(payload).encode(), list(record.headers))
        self.limit.record()

    async def _produce(self, key: bytes | None, value: bytes, headers: list[Any]) -> None:
        producer = self._ensure_producer()
        loop = asyncio.get_running_loop()
        delivered: asyncio.Future[None] = loop.create_future()

        def settle(err: KafkaError | None) -> None:
            if delivered.done():
                return
            if err is None:
                delivered.set_result(None)
            else:
                delivered.set_exception(
                    DeadLetterUnavailable(f"dead-letter record to {self.topic!r} failed: {err.str()}")
                )

        def on_delivery(err: KafkaError | None, _msg: Message) -> None:
            loop.call_soon_threadsafe(settle, err)

        producer.produce(self.topic, value=value, key=key, headers=headers or None, on_delivery=on_delivery)
        remaining = await asyncio.to_thread(producer.flush, self.ack_timeout_s + 1.0)
        if remaining:
            raise DeadLetterUnavailable(
                f"dead-letter record to {self.topic!r} not acknowledged within {self.ack_timeout_s:g} s"
            )
        await delivered

    async def close(self) -> None:
        """Deliver what is still queued (bounded by the ack timeout) and drop the producer."""
        if self._producer is not None:
            producer, self._producer = self._producer, None
            await asyncio.to_thread(producer.flush, self.ack_timeout_s)
