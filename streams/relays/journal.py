"""The relay (outbox): publishes every durable journal append to `journal.messages`, in seq order.

Contract:
- Each round reads up to `batch_size` messages after the durable cursor
  (`journal.read_from_seq(cursor, batch_size)`), produces all of them (key = thread_id, value =
  `streams.codecs.journal_messages.encode`, header `message_id`) with an idempotent producer, waits until
  the broker has confirmed EVERY one (`streams.producer.produce_and_confirm`), and only then
  stores the cursor (`journal.set_cursor`, durable). A message is therefore never skipped: a crash
  or a delivery failure before the cursor is stored means the batch is published again
  (at-least-once; duplicates are limited to the last unconfirmed batch). Consumers must be
  idempotent per (thread, offset): after such a replay a thread's messages arrive again from an
  earlier offset.
- Per-thread order follows seq order: one thread = one key = one partition, and the idempotent
  producer writes a partition in produce order. Records do not expire while the broker is away
  (`message.timeout.ms=0`); the relay waits, logs, and retries.
- Progress facts (`core.sequencing`): the relay chooses each message's partition itself
  (`partition_for`, the producer's own default mapping; the partition count is read from the
  broker's metadata) and stamps each record with `seq`, `prev_seq` and `partitions` headers. A
  pass starts at the cursor it resumes from (after a rewind or a restart); within a pass,
  `prev_seq` is the previous seq published to that partition. After each confirmed batch, and
  before storing the cursor, it stores its `PartitionBounds` in the `bounds_store` (when given;
  a failed store is logged and does not stop publishing). Consumers turn these into durable
  per-group watermarks, so that a broker that lost the topic is refilled from the lowest one.
- Shards (`core.sharding.shards`): a relay publishes one journal shard (`shard`); a deployment of
  N shards runs N relays, each with its own cursor in its own shard's journal, all to the same
  topic. Stamps and bounds are the shard's (its seqs only), with a `shard` header on every record.
- A new `Relay` on the same journal resumes from the durable cursor. `rewind(to_seq)` moves the
  cursor back so everything after `to_seq` is published again (e.g. from 0 after the memory-only
  embedded broker restarted and `journal.messages` was created anew).
- `run(stop)` loops until `stop` is set: on a delivery or journal error it logs, backs off
  (exponentially up to `max_backoff`) and retries from the cursor; it only gives up when the
  journal is fenced (another writer owns it, and that writer runs its own relay).
- The loop, the producer's lifecycle and the publish-and-confirm step are `streams.relays.base`'s
  (`RelayLoop`): confluent-kafka calls run in a worker thread, the event loop is never blocked.

Logs: `memstream.relay` (what the relay does and why it retries; an unreachable broker is logged
at most every 30 s, an unconfirmed batch every `stall_warning_s`), `memstream.relay.kafka`
(librdkafka's own lines).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from core.config import Settings
from core.errors import JournalFenced
from core.sequencing import PartitionBounds
from core.stores.journal import Journal
from core.stores.progress import BoundsStore
from streams.codecs import journal_messages
from streams.producer import DeliveryFailure, OutgoingRecord
from streams.relays.base import Abort, Pace, RelayAborted, RelayDeliveryError, RelayLoop, RelayStats
from streams.sequencing import stamp_headers
from streams.topics import TopicRegistry, topic_name

__all__ = [
    "DEFAULT_CURSOR",
    "JOURNAL_TOPIC",
    "Relay",
    "RelayAborted",
    "RelayDeliveryError",
    "RelayLag",
    "RelayStats",
]

log = logging.getLogger("memstream.relay")
kafka_log = logging.getLogger("memstream.relay.kafka")  # librdkafka's own log lines

UNREACHABLE_LOG_INTERVAL_S = 30.0
METADATA_WAIT_S = 0.5
"""One metadata request's timeout while waiting for the broker (a stop is noticed within it)."""
_MISSING_TOPIC = {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION}

JOURNAL_TOPIC = "journal.messages"
DEFAULT_CURSOR = "relay.journal.messages"


