"""`memstream worker NAME`: run one registered processor alone, owning the process's signals.

`run_worker(name, settings)` runs the registered processor `name` alone under a
`ProcessorSupervisor` (restarted after a crash) until SIGINT or SIGTERM, and owns those signals.
It keeps the group's journal progress in the configured Postgres (`core.stores.progress`), as the
node does; when Postgres cannot be reached at start it runs without (logged), which only means
more is republished after a broker loss.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from core.config import Settings, mask_url
from memstream.shutdown import StopSignals
from memstream.wiring.processors import PROCESSORS, ProcessorFactory, create_processor
from sinks.postgres.pool import create_pool
from sinks.postgres.progress import PostgresProgress
from streams.runtime.errors import ProcessorCrashed, UnknownProcessor
from streams.runtime.options import RuntimeOptions
from streams.runtime.processor import Processor
from streams.runtime.supervisor import ProcessorSupervisor
from streams.topics import TopicRegistry

log = logging.getLogger("memstream.runtime")


def run_worker(
    name: str,
    settings: Settings,
    *,
    options: RuntimeOptions | None = None,
    registry: TopicRegistry | None = None,
    processors: Mapping[str, ProcessorFactory] | None = None,
) -> None:
    """Run the registered processor `name` alone until SIGINT/SIGTERM (`memstream worker NAME`).

    It runs under a `ProcessorSupervisor`, like the node's processors: a crash restarts it with
    backoff instead of ending the worker. `processors` defaults to the registered ones
    (`memstream.wiring.processors.PROCESSORS`).
    Raises `UnknownProcessor` (listing the registered names) before connecting to anything, and
    `ProcessorCrashed` when the processor cannot run here at all (`ProcessorCannotRun` from its
    `start()`, e.g. a processor that needs the node).
    """
    factories = PROCESSORS if processors is None else processors
    if name not in factories:
        raise UnknownProcessor(name, list(factories))

    def factory() -> Processor:
        return create_processor(name, settings, registry=factories)

    asyncio.run(_run_until_signal(name, factory, settings, options, registry))


async def _run_until_signal(
    name: str,
    factory: Callable[[], Processor],
    settings: Settings,
    options: RuntimeOptions | None,
    registry: TopicRegistry | None,
) -> None:
    stop = asyncio.Event()
    failures: list[ProcessorCrashed] = []

    def failed(error: ProcessorCrashed) -> None:
        failures.append(error)
        stop.set()

    pool = None
    try:
        pool = await asyncio.wait_for(create_pool(settings.postgres, min_size=1, max_size=2), 10)
    except Exception as exc:
        log.warning(
            "processor %s runs without stored journal progress: Postgres (%s) is not reachable: %r",
            name,
            mask_url(settings.postgres),
            exc,
        )
    supervisor = ProcessorSupervisor(
        {name: factory},
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
            await supervisor.run(stop)
        finally:
            if pool is not None:
                await pool.close()
    finally:
        signals.close()  # the orderly stop is over: its watchdog must not end the caller later
    if failures:
        raise failures[0]
    log.info("processor %s stopped", name)
