"""A few worker threads, each owning one inference session, fed by a priority queue.

One session with two intra-op threads scales poorly on small inputs; two single-threaded sessions
running side by side (onnxruntime releases the GIL) do ~1.6x the work on two cores. Work is queued
in small pieces with a priority, so a one-text query (priority 0) waits for at most the piece each
worker is running, not for a whole backlog batch (priority 1) queued before it.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")

INTERACTIVE = 0
BULK = 1


class SessionPool:
    """`workers` daemon threads; each builds its session with `factory()` when it starts.

    `submit(priority, fn)` runs `fn(session)` on the first free worker, lower priorities first and
    FIFO within one; the returned `Future` carries the result or the exception. `ready()` blocks
    until every worker has its session (or raises the first factory error); `close()` ends the
    workers once the work queued before it is done.
    """

    def __init__(self, factory: Callable[[], Any], workers: int) -> None:
        if workers < 1:
            raise ValueError("workers must be >= 1")
        self._factory = factory
        self._queue: queue.PriorityQueue[tuple[int, int, Callable[[Any], Any] | None, Future[Any] | None]]
        self._queue = queue.PriorityQueue()
        self._order = itertools.count()
        self._started: list[Future[None]] = []
        self._threads: list[threading.Thread] = []
        for n in range(workers):
            started: Future[None] = Future()
            self._started.append(started)
            thread = threading.Thread(target=self._work, args=(started,), name=f"embedder-{n}", daemon=True)
            self._threads.append(thread)
            thread.start()

    def ready(self) -> None:
        for started in self._started:
            started.result()

    def close(self) -> None:
        for _ in self._started:
            self._queue.put((BULK + 1, next(self._order), None, None))

    def join(self, timeout: float) -> bool:
        """Wait for the workers to end (after `close`); whether they all did."""
        for thread in self._threads:
            thread.join(timeout)
        return not any(thread.is_alive() for thread in self._threads)

    def submit(self, priority: int, fn: Callable[[Any], T]) -> Future[T]:
        future: Future[T] = Future()
        self._queue.put((priority, next(self._order), fn, future))
        return future

    def _work(self, started: Future[None]) -> None:
        try:
            session = self._factory()
        except BaseException as exc:
            started.set_exception(exc)
            return
        started.set_result(None)
        while True:
            _, _, fn, future = self._queue.get()
            if fn is None or future is None:
                return
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(session))
            except BaseException as exc:
                future.set_exception(exc)
