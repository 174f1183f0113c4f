"""One faust App per processor, and the loop that feeds it batches and commits after effects.

`build_app(processor, settings)` configures a faust App for a processor: app id = consumer group
`<topic_prefix>memstream.<name>`, the broker from `settings.broker_bootstrap`, no web server, no
tables, no topic creation (topics come from topics.yaml via `streams.admin.apply_topics`; its
consumers do not create them either, and read metadata every `metadata_max_age_s` to find a topic
declared again), new groups start at the earliest offset, shorter session timeouts, and a consumer
that commits only processed offsets (`streams.runtime.consumer`). The processor's logic is not
bound to the app by a decorator: `ProcessorRuntime` attaches one agent that runs the batch loop
below.

Batch loop (one agent, concurrency 1): take up to `batch_size` events (the processor's own
`batch_size`/`batch_wait_s` when it sets them, else the run's options) without acking them
(`stream.noack_take`), run them through `run_batch` (outages waited out, poison records isolated
and dead-lettered), then mark them processed, ack them and commit (at once; if a background commit
is under way, the next one, within `commit_interval_s`, takes them). A batch that cannot be
finished (`ProcessorCrashed`: e.g. the dead-letter limit) is never acked: the runtime records the
crash (`ProcessorRuntime.crashed`) and stops consuming; the owner stops the app (and a
`ProcessorSupervisor` restarts it). A batch abandoned because the runtime stops is not acked either.

With a `ProgressStore` (`progress=`), the runtime also keeps the group's journal progress outside
the broker (`streams.runtime.progress`): records the group already processed (after a republish)
are not handed to the processor again, and after each committed batch its progress is stored.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import faust
from faust.streams import Stream
from faust.types import EventT, StreamT

from core.config import Settings
from core.stores.progress import ProgressStore
from streams.runtime.batch import run_batch
from streams.runtime.consumer import CommitGuardConsumer, CommitGuardTransport
from streams.runtime.dlq import DeadLetterLimit, DeadLetterQueue
from streams.runtime.errors import BatchAbandoned, ProcessorCrashed
from streams.runtime.options import RuntimeOptions
from streams.runtime.processor import Processor, Record, group_id
from streams.runtime.progress import ProgressTracker
from streams.topics import TopicRegistry, topic_name

log = logging.getLogger("memstream.runtime")

PROGRESS_SCOPE_TIMEOUT_S = 10.0
"""How long a start waits for the processor's `progress_scope()` (its store may be down)."""


def build_app(processor: Processor, settings: Settings, options: RuntimeOptions | None = None) -> faust.App:
    """A configured faust App for `processor` (module doc), with no agent attached yet."""
    opts = options or RuntimeOptions()
    app_id = group_id(processor.name, settings)
    app = faust.App(
        app_id,
        broker=[f"kafka://{host}" for host in settings.broker_bootstrap.split(",")],
        autodiscover=False,
        datadir=str(settings.data_path / "faust" / app_id),
        store="memory://",
        web_enabled=False,
        topic_allow_declare=False,
        topic_disable_leader=True,
        consumer_auto_offset_reset="earliest",
        broker_session_timeout=opts.session_timeout_s,
        broker_heartbeat_interval=opts.heartbeat_interval_s,
        broker_commit_interval=opts.commit_interval_s,
        consumer_metadata_max_age_ms=round(opts.metadata_max_age_s * 1000),
        # a stop or a rebalance must not wait for a batch that failed for good (never acked)
        stream_wait_empty=False,
        key_serializer="raw",
        value_serializer="raw",
    )
    app.finalize()
    app.transport = CommitGuardTransport(app.conf.broker_consumer, app)
    return app


def record_of(event: EventT[Any]) -> Record:
    """The `Record` of a faust event (its raw message: key, value and headers as bytes)."""
    message = event.message
    headers = message.headers or ()
    pairs = list(headers.items()) if isinstance(headers, Mapping) else list(headers)
    return Record(
        topic=message.topic,
        partition=message.partition,
        offset=message.offset,
        key=message.key,
        value=message.value,
        headers=tuple((str(k), _header_bytes(v)) for k, v in pairs),
        timestamp_ms=None if message.timestamp is None else round(message.timestamp * 1000),
    )


def _header_bytes(value: object) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    raise TypeError(f"unexpected header value {value!r}")


