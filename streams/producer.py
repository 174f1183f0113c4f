"""confluent-kafka producers with memstream's delivery guarantees.

`producer_config` gives an idempotent producer (`enable.idempotence`, `acks=all`): per partition,
records are written once each and in produce order, even across internal retries. The local
delivery timeout is infinite by default (`message.timeout.ms=0`): while the broker is away,
records wait and are retried instead of expiring, because an expired record would leave a gap
that a later retry fills out of order. Callers that must stop waiting purge the producer.

`message.max.bytes` is the largest `max.message.bytes` declared in topics.yaml, so every record a
topic accepts can also be produced.

Producers never create topics (`allow.auto.create.topics=false`): a broker such as Tansu would
otherwise auto-create a missing topic with its own partition count and no declared config. A
record for a missing topic fails with UNKNOWN_TOPIC_OR_PART after
`topic.metadata.propagation.max.ms` (5 s); `memstream topics apply` creates topics.

`produce_and_confirm` produces one batch and waits until the broker answered for EVERY record
(the publish-and-wait core of the relays, which store their progress only once it returned no
failure). `BatchPublisher` wraps it for processors that produce from the event loop (thresholds,
flush): one topic, the librdkafka calls in a worker thread, abortable by a stopping owner.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka import Message as KafkaMessage

from core.config import Settings
from core.errors import MemstreamError
from streams.topics import TopicRegistry, default_registry

UNASSIGNED = -1
MISSING_TOPIC = frozenset(
    {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION}
)
"""Delivery errors meaning the record's topic or partition does not exist (deleted, or a broker that
lost its topics)."""
"""librdkafka's RD_KAFKA_PARTITION_UA: let the partitioner choose."""

RECORD_OVERHEAD_BYTES = 64 * 1024
"""Headroom above the largest topic limit for the batch envelope and headers."""


def producer_config(
    settings: Settings,
    *,
    client_id: str,
    registry: TopicRegistry | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """librdkafka settings for an idempotent, ordered, never-expiring producer (see module doc)."""
    limits = [spec.max_message_bytes or 0 for spec in (registry or default_registry())]
    config: dict[str, Any] = {
        "bootstrap.servers": settings.broker_bootstrap,
        "client.id": client_id,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 2,
        "message.timeout.ms": 0,
        "message.max.bytes": max([1_000_000, *limits]) + RECORD_OVERHEAD_BYTES,
        "socket.keepalive.enable": True,
        "allow.auto.create.topics": False,
        "topic.metadata.propagation.max.ms": 5000,
    }
    config.update(overrides or {})
    return config


def make_producer(
    settings: Settings,
    *,
    client_id: str,
    registry: TopicRegistry | None = None,
    overrides: Mapping[str, Any] | None = None,
    logger: logging.Logger | None = None,
) -> Producer:
    """A `confluent_kafka.Producer` with `producer_config`; librdkafka logs go to `logger`."""
    config = producer_config(settings, client_id=client_id, registry=registry, overrides=overrides)
    if logger is not None:
        config["logger"] = logger
    return Producer(config)


# ---- one batch, every delivery confirmed ----------------------------------------------------------


@dataclass(frozen=True)
class OutgoingRecord:
    """One record to produce: `producer.produce(topic, value, key, headers=headers)`; no value = tombstone.
    `partition`, when given, is used instead of the producer's partitioner."""

    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, str | bytes | None]] | None = None
    partition: int | None = None


@dataclass(frozen=True)
class DeliveryFailure:
    """The broker (or librdkafka) reported `error` for the record with `key`."""

    error: KafkaError
    key: bytes | None


class ProduceRejected(MemstreamError):
    """`produce` refused `records[index]` (e.g. larger than `message.max.bytes`). Records before it
    may be queued: purge the producer (`discard_producer`) before retrying the batch."""

    code = "produce_rejected"

    def __init__(self, index: int, cause: KafkaException) -> None:
        super().__init__(f"record {index} cannot be produced: {cause}")
        self.index = index
        self.cause = cause


