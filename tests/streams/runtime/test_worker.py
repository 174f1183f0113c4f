"""run_processors: its argument checks, and a stop during start (run_worker's tests are in
tests/memstream/test_worker.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from core.config import Settings
from streams.runtime import (
    run_processors,
)
from streams.topics import default_registry
from tests.streams.runtime.support import PgWriter


async def test_run_processors_refuses_duplicate_names() -> None:
    twins = [PgWriter("writer", "postgresql://unused"), PgWriter("writer", "postgresql://unused")]
    with pytest.raises(ValueError, match="unique"):
        await run_processors(twins, Settings(), asyncio.Event())


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
