"""A stand-in for a live projection processor in the rebuild tests, and a polling wait."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence

from core.config import Settings
from memstream.ops.topic_reader import TopicReader
from streams.runtime.processor import Record


class LiveProjection:
    """The live processor's effect without a consumer group: while open, every record of `topic`
    (read from the beginning, up to `batch_size` at a time) is handed to `apply`."""

    def __init__(
        self,
        settings: Settings,
        topic: str,
        apply: Callable[[Sequence[Record]], Awaitable[None]],
        batch_size: int,
    ) -> None:
        self.reader = TopicReader(settings, topic)
        self.apply = apply
        self.batch_size = batch_size
        self.stop = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> LiveProjection:
        await self.reader.open()
        self.task = asyncio.create_task(self._run())
        return self

    async def _run(self) -> None:
        while not self.stop.is_set():
            batch = await self.reader.read(self.batch_size, 0.1)
            if batch:
                await self.apply(batch)

    async def __aexit__(self, *exc: object) -> None:
        self.stop.set()
        assert self.task is not None
        await self.task
        await self.reader.close()


async def eventually(check: Callable[[], Awaitable[bool]], timeout_s: float = 30.0) -> None:
    """Wait until `check()` holds, polling every 0.1 s; fails after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.1)