class ProcessorRuntime:
    """Runs one processor in its own faust App inside the current event loop.

    `start()` opens the processor, the dead-letter producer and the app (it returns once the app
    started; the consumer joins its group in the background); `crashed` is set when the processor
    stopped for good (`error` says why); `stop()` lets the batch in progress finish (up to
    `drain_timeout_s`; a batch failing or waiting out an outage is abandoned at once), then stops
    the app, the processor and the producer. A runtime is started at most once. `outage` is set
    while the batch in progress waits for an unavailable store: (since, error text), by
    `time.monotonic()`. `dead_letter_limit` (optional) is shared by the runtimes of one processor, so
    that restarts do not reset the dead-letter rate limit.
    """

    def __init__(
        self,
        processor: Processor,
        settings: Settings,
        options: RuntimeOptions | None = None,
        *,
        registry: TopicRegistry | None = None,
        dead_letter_limit: DeadLetterLimit | None = None,
        progress: ProgressStore | None = None,
    ) -> None:
        self.processor = processor
        self.options = options or RuntimeOptions()
        self.group_id = group_id(processor.name, settings)
        self.progress = None if progress is None else ProgressTracker(self.group_id, progress)
        self.source_topics = [
            topic_name(settings, name, registry=registry) for name in processor.source_topics
        ]
        self.dead_letters = DeadLetterQueue(
            processor.name,
            settings,
            limit=(
                dead_letter_limit
                if dead_letter_limit is not None
                else DeadLetterLimit(self.options.dlq_limit, self.options.dlq_window_s)
            ),
            ack_timeout_s=self.options.dlq_ack_timeout_s,
            registry=registry,
        )
        self.app = build_app(processor, settings, self.options)
        channel = self.app.topic(*self.source_topics, allow_empty=True)
        self.app.agent(channel, name=processor.name, concurrency=1)(self._consume)
        self.crashed = asyncio.Event()
        self.error: ProcessorCrashed | None = None
        self.batches = 0
        self.outage: tuple[float, str] | None = None
        self._stopping = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._draining = False
        self._started = False
        self._watcher: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self._started:
            raise RuntimeError(f"processor {self.processor.name!r} runtime was already started")
        self._started = True
        # faust creates its (here empty) data directories without their parents
        Path(self.app.conf.datadir).parent.mkdir(parents=True, exist_ok=True)
        await self.processor.start()
        if self.progress is not None:
            await self.progress.load(await self._progress_scope())
        await self.app.start()
        self._watcher = asyncio.create_task(self._watch_app(), name=f"memstream.{self.processor.name}.watch")
        log.info(
            "processor %s consuming %s as group %s", self.processor.name, self.source_topics, self.group_id
        )

    async def _progress_scope(self) -> str | None:
        """The processor's `progress_scope()`. When it cannot be learnt (its store is down), the
        stored progress may belong to another store: the tracker is disabled for this run."""
        try:
            return await asyncio.wait_for(self.processor.progress_scope(), PROGRESS_SCOPE_TIMEOUT_S)
        except Exception as exc:
            log.warning(
                "processor %s: cannot tell which store its progress belongs to (%r): running without "
                "stored progress (nothing is skipped or stored) until it restarts",
                self.processor.name,
                exc,
            )
            if self.progress is not None:
                self.progress.disabled = True
            return None

    async def stop(self) -> None:
        """Finish the batch in progress (bounded), then stop consuming and close everything. The
        processor is told first (`Processor.stopping`), so a batch blocked on an unreachable
        system is abandoned (redelivered later) instead of holding the stop for the drain timeout."""
        self._draining = True
        self._stopping.set()
        self.processor.stopping()
        if self._watcher is not None:
            self._watcher.cancel()
        try:
            await asyncio.wait_for(self._idle.wait(), self.options.drain_timeout_s)
        except TimeoutError:
            log.warning(
                "processor %s: batch still running after drain timeout, cancelling it", self.processor.name
            )
        try:
            await self.app.stop()
        finally:
            try:
                await self.processor.stop()
            finally:
                await self.dead_letters.close()

    async def _watch_app(self) -> None:
        """faust crashes the app on its own errors (e.g. a failed commit): surface that as a crash."""
        while not self.crashed.is_set():
            if self.app.crashed:
                reason = self.app.crash_reason
                self._crash(reason if reason is not None else RuntimeError("faust app crashed"))
                return
            await asyncio.sleep(0.5)

    async def _consume(self, stream: StreamT[Any]) -> None:
        try:
            processor = self.processor
            size = processor.batch_size if processor.batch_size is not None else self.options.batch_size
            wait = processor.batch_wait_s if processor.batch_wait_s is not None else self.options.batch_wait_s
            async for events in cast(Stream[Any], stream).noack_take(size, within=wait):
                if self._draining or self.crashed.is_set():
                    await _forever()  # stopping: leave the batch uncommitted for redelivery
                self._idle.clear()
                try:
                    await self._handle(stream, events)
                finally:
                    self._idle.set()
        except asyncio.CancelledError:
            raise
        except BatchAbandoned:  # stopping: the batch stays uncommitted for redelivery
            await _forever()
        except Exception as exc:  # never let faust restart the agent past an unacked batch
            self._crash(exc)
            await _forever()

    async def _handle(self, stream: StreamT[Any], events: Sequence[EventT[Any]]) -> None:
        records = [record_of(event) for event in events]
        todo = records
        if self.progress is not None:
            todo = [record for record in records if not self.progress.skippable(record)]
            self.progress.skipped += len(records) - len(todo)
        if todo:
            await run_batch(
                self.processor,
                todo,
                self.dead_letters,
                self.options,
                stopping=self._stopping,
                on_outage=self._on_outage,
            )
        consumer = self.app.consumer
        assert isinstance(consumer, CommitGuardConsumer)
        consumer.mark_processed(event.message for event in events)
        for event in events:
            await stream.ack(event)
        await consumer.commit()
        self.batches += 1
        if self.progress is not None:
            self.progress.advance(records)
            await self.progress.checkpoint()

    def _on_outage(self, error: BaseException | None) -> None:
        if error is None:
            self.outage = None
        else:
            since = self.outage[0] if self.outage is not None else time.monotonic()
            self.outage = (since, f"{type(error).__name__}: {error}")

    def _crash(self, exc: BaseException) -> None:
        if isinstance(exc, ProcessorCrashed):
            error = exc
        else:
            error = ProcessorCrashed(self.processor.name, f"runtime error: {exc!r}")
            error.__cause__ = exc
        log.error(
            "processor %s stopped without committing its batch: %s",
            self.processor.name,
            error.message,
            exc_info=error.__cause__,
        )
        self.error = error
        self.crashed.set()


async def _forever() -> None:
    await asyncio.Event().wait()
