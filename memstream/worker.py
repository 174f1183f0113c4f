"""`memstream worker NAME...`: run registered processors outside the node, owning the process's signals.

`run_worker(names, settings)` runs the registered processors `names` under one
`ProcessorSupervisor` (each restarted alone after a crash) until SIGINT or SIGTERM, and owns those
signals. They share the worker's `Engines`, as the node's share the node's:
- the thread-memory processors (`memstream.wiring.processors.THREAD_MEMORY`: thresholds, flush,
  summarizer) get a read-only view of the node's journal (`sinks.slatedb.reader.SlateJournalReader`,
  one per journal shard, each thread read from its shard's: `core.sharding.journal.ShardedFollower`;
  the node stays the only writer; their range reads wait until what a record refers to is
  visible), a Postgres pool of the worker's own and the chat model. Without Postgres, or without
  the journal (the node never opened it), the worker does not start (`WorkerCannotStart`);
- the others build their stores on first use, as before (an embedded chdb path or Qdrant Edge
  shard can be open in one process only: with embedded engines the projections stay in the node).
The processors keep their groups' journal progress in the configured Postgres
(`core.stores.progress`), as the node does; a worker without thread-memory processors that cannot
reach Postgres at start runs without (logged), which only means more is republished after a
broker loss. The worker runs on the node's event loop (`memstream.event_loop`: uvloop).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence

import asyncpg

from core.config import Settings, mask_url
from core.errors import JournalShardsMismatch, JournalUnavailable, MemstreamError
from core.sharding.journal import ShardedFollower
from memstream import event_loop
from memstream.engines import Engines
from memstream.gc_tuning import tune_gc
from memstream.shutdown import StopSignals
from memstream.wiring.processors import PROCESSORS, THREAD_MEMORY, ProcessorFactory, create_processor
from sinks.postgres.pool import create_pool
from sinks.postgres.progress import PostgresProgress
from sinks.slatedb.reader import SlateJournalReader
from streams.runtime.errors import ProcessorCrashed, UnknownProcessor
from streams.runtime.options import RuntimeOptions
from streams.runtime.processor import Processor
from streams.runtime.supervisor import ProcessorSupervisor
from streams.topics import TopicRegistry

log = logging.getLogger("memstream.runtime")

POOL_TIMEOUT_S = 10.0


class WorkerCannotStart(MemstreamError):
    """What the worker's processors need cannot be opened (the journal, Postgres); nothing ran."""

    code = "worker_cannot_start"


def run_worker(
    names: str | Sequence[str],
    settings: Settings,
    *,
    options: RuntimeOptions | None = None,
    registry: TopicRegistry | None = None,
    processors: Mapping[str, ProcessorFactory] | None = None,
) -> None:
    """Run the registered processors `names` until SIGINT/SIGTERM (`memstream worker NAME...`).

    They run under one `ProcessorSupervisor`, like the node's processors: a crash restarts the
    processor with backoff instead of ending the worker. `processors` defaults to the registered
    ones (`memstream.wiring.processors.PROCESSORS`).
    Raises `UnknownProcessor` (listing the registered names) before connecting to anything,
    `WorkerCannotStart` when the journal or Postgres the thread-memory processors need cannot be
    opened (module doc), and `ProcessorCrashed` when a processor cannot run here at all
    (`ProcessorCannotRun` from its `start()`).
    """
    wanted = [names] if isinstance(names, str) else list(dict.fromkeys(names))
    if not wanted:
        raise ValueError("run_worker needs at least one processor name")
    factories = PROCESSORS if processors is None else processors
    for name in wanted:
        if name not in factories:
            raise UnknownProcessor(name, list(factories))
    event_loop.run(_run_until_signal(wanted, factories, settings, options, registry))


async def _run_until_signal(
    names: list[str],
    factories: Mapping[str, ProcessorFactory],
    settings: Settings,
    options: RuntimeOptions | None,
    registry: TopicRegistry | None,
) -> None:
    stop = asyncio.Event()
    failures: list[ProcessorCrashed] = []

    def failed(error: ProcessorCrashed) -> None:
        failures.append(error)
        stop.set()

    thread_memory = [name for name in names if name in THREAD_MEMORY]
    pool = await _open_pool(settings, names, required=bool(thread_memory))
    journal: ShardedFollower[SlateJournalReader] | None = None
    try:
        if thread_memory:
            journal = await open_journal_views(settings)
        engines = Engines(settings, journal=journal, pool=pool)
        tune_gc()  # as the node does (memstream.gc_tuning)

        def factory(name: str) -> Callable[[], Processor]:
            return lambda: create_processor(name, settings, registry=factories, engines=engines)

        supervisor = ProcessorSupervisor(
            {name: factory(name) for name in names},
            settings,
            options=options,
            registry=registry,
            on_failed=failed,
            progress=None if pool is None else PostgresProgress(pool),
        )
        # Python-level handlers, never lost on a busy loop, with a deadline (memstream.shutdown)
        signals = StopSignals(stop.set, deadline_s=settings.stop_deadline_s)
        signals.install(asyncio.get_running_loop())
        try:
            try:
                log.info("worker runs processor(s) %s", ", ".join(names))
                await supervisor.run(stop)
            finally:
                await engines.close()
        finally:
            signals.close()  # the orderly stop is over: its watchdog must not end the caller later
    finally:
        if journal is not None:
            await journal.close()
        if pool is not None:
            await pool.close()
    if failures:
        raise failures[0]
    log.info("processor(s) %s stopped", ", ".join(names))


async def _open_pool(settings: Settings, names: list[str], *, required: bool) -> asyncpg.Pool | None:
    """The worker's Postgres pool; None (logged) when it is not `required` and cannot be reached."""
    try:
        return await asyncio.wait_for(
            create_pool(settings.postgres, min_size=1, max_size=6 if required else 2), POOL_TIMEOUT_S
        )
    except Exception as exc:
        if required:
            raise WorkerCannotStart(
                f"processor(s) {', '.join(names)} need Postgres ({mask_url(settings.postgres)}), "
                f"which is not reachable: {exc!r}"
            ) from exc
        log.warning(
            "processor(s) %s run without stored journal progress: Postgres (%s) is not reachable: %r",
            ", ".join(names),
            mask_url(settings.postgres),
            exc,
        )
        return None


async def open_journal_views(settings: Settings) -> ShardedFollower[SlateJournalReader]:
    """Read-only views of every shard of the node's journal (module doc); WorkerCannotStart when one
    cannot be opened (those opened are closed again)."""
    shards = settings.journal_shards

    async def open_view(shard: int) -> SlateJournalReader:
        url = settings.shard_journal(shard)
        try:
            return await SlateJournalReader.open(
                url,
                s3=settings.s3,
                poll_interval_ms=settings.journal_reader_poll_ms,
                shard=shard,
                shards=shards,
            )
        except (JournalUnavailable, JournalShardsMismatch) as exc:
            raise WorkerCannotStart(
                f"the thread-memory processors read the node's journal at {mask_url(url)}, which "
                f"cannot be opened (start the node first): {exc}"
            ) from exc

    results = await asyncio.gather(*(open_view(k) for k in range(shards)), return_exceptions=True)
    views = {k: r for k, r in enumerate(results) if isinstance(r, SlateJournalReader)}
    failures = [r for r in results if isinstance(r, BaseException)]
    if failures:
        for view in views.values():
            await view.close()
        raise failures[0]
    return ShardedFollower(shards, views)