class DeliveryAborted(MemstreamError):
    """`aborted()` gave `reason` while `pending` records were unconfirmed (their fate is unknown)."""

    code = "delivery_aborted"

    def __init__(self, reason: str, pending: int) -> None:
        super().__init__(f"{reason} with {pending} records unconfirmed")
        self.reason = reason
        self.pending = pending


class _Deliveries:
    """Delivery bookkeeping of one batch, updated by librdkafka callbacks in the calling thread."""

    def __init__(self, size: int) -> None:
        self.pending = size
        self.failures: list[DeliveryFailure] = []

    def on_delivery(self, err: KafkaError | None, msg: KafkaMessage) -> None:
        self.pending -= 1
        if err is not None:
            self.failures.append(DeliveryFailure(err, msg.key()))

    def check(self, aborted: Callable[[], str | None]) -> None:
        reason = aborted()
        if reason is not None:
            raise DeliveryAborted(reason, self.pending)


def produce_and_confirm(
    producer: Producer,
    topic: str,
    records: Sequence[OutgoingRecord],
    *,
    aborted: Callable[[], str | None],
    stall_warning_s: float,
    on_stall: Callable[[int, float], None],
) -> list[DeliveryFailure]:
    """Produce `records` to `topic` in order, then wait until every one was confirmed or failed.

    Blocking (librdkafka calls): run it in a worker thread. Returns the failed deliveries in
    report order; an empty list means the broker confirmed EVERY record. A full local queue
    (`BufferError`) is waited out by serving delivery reports. Raises `ProduceRejected` when
    `produce` refuses a record, and `DeliveryAborted` as soon as `aborted()` returns a reason
    (checked at least every 0.2 s while waiting, and after the last report). While records stay
    unconfirmed, `on_stall(pending, waited_s)` is called every `stall_warning_s`. After either
    error the producer still holds queued records: purge it (`discard_producer`) before a retry.
    """
    deliveries = _Deliveries(len(records))
    for index, record in enumerate(records):
        while True:
            try:
                producer.produce(
                    topic,
                    record.value,
                    record.key,
                    partition=UNASSIGNED if record.partition is None else record.partition,
                    headers=record.headers,
                    on_delivery=deliveries.on_delivery,
                )
                break
            except BufferError:  # local queue full: serve delivery reports, then retry
                producer.poll(0.05)
                deliveries.check(aborted)
            except KafkaException as exc:
                raise ProduceRejected(index, exc) from None
    started = warned = time.monotonic()
    while deliveries.pending > 0:
        producer.flush(0.2)
        deliveries.check(aborted)
        now = time.monotonic()
        if deliveries.pending > 0 and now - warned >= stall_warning_s:
            warned = now
            on_stall(deliveries.pending, now - started)
    return deliveries.failures


def discard_producer(producer: Producer) -> None:
    """Drop every record `producer` still holds (queued or in flight) without waiting for the broker."""
    producer.purge()
    producer.flush(0)


# ---- batches from the event loop, abortable --------------------------------------------------------


class RecordsNotConfirmed(MemstreamError):
    """The broker reported a failure for some records of a batch: nothing of the batch may count
    as delivered (retry the whole batch; the producer is idempotent)."""

    code = "records_not_confirmed"

    def __init__(self, topic: str, total: int, failures: Sequence[DeliveryFailure]) -> None:
        first = failures[0]
        super().__init__(
            f"{len(failures)} of {total} records were not delivered to {topic}: {first.error.str()} "
            f"(first failed key {first.key!r})"
        )
        self.failures = list(failures)

    @property
    def topic_missing(self) -> bool:
        """Whether a record failed because its topic (or partition) does not exist on the broker."""
        return any(failure.error.code() in MISSING_TOPIC for failure in self.failures)


