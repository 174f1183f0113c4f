"""The entries outbox relay: publishes `memory_outbox` rows to `memory.entries`, in seq order.

Contract:
- Every committed change of an entry wrote one `memory_outbox` row in its own transaction
  (`sinks.postgres.memory_writes.MemoryWriteTx.publish`), so a committed change is never lost: its row
  stays in the table until the broker confirmed it. The relay reaches the outbox through
  `core.stores.outbox.EntriesOutbox` (in Postgres: `sinks.postgres.outbox`).
- Each round (`run_once`) claims up to `batch_size` rows in seq order (`EntriesOutbox.claim`: one
  Postgres transaction under an advisory lock, so at most one relay per database publishes at a
  time; others find the lock taken and do nothing), produces them all (key = `record_key`,
  value = the EntryEvent JSON, or no value for a tombstone) with an idempotent producer, waits
  until the broker confirmed EVERY one (`streams.relays.base.RelayLoop._publish`), and only then
  moves those rows to `memory_outbox_published` and commits. A crash or a delivery
  failure before the commit leaves the rows in place: they are published again (at-least-once;
  duplicates are a suffix of the outbox republished in order). Each record carries its row's seq
  in the header `outbox_seq`.
- Broker loss: the qdrant-projection records the `outbox_seq`s it applied
  (`core.stores.outbox.AppliedOutbox.record`, into `memory_outbox_applied`); every round deletes
  the rows found in both tables. So `memory_outbox_published` holds what the broker confirmed
  and the projection has not applied yet. When the broker lost `memory.entries`
  (`streams.topic_sync`), `republish_unapplied` moves those rows back into the outbox (same
  seqs, so before newer rows): they are published again and the projection catches up by itself.
- Per-entry order: the rows of one entry are in its commit order (each write locks the entry
  row before inserting its outbox row), one entry = one key = one partition, and the idempotent
  producer keeps produce order per partition. So the last record of a key is its latest state.
- `run(stop)` loops until `stop` is set: woken by Postgres `LISTEN memstream_memory_outbox` (a
  trigger NOTIFYs when a transaction that wrote outbox rows commits), with polling every
  `poll_interval` as a fallback (and when the listening connection is lost). On a delivery or
  database error it logs, backs off exponentially up to `max_backoff`, and retries
  (`streams.relays.base.RelayLoop`; confluent-kafka calls run in a worker thread).

Logs: `memstream.memory.outbox` (rounds, retries), `memstream.memory.outbox.kafka` (librdkafka).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from core.config import Settings
from core.stores.outbox import EntriesOutbox, OutboxListener
from streams.codecs.memory_entries import encode_value
from streams.producer import DeliveryFailure, OutgoingRecord
from streams.relays.base import Abort, Pace, RelayAborted, RelayDeliveryError, RelayLoop
from streams.topics import TopicRegistry, topic_name

log = logging.getLogger("memstream.memory.outbox")
kafka_log = logging.getLogger("memstream.memory.outbox.kafka")

ENTRIES_TOPIC = "memory.entries"
OUTBOX_SEQ_HEADER = "outbox_seq"


def outbox_seqs(headers: Sequence[Sequence[tuple[str, bytes | None]]]) -> list[int]:
    """The `outbox_seq` header values among the records' `headers` (records without one are left out)."""
    seqs: list[int] = []
    for record_headers in headers:
        for key, value in record_headers:
            if key == OUTBOX_SEQ_HEADER and value is not None and value.isdigit():
                seqs.append(int(value))
                break
    return seqs


class OutboxDeliveryError(RelayDeliveryError):
    """The broker did not confirm every record of a batch; the rows were kept (published again)."""

    code = "outbox_delivery_failed"


class OutboxAborted(RelayAborted):
    """The relay was stopped while a batch was unconfirmed; the rows were kept (published again)."""

    code = "outbox_aborted"


