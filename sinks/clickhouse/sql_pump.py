"""`pump`: chunks produced by blocking code on a worker thread, as an async iterator.

The producer runs on the given executor and hands each chunk over through a small queue: when the
consumer is slower the producer waits (the engine is not read ahead of the client), and when the
consumer stops early (the client went away, the iterator was closed) the producer's `emit`
returns False and it stops the query. An exception of the producer is raised to the consumer
after the chunks before it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Executor

Emit = Callable[[bytes], bool]
"""Hands a chunk to the consumer; False when the consumer is gone (stop producing)."""

_DONE = object()
QUEUE_CHUNKS = 4


async def pump(executor: Executor, produce: Callable[[Emit], None]) -> AsyncIterator[bytes]:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[object] = asyncio.Queue(maxsize=QUEUE_CHUNKS)
    gone = threading.Event()

    def put(item: object) -> bool:
        future = asyncio.run_coroutine_threadsafe(queue.put(item), loop)
        while not gone.is_set():
            try:
                future.result(timeout=0.5)
                return True
            except concurrent.futures.TimeoutError:
                continue
        future.cancel()
        return False

    def work() -> None:
        try:
            produce(put)
        except BaseException as exc:  # handed to the consumer, raised there
            put(exc)
            return
        put(_DONE)

    task = loop.run_in_executor(executor, work)
    try:
        while True:
            item = await queue.get()
            if item is _DONE:
                break
            if isinstance(item, BaseException):
                raise item
            assert isinstance(item, bytes)
            yield item
    finally:
        gone.set()
        while not queue.empty():  # a producer waiting on a full queue sees `gone` within 0.5 s
            queue.get_nowait()
        await asyncio.shield(task)
