"""Run processors: several inside the caller's event loop (the embedded node), or one alone (CLI).

`run_processors(processors, settings, stop)` is for code that owns the event loop and the signals
and wants a crash to end the run (tests, benches): it starts one faust App per processor in the
running loop (no `app.main()`, no `mode.Worker`, no signal handlers), returns after `stop` is set
and every app stopped, and raises `ProcessorCrashed` as soon as one processor crashed (after
stopping the others). The node keeps its processors running instead (`ProcessorSupervisor`).

`run_worker(name, settings)` is what `memstream worker NAME` calls: it runs the registered
processor `name` alone under a `ProcessorSupervisor` (restarted after a crash) until SIGINT or
SIGTERM, and owns those signals. It keeps the group's journal progress in the configured Postgres
(`streams.runtime.progress`), as the node does; when Postgres cannot be reached at start it runs
without (logged), which only means more is republished after a broker loss.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from core.config import Settings, mask_url
from core.stores.progress import ProgressStore
from memstream.shutdown import StopSignals
from streams.runtime.app import ProcessorRuntime
from streams.runtime.errors import ProcessorCrashed, UnknownProcessor
from streams.runtime.options import RuntimeOptions
from streams.runtime.processor import Processor
from streams.runtime.supervisor import ProcessorSupervisor
from streams.topics import TopicRegistry

if TYPE_CHECKING:
    from memstream.wiring.processors import ProcessorFactory

log = logging.getLogger("memstream.runtime")


async def run_processors(
    processors: Sequence[Processor],
    settings: Settings,
    stop: asyncio.Event,
    *,
    options: RuntimeOptions | None = None,
    registry: TopicRegistry | None = None,
    started: asyncio.Event | None = None,
    progress: ProgressStore | None = None,
) -> None:
    """Run `processors` in the current loop until `stop` is set (module doc).

    Processor names must be unique. `started` (optional) is set once every consumer group was
    joined. With `progress`, each keeps its group's journal progress there. Raises
    `ProcessorCrashed` for the first processor that crashed, or an error of a processor's
    `start()`; either way everything started is stopped first.
    """
    names = [p.name for p in processors]
    if len(set(names)) != len(names):
        raise ValueError(f"processor names must be unique, got {names}")
    runtimes = [
        ProcessorRuntime(p, settings, options, registry=registry, progress=progress) for p in processors
    ]
    running: list[ProcessorRuntime] = []
    try:
        if not await _start_all(runtimes, running, stop):
            return  # stopped while starting
        if started is not None:
            started.set()
        crashed = await _wait_for_stop_or_crash(runtimes, stop)
        if crashed is not None:
            assert crashed.error is not None
            raise crashed.error
    finally:
        await asyncio.gather(*(runtime.stop() for runtime in running), return_exceptions=True)


async def _start_all(
    runtimes: list[ProcessorRuntime], running: list[ProcessorRuntime], stop: asyncio.Event
) -> bool:
    """Start every runtime concurrently (each group join takes seconds); False if `stop` came first."""

    async def start(runtime: ProcessorRuntime) -> None:
        running.append(runtime)  # stopped in any case: start() may fail half way
        await runtime.start()

    # all starts run to their end (a failed one does not leave the others half started)
    starting = asyncio.ensure_future(asyncio.gather(*(start(r) for r in runtimes), return_exceptions=True))
    stopping = asyncio.ensure_future(stop.wait())
    waiting: set[asyncio.Future[Any]] = {starting, stopping}
    try:
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
        stopped_first = not starting.done()
        if stopped_first:
            starting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await starting
    if stopped_first:
        return False
    for result in starting.result():
        if isinstance(result, BaseException):
            raise result
    return True


async def _wait_for_stop_or_crash(
    runtimes: list[ProcessorRuntime], stop: asyncio.Event
) -> ProcessorRuntime | None:
    waiters = {asyncio.ensure_future(stop.wait()): None} | {
        asyncio.ensure_future(r.crashed.wait()): r for r in runtimes
    }
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
    for runtime in runtimes:
        if runtime.crashed.is_set():
            return runtime
    return None


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
    backoff instead of ending the worker. `processors` defaults to `memstream.wiring.processors.PROCESSORS`.
    Raises `UnknownProcessor` (listing the registered names) before connecting to anything, and
    `ProcessorCrashed` when the processor cannot run here at all (`ProcessorCannotRun` from its
    `start()`, e.g. a processor that needs the node).
    """
    from memstream.wiring.processors import PROCESSORS, create_processor  # processors depend on this package

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
    from sinks.postgres.pool import create_pool  # the runtime itself does not depend on sinks
    from sinks.postgres.progress import PostgresProgress

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