class EntriesOutboxRelay(RelayLoop):
    """Publishes the memory outbox to `memory.entries`; see the module contract."""

    delivery_error = OutboxDeliveryError
    aborted_error = OutboxAborted

    def __init__(
        self,
        outbox: EntriesOutbox,
        settings: Settings,
        *,
        batch_size: int = 500,
        poll_interval: float = 1.0,
        max_backoff: float = 5.0,
        stall_warning_s: float = 10.0,
        registry: TopicRegistry | None = None,
        producer_overrides: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(
            settings,
            topic_name(settings, ENTRIES_TOPIC, registry=registry),
            Pace(batch_size, poll_interval, max_backoff, stall_warning_s),
            client_id="memstream-memory-outbox",
            registry=registry,
            producer_overrides=producer_overrides,
            name="outbox relay",
            noun="records",
            log=log,
            kafka_log=kafka_log,
            stall_message="outbox relay: %d of %d records (seq %d..%d) not confirmed by %s after %.0fs; "
            "waiting",
        )
        self.outbox = outbox
        self.poll_interval = poll_interval
        self._listener: OutboxListener | None = None

    async def pending(self) -> int:
        """Outbox rows not yet confirmed on the topic."""
        return await self.outbox.pending()

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

    async def _round_locked(self, abort: Abort) -> int:
        async with self.outbox.claim(self.batch_size) as batch:
            if batch is None:
                return 0
            if batch.rows:
                records = [
                    OutgoingRecord(
                        row.record_key.encode("utf-8"),
                        encode_value(row.value),
                        [(OUTBOX_SEQ_HEADER, str(row.seq).encode())],
                    )
                    for row in batch.rows
                ]
                async with self._producing(abort) as producer:
                    await asyncio.to_thread(
                        self._publish, producer, records, [r.seq for r in batch.rows], abort
                    )
            await batch.published()
            return len(batch.rows)

    def interrupt(self) -> None:
        """The broker replaced the topic: abort the round in progress, if any (its rows stay in the
        outbox), and publish the next batch with a new producer. An idempotent producer can wait
        forever for a partition that was recreated, holding the relays' lock and its transaction."""
        super().interrupt()

    async def republish_unapplied(self) -> int:
        """Move every row confirmed on the topic but not applied by the projection back into the
        outbox (module doc: after the broker lost the topic); returns how many. Waits for a round
        in progress (the relays' advisory lock)."""
        moved = await self.outbox.republish_unapplied()
        self._wake.set()
        return moved

    async def run(self, stop: asyncio.Event) -> None:
        """Publish until `stop` is set (see the module contract). Never raises for delivery errors."""
        await super().run(stop)

    # ---- the loop's hooks ------------------------------------------------------------------------

    async def _before_round(self) -> None:
        """LISTEN (again, when the listening connection was lost); polling meanwhile."""
        if self._listener is not None and self._listener.usable():
            return
        await self._after_run()
        try:
            self._listener = await self.outbox.listen(self.notify)
        except Exception as exc:
            log.warning("outbox relay: cannot LISTEN (%s); polling every %.1fs", exc, self.poll_interval)

    async def _after_failure(self, exc: Exception) -> None:
        return None

    async def _after_run(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            await listener.close()

    def _log_retry(self, backoff: float) -> None:
        log.warning(
            "outbox relay: publishing to %s failed (%s); the rows are kept, retrying in %.1fs",
            self.topic,
            self.stats.last_error,
            backoff,
        )

    def _describe(self, seq: int, record: OutgoingRecord) -> str:
        return f"outbox seq {seq}"

    def _undelivered(
        self, failures: Sequence[DeliveryFailure], total: int, first: int, last: int
    ) -> RelayDeliveryError:
        return OutboxDeliveryError(
            f"{len(failures)} of {total} records (seq {first}..{last}) were not "
            f"delivered to {self.topic}: {failures[0].error.str()} (run `memstream topics apply` if the "
            "topic is missing)"
        )