@dataclass(frozen=True)
class RelayLag:
    """`last_seq`: highest durable journal seq; `cursor`: last seq confirmed by the broker."""

    last_seq: int
    cursor: int

    @property
    def lag(self) -> int:
        """Messages durable in the journal but not yet confirmed on the topic."""
        return max(0, self.last_seq - self.cursor)


class Relay(RelayLoop):
    """Publishes the journal to `journal.messages`; see the module contract."""

    def __init__(
        self,
        journal: Journal,
        settings: Settings,
        *,
        cursor_name: str = DEFAULT_CURSOR,
        batch_size: int = 1000,
        idle_sleep: float = 0.02,
        max_backoff: float = 5.0,
        stall_warning_s: float = 10.0,
        registry: TopicRegistry | None = None,
        producer_overrides: Mapping[str, Any] | None = None,
        on_topic_missing: Callable[[], Awaitable[None]] | None = None,
        bounds_store: BoundsStore | None = None,
        shard: int | None = None,
    ) -> None:
        """`on_topic_missing`, when given, is awaited by `run` (outside any relay lock, so it may call
        `rewind`) whenever a batch failed because `journal.messages` does not exist on the broker,
        e.g. to apply topics.yaml and republish what the broker lost after the memory-only embedded
        broker restarted. `bounds_store` keeps the relay's partition bounds (module doc).
        `shard`: the journal shard `journal` is (`core.sharding.shards`), stamped on every record
        and named in the relay's log lines; None: the only journal (shard 0).
        """
        label = cursor_name if shard is None else f"{cursor_name} (shard {shard})"
        super().__init__(
            settings,
            topic_name(settings, JOURNAL_TOPIC, registry=registry),
            Pace(batch_size, idle_sleep, max_backoff, stall_warning_s),
            client_id=f"memstream-{cursor_name}" if shard is None else f"memstream-{cursor_name}-{shard}",
            registry=registry,
            producer_overrides=producer_overrides,
            name=f"relay {label}",
            noun="messages",
            log=log,
            kafka_log=kafka_log,
            stall_message="relay %s: %d of %d messages (seq %d..%d) not yet confirmed by %s after "
            "%.0fs; still waiting (is the broker up?)",
            log_args=(label,),
            error_cb=self._on_client_error,
        )
        self.journal = journal
        self.cursor_name = cursor_name
        self.shard = shard or 0
        """The journal shard this relay publishes (its seqs, bounds and stamps are the shard's)."""
        self.label = label
        self.sharded = shard is not None
        """The journal is one shard of several (log lines and hints name the shard)."""
        self.journal_name = "the journal" if shard is None else f"journal shard {shard}"
        """How log lines name what this relay publishes."""
        self.idle_sleep = idle_sleep
        self._on_topic_missing = on_topic_missing
        self._bounds_store = bounds_store
        self._partitions: int | None = None  # of the topic, read from the broker with each new producer
        self._bounds: PartitionBounds | None = None  # of the current pass
        self._bounds_failed_at = -UNREACHABLE_LOG_INTERVAL_S
        self._unreachable_logged_at = -UNREACHABLE_LOG_INTERVAL_S
        self._cursor: int | None = None

    # ---- status ----------------------------------------------------------------------------------

    async def cursor(self) -> int:
        """The last seq confirmed on the topic (durable cursor; 0 when nothing was published)."""
        if self._cursor is None:
            self._cursor = await self.journal.get_cursor(self.cursor_name)
        return self._cursor

    async def lag(self) -> RelayLag:
        return RelayLag(last_seq=await self.journal.last_seq(), cursor=await self.cursor())

    def notify(self) -> None:
        """Tell a running relay that new messages were appended (skips the rest of its idle sleep)."""
        super().notify()

    # ---- publishing --------------------------------------------------------------------------------

    async def run_once(self) -> int:
        """Publish one batch after the cursor and store the cursor; returns how many were published.

        Raises `RelayDeliveryError` / `RelayAborted` (cursor unchanged) or the journal's errors.
        """
        return await self._round(None)

    async def _round_locked(self, abort: Abort) -> int:
        cursor = await self.cursor()
        batch = await self.journal.read_from_seq(cursor, self.batch_size)
        if not batch:
            return 0
        if batch[0].shard != self.shard:
            raise ValueError(f"relay {self.label} read a message of shard {batch[0].shard}: wrong journal")
        async with self._producing(abort) as producer:
            bounds = await self._pass_bounds(producer, cursor, abort)
            stamps, after = bounds.stamp([(m.seq, m.thread_id.encode("utf-8")) for m in batch])
            records = [
                OutgoingRecord(event.key, event.value, [*event.headers, *stamp_headers(stamp)], partition)
                for event, (partition, stamp) in zip(map(journal_messages.encode, batch), stamps, strict=True)
            ]
            await asyncio.to_thread(self._publish, producer, records, [m.seq for m in batch], abort)
        last = batch[-1].seq
        await self._save_bounds(after)
        await self.journal.set_cursor(self.cursor_name, last)
        self._cursor = last
        self._bounds = after
        return len(batch)

    async def rewind(self, to_seq: int = 0) -> None:
        """Move the durable cursor back to `to_seq`: every message after it is published again (a
        new pass of stamps starts there)."""
        if to_seq < 0:
            raise ValueError("to_seq must be >= 0")
        async with self._lock:
            current = await self.cursor()
            if to_seq > current:
                raise ValueError(
                    f"cannot rewind forward: cursor is {current}, asked {to_seq} (that would skip messages)"
                )
            await self.journal.set_cursor(self.cursor_name, to_seq)
            self._cursor = to_seq
            self.stats.rewinds += 1
            log.info("relay %s rewound from seq %d to %d", self.label, current, to_seq)
        self._wake.set()

    def interrupt(self) -> None:
        """The broker replaced the topic: abort the round in progress, if any (its batch stays
        unconfirmed and is published again), and publish the next batch with a new producer (new
        producer id, fresh metadata and partition count). An idempotent producer can wait forever
        for a partition that was recreated, and that round must not keep the relay's lock from the
        rewind that refills the new topic."""
        super().interrupt()

    async def run(self, stop: asyncio.Event) -> None:
        """Publish until `stop` is set (see the module contract). Raises only `JournalFenced`."""
        await super().run(stop)

    async def close(self) -> None:
        """Release the producer. Unconfirmed messages are not lost: the cursor never passed them."""
        await super().close()
        self._unreachable_logged_at = -UNREACHABLE_LOG_INTERVAL_S

    # ---- the loop's hooks ------------------------------------------------------------------------

    def _fatal(self, exc: Exception) -> bool:
        if isinstance(exc, JournalFenced):
            log.error("relay %s stops: the journal is fenced by another writer", self.label)
            return True
        return False

    def _log_retry(self, backoff: float) -> None:
        log.warning(
            "relay %s: publishing to %s on %s failed (%s); nothing was skipped, retrying from "
            "seq %s in %.1fs",
            self.label,
            self.topic,
            self.settings.broker_bootstrap,
            self.stats.last_error,
            self._cursor,
            backoff,
        )

    async def _before_round(self) -> None:
        return None

    async def _after_run(self) -> None:
        return None

    async def _after_failure(self, exc: Exception) -> None:
        if not (isinstance(exc, RelayDeliveryError) and exc.topic_missing and self._on_topic_missing):
            return
        try:
            await self._on_topic_missing()
        except Exception:
            log.exception("relay %s: the on_topic_missing hook failed; retrying anyway", self.label)

    def _describe(self, seq: int, record: OutgoingRecord) -> str:
        return f"message seq {seq} ({len(record.value or b'')} bytes)"

    def _undelivered(
        self, failures: Sequence[DeliveryFailure], total: int, first: int, last: int
    ) -> RelayDeliveryError:
        err, key = failures[0].error, failures[0].key
        hint = ""
        missing = err.code() in _MISSING_TOPIC
        if missing:
            hint = " (the topic is missing or lost partitions: run `memstream topics apply`)"
        elif err.code() == KafkaError.MSG_SIZE_TOO_LARGE:
            hint = " (raise max.message.bytes in topics.yaml, then `memstream topics apply`)"
        return RelayDeliveryError(
            f"{len(failures)} of {total} messages (seq {first}..{last}) were "
            f"not delivered to {self.topic}: {err.str()}{hint}; first failed key {key!r}",
            topic_missing=missing,
        )

    # ---- internals -----------------------------------------------------------------------------
    async def _pass_bounds(self, producer: Producer, cursor: int, aborted: Abort) -> PartitionBounds:
        """The bounds to stamp a batch after `cursor` with: the current pass's; else the stored ones
        when they were saved at exactly `cursor` (a restart); else a new pass starting at `cursor`."""
        if self._partitions is None:
            self._partitions = await asyncio.to_thread(self._partition_count, producer, aborted)
        partitions = self._partitions
        if (
            self._bounds is not None
            and self._bounds.cursor == cursor
            and self._bounds.partitions == partitions
        ):
            return self._bounds
        stored: PartitionBounds | None = None
        if self._bounds_store is not None:
            try:
                stored = await self._bounds_store.load_bounds(self.topic, self.shard, partitions)
            except Exception as exc:
                log.warning("relay %s: could not read its stored partition bounds (%r)", self.label, exc)
        if stored is not None and stored.cursor == cursor:
            self._bounds = stored
        else:
            self._bounds = PartitionBounds.start(partitions, cursor, self.shard)
        return self._bounds

    def _partition_count(self, producer: Producer, aborted: Abort) -> int:
        """Worker thread: the topic's partition count from the broker's metadata, waiting (like a
        delivery) while the broker does not answer; `RelayAborted` when `aborted()` says so."""
        while True:
            reason = aborted()
            if reason is not None:
                raise RelayAborted(f"relay {self.label} {reason} while reading the metadata of {self.topic}")
            try:
                metadata = producer.list_topics(self.topic, timeout=METADATA_WAIT_S)
                break
            except KafkaException as exc:
                error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
                if error is None or error.code() not in (KafkaError._TIMED_OUT, KafkaError._TRANSPORT):
                    raise RelayDeliveryError(f"cannot read the metadata of {self.topic}: {exc}") from None
        topic = metadata.topics.get(self.topic)
        error = None if topic is None else topic.error
        if topic is None or error is not None or not topic.partitions:
            missing = topic is None or error is None or error.code() in _MISSING_TOPIC
            raise RelayDeliveryError(
                f"{self.topic} has no partitions on {self.settings.broker_bootstrap}"
                f"{f' ({error.str()})' if error is not None else ''}"
                + (" (the topic is missing: run `memstream topics apply`)" if missing else ""),
                topic_missing=missing,
            )
        return len(topic.partitions)

    async def _save_bounds(self, bounds: PartitionBounds) -> None:
        if self._bounds_store is None:
            return
        try:
            await self._bounds_store.save_bounds(self.topic, bounds)
        except Exception as exc:  # progress facts only: publishing goes on (consumers stay behind)
            now = time.monotonic()
            if now - self._bounds_failed_at >= UNREACHABLE_LOG_INTERVAL_S:
                self._bounds_failed_at = now
                log.warning(
                    "relay %s: could not store its partition bounds (%r); publishing goes on",
                    self.label,
                    exc,
                )

    def _drop_producer(self) -> None:
        self._partitions = None  # read again with the next producer (the topic may have been recreated)
        super()._drop_producer()

    def _on_client_error(self, err: KafkaError) -> None:
        if err.fatal():
            self._producer_broken.set()
            log.error("relay %s: producer failed fatally (%s); it will be recreated", self.label, err)
        elif err.code() in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT, KafkaError._RESOLVE):
            now = time.monotonic()
            if now - self._unreachable_logged_at < UNREACHABLE_LOG_INTERVAL_S:
                return
            self._unreachable_logged_at = now
            log.warning(
                "relay %s: broker %s unreachable (%s); unconfirmed messages are kept and retried",
                self.label,
                self.settings.broker_bootstrap,
                err.str(),
            )
