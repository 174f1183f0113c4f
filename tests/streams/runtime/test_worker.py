"""run_processors' argument checks and run_worker: unknown names, SIGTERM handling."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from pathlib import Path

import pytest

from memstream.config import Settings
from processors.registry import ProcessorFactory
from streams.runtime import RuntimeOptions, UnknownProcessor, run_processors, run_worker
from streams.topics import TopicRegistry, default_registry
from tests.streams.runtime.support import PgWriter, committed, create_effects_table, produce, wait_for_effects


def test_run_worker_names_the_registered_processors_for_an_unknown_name() -> None:
    factories: dict[str, ProcessorFactory] = {
        "beta": lambda s, _e: PgWriter("beta", s.postgres),
        "alpha": lambda s, _e: PgWriter("alpha", s.postgres),
    }
    with pytest.raises(UnknownProcessor, match=r"'nope'; registered processors: alpha, beta") as raised:
        run_worker("nope", Settings(), processors=factories)
    assert raised.value.available == ["alpha", "beta"]


async def test_run_processors_refuses_duplicate_names() -> None:
    twins = [PgWriter("writer", "postgresql://unused"), PgWriter("writer", "postgresql://unused")]
    with pytest.raises(ValueError, match="unique"):
        await run_processors(twins, Settings(), asyncio.Event())


def test_run_worker_runs_until_sigterm(
    rt_settings: Settings, rt_options: RuntimeOptions, registry: TopicRegistry, pg_dsn: str
) -> None:
    asyncio.run(create_effects_table(pg_dsn))
    positions = produce(rt_settings, [{"id": i} for i in range(20)])
    seen: list[int] = []

    def terminate_when_done() -> None:
        seen.extend(asyncio.run(wait_for_effects(pg_dsn, "writer", 20)))
        os.kill(os.getpid(), signal.SIGTERM)

    watcher = threading.Thread(target=terminate_when_done, daemon=True)
    watcher.start()
    run_worker(
        "writer",
        rt_settings,
        options=rt_options,
        registry=registry,
        processors={"writer": lambda s, _e: PgWriter("writer", s.postgres)},
    )
    watcher.join(5)
    assert seen == list(range(20))
    assert sum(committed(rt_settings, "writer").values()) == len(positions)


async def test_a_stop_during_start_returns_and_closes_the_processor(tmp_path: Path) -> None:
    class Hanging(PgWriter):
        stopped = False

        async def start(self) -> None:
            await asyncio.Event().wait()  # e.g. a sink that never answers

        async def stop(self) -> None:
            self.stopped = True

    hanging, stop = Hanging("writer", "postgresql://unused"), asyncio.Event()
    registry = default_registry().with_dead_letter("writer")
    task = asyncio.create_task(
        run_processors([hanging], Settings(data_dir=tmp_path), stop, registry=registry)
    )
    await asyncio.sleep(0.2)
    assert not task.done()
    stop.set()
    await asyncio.wait_for(task, 10)
    assert hanging.stopped
