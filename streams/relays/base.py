"""What every relay shares: publish batches of a durable source to one topic, in order.

Contract (`RelayLoop`; the subclasses say what their source is and how it advances):
- A round (`run_once`) runs under the relay's lock: the subclass reads a batch after its durable
  position, publishes it with `_publish` (in a worker thread: confluent-kafka calls are
  synchronous, the event loop is never blocked), and advances its position only after the broker
  confirmed EVERY record (`streams.producer.produce_and_confirm`; records do not expire while the
  broker is away). A delivery failure raises the subclass's `RelayDeliveryError`, an aborted wait
  its `RelayAborted`; the position is unchanged and the batch is published again
  (at-least-once). After either, and after a cancelled round, the next round uses a new producer
  (new producer id).
- `interrupt()` aborts the round in progress and replaces the producer (the broker replaced the
  topic); `close()` aborts it and releases the producer; `notify()` ends an idle sleep now.
- `run(stop)` loops until `stop` is set: after a full batch it goes on at once, otherwise it
  sleeps `Pace.idle_s` (or until notified); on an error it logs (`_log_retry`), backs off (0.1 s
  doubling up to `Pace.max_backoff`) and retries. It raises only what `_fatal` says must stop it.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, Producer

from core.config import Settings
from core.errors import MemstreamError
from streams.producer import (
    DeliveryAborted,
    DeliveryFailure,
    OutgoingRecord,
    ProduceRejected,
    discard_producer,
    make_producer,
    produce_and_confirm,
)
from streams.topics import TopicRegistry


class RelayDeliveryError(MemstreamError):
    """The broker did not confirm every record of a batch; the source (cursor, rows) did not advance.

    `topic_missing` is True when the cause is that the topic does not exist on the broker.
    """

    code = "relay_delivery_failed"

    def __init__(self, message: str, *, topic_missing: bool = False) -> None:
        super().__init__(message)
        self.topic_missing = topic_missing


class RelayAborted(MemstreamError):
    """The relay was stopped while a batch was unconfirmed; the source did not advance."""

    code = "relay_aborted"


@dataclass(frozen=True)
class Pace:
    """How a relay publishes: up to `batch_size` records a round; after a short round it sleeps
    `idle_s` (or until notified); after a failure it backs off up to `max_backoff` seconds; a
    batch unconfirmed for `stall_warning_s` is logged (and again every `stall_warning_s`)."""

    batch_size: int
    idle_s: float
    max_backoff: float
    stall_warning_s: float


@dataclass
class RelayStats:
    """Counters since this relay was created (published counts include republished ones)."""

    published: int = 0
    batches: int = 0
    failures: int = 0
    rewinds: int = 0
    last_error: str | None = None


class Abort:
    """Why the round in progress must stop waiting for the broker (`abort()`: None while it need
    not); given to `produce_and_confirm`, which asks it from the worker thread."""

    def __init__(self, relay: RelayLoop, stop: asyncio.Event | None) -> None:
        self.cancelled = threading.Event()
        self._relay = relay
        self._stop = stop

    def __call__(self) -> str | None:
        if self.cancelled.is_set():
            return "cancelled"
        if self._stop is not None and self._stop.is_set():
            return "stopped"
        if self._relay._closing:
            return "closed"
        if self._relay._producer_broken.is_set():
            return "producer must be replaced"
        return None


class RelayLoop(abc.ABC):
    """Publishes batches of a durable source to `topic`; see the module contract."""

    delivery_error: type[RelayDeliveryError] = RelayDeliveryError
    aborted_error: type[RelayAborted] = RelayAborted

    def __init__(
        self,
        settings: Settings,
        topic: str,
        pace: Pace,
        *,
        registry: TopicRegistry | None,
        producer_overrides: Mapping[str, Any] | None,
        client_id: str,
        log: logging.Logger,
        kafka_log: logging.Logger,
        name: str,
        noun: str,
        stall_message: str,
        log_args: tuple[object, ...] = (),
        error_cb: Callable[[KafkaError], None] | None = None,
    ) -> None:
        """`name` and `noun` ("relay X", "messages") word the errors. `log` gets the relay's lines,
        `stall_message % (*log_args, pending, total, first seq, last seq, bootstrap, waited_s)`
        while a batch waits for the broker; `kafka_log` librdkafka's; `error_cb` is the producer's
        (librdkafka errors)."""
        if pace.batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        self.settings = settings
        self.topic = topic
        self.batch_size = pace.batch_size
        self.max_backoff = pace.max_backoff
        self.stall_warning_s = pace.stall_warning_s
        self.stats = RelayStats()
        self._idle_s = pace.idle_s
        self._client_id = client_id
        self._registry = registry
        self._overrides = dict(producer_overrides or {})
        if error_cb is not None:
            self._overrides = {"error_cb": error_cb, **self._overrides}
        self._name = name
        self._noun = noun
        self._log = log
        self._kafka_log = kafka_log
        self._stall_message = stall_message
        self._log_args = log_args
        self._producer: Producer | None = None
        self._producer_broken = threading.Event()  # fatal error or interrupt(): use a new producer
        self._closing = False
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()

    # ---- the subclass's part ---------------------------------------------------------------------

    @abc.abstractmethod
    async def _round_locked(self, abort: Abort) -> int:
        """Under the relay's lock: read a batch, publish it (`_producing` + `_publish`), advance the
        source; returns how many records were published (0: nothing to do)."""

    @abc.abstractmethod
    def _log_retry(self, backoff: float) -> None:
        """Log that a round failed (`stats.last_error`) and is retried in `backoff` seconds."""

    @abc.abstractmethod
    def _describe(self, seq: int, record: OutgoingRecord) -> str:
        """The record of source `seq` in an error message (the producer refused it outright)."""

    @abc.abstractmethod
    def _undelivered(
        self, failures: Sequence[DeliveryFailure], total: int, first: int, last: int
    ) -> RelayDeliveryError:
        """The error for a batch of which the broker refused `failures`."""

    def _fatal(self, exc: Exception) -> bool:
        """True when `run` must stop and raise `exc` (log why first)."""
        return False

    @abc.abstractmethod
    async def _after_failure(self, exc: Exception) -> None:
        """Called by `run` after a failed round was logged, before the back-off."""

    @abc.abstractmethod
    async def _before_round(self) -> None:
        """Called by `run` before each round."""

    @abc.abstractmethod
    async def _after_run(self) -> None:
        """Called when `run` ends, before the producer is released."""

    # ---- publishing --------------------------------------------------------------------------------

    def notify(self) -> None:
        """Wake a running relay now (skips the rest of its idle sleep)."""
        self._wake.set()

    def interrupt(self) -> None:
        """Abort the round in progress, if any (its batch stays unconfirmed and is published
        again), and publish the next batch with a new producer."""
        self._producer_broken.set()

    async def _round(self, stop: asyncio.Event | None) -> int:
        async with self._lock:
            count = await self._round_locked(Abort(self, stop))
        if count:
            self.stats.published += count
            self.stats.batches += 1
        return count

    async def run(self, stop: asyncio.Event) -> None:
        """Publish until `stop` is set (see the module contract)."""
        watcher = asyncio.create_task(self._wake_on(stop))
        backoff = 0.1
        try:
            while not stop.is_set():
                await self._before_round()
                try:
                    count = await self._round(stop)
                except Exception as exc:
                    if self._fatal(exc):
                        raise
                    if stop.is_set():
                        break
                    self.stats.failures += 1
                    self.stats.last_error = f"{type(exc).__name__}: {exc}"
                    self._log_retry(backoff)
                    await self._after_failure(exc)
                    await self._sleep(stop, backoff)
                    backoff = min(backoff * 2, self.max_backoff)
                    continue
                backoff = 0.1
                if count < self.batch_size:
                    await self._sleep(stop, self._idle_s)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            await self._after_run()
            self._drop_producer()

    async def close(self) -> None:
        """Release the producer. Unconfirmed records are not lost: the source did not advance."""
        self._closing = True
        try:
            async with self._lock:
                self._drop_producer()
        finally:
            self._closing = False

    # ---- for the subclasses ----------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _producing(self, abort: Abort) -> AsyncIterator[Producer]:
        """The producer for a round; after a failed or cancelled round it is dropped (a fresh one,
        with a new producer id, for the retry)."""
        producer = self._ensure_producer()
        try:
            yield producer
        except asyncio.CancelledError:
            abort.cancelled.set()  # the worker thread stops waiting within 0.2 s
            self._drop_producer()
            raise
        except MemstreamError:
            self._drop_producer()
            raise

    def _publish(
        self, producer: Producer, records: Sequence[OutgoingRecord], seqs: Sequence[int], abort: Abort
    ) -> None:
        """Worker thread: produce `records` (whose source seqs are `seqs`), then wait until every
        one is confirmed."""
        first, last = seqs[0], seqs[-1]

        def stalled(pending: int, waited_s: float) -> None:
            self._log.warning(
                self._stall_message,
                *self._log_args,
                *(pending, len(records), first, last, self.settings.broker_bootstrap, waited_s),
            )

        try:
            failures = produce_and_confirm(
                producer,
                self.topic,
                records,
                aborted=abort,
                stall_warning_s=self.stall_warning_s,
                on_stall=stalled,
            )
        except ProduceRejected as exc:
            raise self.delivery_error(
                f"{self._describe(seqs[exc.index], records[exc.index])} cannot be produced to "
                f"{self.topic}: {exc.cause}"
            ) from None
        except DeliveryAborted as exc:
            raise self.aborted_error(
                f"{self._name} {exc.reason} with {exc.pending} of {len(records)} {self._noun} "
                f"(seq {first}..{last}) unconfirmed; they will be published again"
            ) from None
        if failures:
            raise self._undelivered(failures, len(records), first, last)

    def _ensure_producer(self) -> Producer:
        if self._producer is None or self._producer_broken.is_set():
            self._drop_producer()
            self._producer_broken.clear()
            self._producer = make_producer(
                self.settings,
                client_id=self._client_id,
                registry=self._registry,
                overrides=self._overrides,
                logger=self._kafka_log,
            )
        return self._producer

    def _drop_producer(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            discard_producer(producer)

    async def _wake_on(self, stop: asyncio.Event) -> None:
        await stop.wait()
        self._wake.set()

    async def _sleep(self, stop: asyncio.Event, seconds: float) -> None:
        if stop.is_set():
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)
        self._wake.clear()
