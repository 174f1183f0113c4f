"""Run several processors inside the caller's event loop (tests, benches).

`run_processors(processors, settings, stop)` is for code that owns the event loop and the signals
and wants a crash to end the run (tests, benches): it starts one faust App per processor in the
running loop (no `app.main()`, no `mode.Worker`, no signal handlers), returns after `stop` is set
and every app stopped, and raises `ProcessorCrashed` as soon as one processor crashed (after
stopping the others). The node keeps its processors running instead (`ProcessorSupervisor`), and
so does `memstream worker NAME` (`memstream.worker.run_worker`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

from core.config import Settings
from core.stores.progress import ProgressStore
from streams.runtime.app import ProcessorRuntime
from streams.runtime.options import RuntimeOptions
from streams.runtime.processor import Processor
from streams.topics import TopicRegistry


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
