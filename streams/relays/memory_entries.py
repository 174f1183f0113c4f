"""The entries outbox relay: publishes `memory_outbox` rows to `memory.entries`, in seq order.

Contract:
- Every committed change of an entry wrote one `memory_outbox` row in its own transaction
  (`sinks.postgres.memory_writes.MemoryWriteTx.publish`), so a committed change is never lost: its row
  stays in the table until the broker confirmed it.
- Each round (`run_once`) runs in one Postgres transaction that first takes a transaction-level
  advisory lock (so at most one relay per database publishes at a time; others find the lock
  taken and do nothing), reads up to `batch_size` rows in seq order, produces them all (key =
  `record_key`, value = the EntryEvent JSON, or no value for a tombstone) with an idempotent
  producer, waits until the broker confirmed EVERY one (`streams.producer.produce_and_confirm`),
  and only then moves those rows to `memory_outbox_published` and commits. A crash or a delivery
  failure before the commit leaves the rows in place: they are published again (at-least-once;
  duplicates are a suffix of the outbox republished in order). Each record carries its row's seq
  in the header `outbox_seq`.
- Broker loss: the qdrant-projection records the `outbox_seq`s it applied
  (`record_applied`, into `memory_outbox_applied`); every round deletes the rows found in both
  tables. So `memory_outbox_published` holds what the broker confirmed and the projection has not
  applied yet. When the broker lost `memory.entries` (`streams.topic_sync`),
  `republish_unapplied` moves those rows back into the outbox (same seqs, so before newer rows):
  they are published again and the projection catches up by itself.
- Per-entry order: the rows of one entry are in its commit order (each write locks the entry
  row before inserting its outbox row), one entry = one key = one partition, and the idempotent
  producer keeps produce order per partition. So the last record of a key is its latest state.
- `run(stop)` loops until `stop` is set: woken by Postgres `LISTEN memstream_memory_outbox` (a
  trigger NOTIFYs when a transaction that wrote outbox rows commits), with polling every
  `poll_interval` as a fallback (and when the listening connection is lost). On a delivery or
  database error it logs, backs off exponentially up to `max_backoff`, and retries.
- confluent-kafka calls are synchronous: producing and waiting run in a worker thread.

Logs: `memstream.memory.outbox` (rounds, retries), `memstream.memory.outbox.kafka` (librdkafka).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
from confluent_kafka import Producer

from core.config import Settings
from core.errors import MemstreamError
from streams.codecs.memory_entries import encode_value
from streams.producer import (
    DeliveryAborted,
    OutgoingRecord,
    ProduceRejected,
    discard_producer,
    make_producer,
    produce_and_confirm,
)
from streams.topics import TopicRegistry, topic_name

log = logging.getLogger("memstream.memory.outbox")
kafka_log = logging.getLogger("memstream.memory.outbox.kafka")

ENTRIES_TOPIC = "memory.entries"
NOTIFY_CHANNEL = "memstream_memory_outbox"
OUTBOX_SEQ_HEADER = "outbox_seq"
RELAY_LOCK_KEY = int.from_bytes(
    hashlib.sha256(b"memstream.memory_outbox.relay").digest()[:8], "big", signed=True
)


_MOVE_PUBLISHED = """
WITH moved AS (
    DELETE FROM memory_outbox WHERE seq = ANY($1::bigint[]) RETURNING seq, record_key, value, created_at
)
INSERT INTO memory_outbox_published (seq, record_key, value, created_at)
SELECT seq, record_key, value, created_at FROM moved
ON CONFLICT (seq) DO NOTHING
"""

_TRIM_APPLIED = """
WITH matched AS (
    DELETE FROM memory_outbox_applied a USING memory_outbox_published p WHERE a.seq = p.seq RETURNING a.seq
)
DELETE FROM memory_outbox_published WHERE seq IN (SELECT seq FROM matched)
"""


class AppliedOutbox:
    """Where the qdrant-projection notes the outbox seqs it applied (module doc): on the node's
    `pool`, or on its own pool to `dsn` (a worker), opened by `start` and closed by `stop`."""

    def __init__(self, pool: asyncpg.Pool | None = None, *, dsn: str | None = None) -> None:
        if (pool is None) == (dsn is None):
            raise ValueError("give either a pool or a dsn")
        self.pool = pool
        self.dsn = dsn
        self._own = False

    async def start(self) -> None:
        if self.pool is None and self.dsn is not None:
            from sinks.postgres.pool import create_pool

            self.pool = await create_pool(self.dsn, min_size=1, max_size=2)
            self._own = True

    async def stop(self) -> None:
        if self._own and self.pool is not None:
            await self.pool.close()
            self.pool = None
            self._own = False

    async def record(self, seqs: Sequence[int]) -> None:
        """Note that the records of outbox `seqs` are durably applied; the relay then forgets them.
        Idempotent."""
        if not seqs:
            return
        if self.pool is None:
            await self.start()  # its own pool could not be opened at start
        assert self.pool is not None
        await self.pool.execute(
            "INSERT INTO memory_outbox_applied (seq) SELECT unnest($1::bigint[]) ON CONFLICT DO NOTHING",
            list(seqs),
        )


def outbox_seqs(headers: Sequence[Sequence[tuple[str, bytes | None]]]) -> list[int]:
    """The `outbox_seq` header values among the records' `headers` (records without one are left out)."""
    seqs: list[int] = []
    for record_headers in headers:
        for key, value in record_headers:
            if key == OUTBOX_SEQ_HEADER and value is not None and value.isdigit():
                seqs.append(int(value))
                break
    return seqs