class BatchPublisher:
    """Publishes batches to one topic from the event loop: `publish(records)` returns only once the
    broker confirmed EVERY record (`produce_and_confirm`, run in a worker thread).

    Failures raise: `RecordsNotConfirmed` (a record failed), `ProduceRejected` (`produce` refused
    one), `DeliveryAborted` (aborted, see below). After any of them, or a cancelled publish, the
    producer is discarded (its queued records purged) and the next publish builds a fresh one
    (`factory`, default: `make_producer(settings, client_id=...)`), so a retried batch never waits
    behind the leftovers of the failed one.

    A publish that waits longer than `give_up_after_s` for its confirmations gives up with
    `DeliveryAborted` (an outage for the runtime: the batch is retried, with a fresh producer). An
    idempotent producer can wait forever on a partition the broker lost and created anew (it keeps
    its sequence numbers for the old one: seen on Tansu after a restart, blocking `thresholds` for
    over a minute); a fresh producer starts clean. What the old one left unconfirmed may still be
    delivered: consumers of these topics are idempotent.

    `abort(reason)` is for an owner that is stopping (thread-safe, final): a publish waiting on the
    broker (e.g. an unreachable one: records never expire, `message.timeout.ms=0`) raises
    `DeliveryAborted` within 0.2 s, and every later publish at once. What it left unconfirmed may or
    may not be delivered: the caller records no progress for it (commits no offsets), so the batch
    is produced again by whoever runs next. `close()` discards the producer.
    """

    def __init__(
        self,
        settings: Settings,
        topic: str,
        *,
        client_id: str,
        logger: logging.Logger,
        factory: Callable[[], Producer] | None = None,
        stall_warning_s: float = 10.0,
        give_up_after_s: float = 20.0,
    ) -> None:
        self.topic = topic
        self._log = logger
        self._factory = factory or (lambda: make_producer(settings, client_id=client_id, logger=logger))
        self._stall_warning_s = stall_warning_s
        self._give_up_after_s = give_up_after_s
        self._producer: Producer | None = None
        self._abort_reason: str | None = None

    def abort(self, reason: str) -> None:
        """Make the publish in progress and every later one raise `DeliveryAborted` (class doc)."""
        self._abort_reason = reason

    @property
    def aborted(self) -> bool:
        return self._abort_reason is not None

    async def publish(self, records: Sequence[OutgoingRecord]) -> None:
        """Produce `records` in order and return once every one is confirmed (class doc)."""
        if not records:
            return
        if self._abort_reason is not None:
            raise DeliveryAborted(self._abort_reason, len(records))
        cancelled = threading.Event()
        give_up_at = time.monotonic() + self._give_up_after_s

        def aborted() -> str | None:
            if cancelled.is_set():
                return "cancelled"
            if self._abort_reason is None and time.monotonic() >= give_up_at:
                return (
                    f"not confirmed within {self._give_up_after_s:.0f}s: producing again with a new "
                    "producer (the broker may be away, or has the topic anew)"
                )
            return self._abort_reason

        def stalled(pending: int, waited_s: float) -> None:
            self._log.warning(
                "%d of %d records for %s not yet confirmed after %.0fs; still waiting (is the broker up?)",
                pending,
                len(records),
                self.topic,
                waited_s,
            )

        if self._producer is None:
            self._producer = self._factory()
        producer = self._producer
        try:
            failures = await asyncio.to_thread(
                produce_and_confirm,
                producer,
                self.topic,
                records,
                aborted=aborted,
                stall_warning_s=self._stall_warning_s,
                on_stall=stalled,
            )
        except BaseException:
            cancelled.set()  # a cancelled caller: the worker thread stops waiting within 0.2 s
            self.close()
            raise
        if failures:
            self.close()
            raise RecordsNotConfirmed(self.topic, len(records), failures)

    def close(self) -> None:
        """Drop the producer and every record it still holds (without waiting for the broker)."""
        producer, self._producer = self._producer, None
        if producer is not None:
            discard_producer(producer)