class OutboxDeliveryError(MemstreamError):
    """The broker did not confirm every record of a batch; the rows were kept (published again)."""

    code = "outbox_delivery_failed"


class OutboxAborted(MemstreamError):
    """The relay was stopped while a batch was unconfirmed; the rows were kept (published again)."""

    code = "outbox_aborted"


@dataclass
class OutboxStats:
    """Counters since this relay was created (published counts include republished records)."""

    published: int = 0
    batches: int = 0
    failures: int = 0
    last_error: str | None = None


@dataclass(frozen=True)
class OutboxRecord:
    seq: int
    key: bytes
    value: bytes | None


class EntriesOutboxRelay:
    """Publishes the memory outbox to `memory.entries`; see the module contract."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        settings: Settings,
        *,
        batch_size: int = 500,
        poll_interval: float = 1.0,
        max_backoff: float = 5.0,
        stall_warning_s: float = 10.0,
        registry: TopicRegistry | None = None,
        producer_overrides: Mapping[str, Any] | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        self.pool = pool
        self.settings = settings
        self.batch_size = batch_size
        self.poll_interval = poll_interval
        self.max_backoff = max_backoff
        self.stall_warning_s = stall_warning_s
        self.topic = topic_name(settings, ENTRIES_TOPIC, registry=registry)
        self.stats = OutboxStats()
        self._registry = registry
        self._overrides = dict(producer_overrides or {})
        self._producer: Producer | None = None
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._closing = False
        self._replace_producer = threading.Event()  # interrupt(): publish with a new producer

    def notify(self) -> None:
        """Wake a running relay now (normally done by Postgres NOTIFY)."""
        self._wake.set()

    async def pending(self) -> int:
        """Outbox rows not yet confirmed on the topic."""
        return int(await self.pool.fetchval("SELECT count(*) FROM memory_outbox"))

    async def run_once(self) -> int:
        """Publish one batch and delete its rows; returns how many were published (0 when the
        outbox is empty or another relay holds the lock). Raises `OutboxDeliveryError` /
        `OutboxAborted` (rows kept) or the database's errors."""
        return await self._round(None)

    async def drain(self) -> int:
        """Publish until the outbox is empty (or another relay holds the lock); returns the count."""
        total = 0
        while count := await self.run_once():
            total += count
        return total

    async def _round(self, stop: asyncio.Event | None) -> int:
        cancelled = threading.Event()

        def aborted() -> str | None:
            if cancelled.is_set():
                return "cancelled"
            if stop is not None and stop.is_set():
                return "stopped"
            if self._closing:
                return "closed"
            if self._replace_producer.is_set():
                return "producer must be replaced"
            return None

        async with self._lock, self.pool.acquire() as conn, conn.transaction():
            if not await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", RELAY_LOCK_KEY):
                return 0
            rows = await conn.fetch(
                "SELECT seq, record_key, value FROM memory_outbox ORDER BY seq LIMIT $1", self.batch_size
            )
            if not rows:
                await conn.execute(_TRIM_APPLIED)
                return 0
            batch = [
                OutboxRecord(row["seq"], row["record_key"].encode("utf-8"), encode_value(row["value"]))
                for row in rows
            ]
            producer = self._ensure_producer()
            try:
                await asyncio.to_thread(self._publish, producer, batch, aborted)
            except asyncio.CancelledError:
                cancelled.set()
                self._drop_producer()
                raise
            except MemstreamError:
                self._drop_producer()
                raise
            await conn.execute(_MOVE_PUBLISHED, [r.seq for r in batch])
            await conn.execute(_TRIM_APPLIED)
        self.stats.published += len(batch)
        self.stats.batches += 1
        return len(batch)

    def interrupt(self) -> None:
        """The broker replaced the topic: abort the round in progress, if any (its rows stay in the
        outbox), and publish the next batch with a new producer. An idempotent producer can wait
        forever for a partition that was recreated, holding the relays' lock and its transaction."""
        self._replace_producer.set()

    async def republish_unapplied(self) -> int:
        """Move every row confirmed on the topic but not applied by the projection back into the
        outbox (module doc: after the broker lost the topic); returns how many. Waits for a round
        in progress (the relays' advisory lock)."""
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", RELAY_LOCK_KEY)
            await conn.execute(_TRIM_APPLIED)
            moved = await conn.fetchval(
                """
                WITH back AS (
                    DELETE FROM memory_outbox_published RETURNING seq, record_key, value, created_at
                ), inserted AS (
                    INSERT INTO memory_outbox (seq, record_key, value, created_at)
                    SELECT seq, record_key, value, created_at FROM back
                    ON CONFLICT (seq) DO NOTHING RETURNING 1
                )
                SELECT count(*) FROM inserted
                """
            )
        self._wake.set()
        return int(moved)

    async def run(self, stop: asyncio.Event) -> None:
        """Publish until `stop` is set (see the module contract). Never raises for delivery errors."""
        listener: asyncpg.pool.PoolConnectionProxy | None = None
        watcher = asyncio.create_task(self._wake_on(stop))
        backoff = 0.1
        try:
            while not stop.is_set():
                if listener is None or not _usable(listener):
                    listener = await self._listen(listener)
                try:
                    count = await self._round(stop)
                except Exception as exc:
                    if stop.is_set():
                        break
                    self.stats.failures += 1
                    self.stats.last_error = f"{type(exc).__name__}: {exc}"
                    log.warning(
                        "outbox relay: publishing to %s failed (%s); the rows are kept, retrying in %.1fs",
                        self.topic,
                        self.stats.last_error,
                        backoff,
                    )
                    await self._sleep(stop, backoff)
                    backoff = min(backoff * 2, self.max_backoff)
                    continue
                backoff = 0.1
                if count < self.batch_size:
                    await self._sleep(stop, self.poll_interval)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            if listener is not None:
                await self._unlisten(listener)
            self._drop_producer()

    async def close(self) -> None:
        """Release the producer. Unconfirmed records are not lost: their rows were not deleted."""
        self._closing = True
        try:
            async with self._lock:
                self._drop_producer()
        finally:
            self._closing = False

    # ---- internals ---------------------------------------------------------------------------------

    def _on_notify(self, *_args: object) -> None:
        self._wake.set()

    async def _listen(
        self, previous: asyncpg.pool.PoolConnectionProxy | None
    ) -> asyncpg.pool.PoolConnectionProxy | None:
        if previous is not None:
            await self._unlisten(previous)
        try:
            conn = await self.pool.acquire()
        except Exception as exc:
            log.warning("outbox relay: cannot LISTEN (%s); polling every %.1fs", exc, self.poll_interval)
            return None
        try:
            await conn.add_listener(NOTIFY_CHANNEL, self._on_notify)
        except Exception as exc:
            log.warning("outbox relay: cannot LISTEN (%s); polling every %.1fs", exc, self.poll_interval)
            await self.pool.release(conn)
            return None
        return conn

    async def _unlisten(self, conn: asyncpg.pool.PoolConnectionProxy) -> None:
        with contextlib.suppress(Exception):
            if not conn.is_closed():
                await conn.remove_listener(NOTIFY_CHANNEL, self._on_notify)
        with contextlib.suppress(Exception):
            await self.pool.release(conn)

    async def _wake_on(self, stop: asyncio.Event) -> None:
        await stop.wait()
        self._wake.set()

    async def _sleep(self, stop: asyncio.Event, seconds: float) -> None:
        if stop.is_set():
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)
        self._wake.clear()

    def _ensure_producer(self) -> Producer:
        if self._producer is None or self._replace_producer.is_set():
            self._drop_producer()
            self._replace_producer.clear()
            self._producer = make_producer(
                self.settings,
                client_id="memstream-memory-outbox",
                registry=self._registry,
                overrides=self._overrides,
                logger=kafka_log,
            )
        return self._producer

    def _drop_producer(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            discard_producer(producer)

    def _publish(
        self, producer: Producer, batch: Sequence[OutboxRecord], aborted: Callable[[], str | None]
    ) -> None:
        """Worker thread: produce `batch`, then wait until every record is confirmed."""
        first, last = batch[0].seq, batch[-1].seq

        def stalled(pending: int, waited_s: float) -> None:
            log.warning(
                "outbox relay: %d of %d records (seq %d..%d) not confirmed by %s after %.0fs; waiting",
                pending,
                len(batch),
                first,
                last,
                self.settings.broker_bootstrap,
                waited_s,
            )

        try:
            failures = produce_and_confirm(
                producer,
                self.topic,
                [
                    OutgoingRecord(record.key, record.value, [(OUTBOX_SEQ_HEADER, str(record.seq).encode())])
                    for record in batch
                ],
                aborted=aborted,
                stall_warning_s=self.stall_warning_s,
                on_stall=stalled,
            )
        except ProduceRejected as exc:
            raise OutboxDeliveryError(
                f"outbox seq {batch[exc.index].seq} cannot be produced to {self.topic}: {exc.cause}"
            ) from None
        except DeliveryAborted as exc:
            raise OutboxAborted(
                f"outbox relay {exc.reason} with {exc.pending} of {len(batch)} records (seq "
                f"{first}..{last}) unconfirmed; they will be published again"
            ) from None
        if failures:
            raise OutboxDeliveryError(
                f"{len(failures)} of {len(batch)} records (seq {first}..{last}) were not "
                f"delivered to {self.topic}: {failures[0].error.str()} (run `memstream topics apply` if the "
                "topic is missing)"
            )


def _usable(conn: asyncpg.pool.PoolConnectionProxy) -> bool:
    """False when the listening connection closed, or the pool took it back because its server went
    away (asking a released proxy raises InterfaceError): LISTEN again on a fresh one."""
    try:
        return not conn.is_closed()
    except asyncpg.InterfaceError:
        return False
