"""Processors of one process that can be paused and resumed one at a time (the node's processors).

`ProcessorSupervisor(factories, settings)` runs, like `run_processors`, one faust App per processor
in the running loop; `run(stop)` returns after `stop` was set and every runtime stopped, and raises
`ProcessorCrashed` for the first processor that crashed (after stopping the others). In addition:
- `pause(name)` stops that processor's runtime (the batch in progress finishes and is committed; the
  consumer leaves the group - on Tansu, where aiokafka skips the LeaveGroup, `leave_group` sends it)
  and keeps it stopped;
- `resume(name)` builds a fresh processor with its factory (a runtime starts once) and starts it;
  it returns once the runtime started (its processor and faust app are up: the consumer joins the
  group in the background and reads from the group's committed offsets). A start that fails is
  retried `resume_attempts` times in all, `resume_backoff_s` apart (doubling). When every attempt
  failed the processor is `crashed`, `resume` raises `ProcessorCrashed` (cause: the last error),
  and `run` raises that same error: a processor that cannot be resumed is a crash like any other
  (the node stops; it never serves on without one of its processors). A resume that began runs to
  its end even when its caller is cancelled.
With a `progress` store every runtime keeps its group's journal progress there
(`streams.runtime.progress`).
Both are no-ops (False) when the processor is not in the state they leave (`running` for pause,
`paused` for resume; a `crashed` processor is never resumed); they are serialised per processor.
A paused processor stays paused until resumed or until `run` returns.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from memstream.config import Settings
from streams.runtime.app import ProcessorRuntime
from streams.runtime.errors import ProcessorCrashed, UnknownProcessor
from streams.runtime.leave_group import leave_group, member_of
from streams.runtime.options import RuntimeOptions
from streams.runtime.processor import Processor, group_id
from streams.runtime.progress import ProgressStore
from streams.topics import TopicRegistry

log = logging.getLogger("memstream.runtime")

State = Literal["starting", "running", "paused", "crashed", "stopped"]


@dataclass(frozen=True)
class ProcessorStatus:
    name: str
    group_id: str
    source_topics: tuple[str, ...]  # broker-side names
    declared_topics: tuple[str, ...]  # as declared in topics.yaml
    state: State


class ProcessorSupervisor:
    """See the module doc."""

    def __init__(
        self,
        factories: Mapping[str, Callable[[], Processor]],
        settings: Settings,
        *,
        options: RuntimeOptions | None = None,
        registry: TopicRegistry | None = None,
        resume_attempts: int = 3,
        resume_backoff_s: float = 1.0,
        progress: ProgressStore | None = None,
    ) -> None:
        if resume_attempts < 1:
            raise ValueError("resume_attempts must be >= 1")
        self.settings = settings
        self.options = options
        self.registry = registry
        self.resume_attempts = resume_attempts
        self.resume_backoff_s = resume_backoff_s
        self.progress = progress
        self._factories = dict(factories)
        self._runtimes: dict[str, ProcessorRuntime] = {}
        self._states: dict[str, State] = {name: "stopped" for name in self._factories}
        self._locks = {name: asyncio.Lock() for name in self._factories}
        self._changed = asyncio.Event()
        self._running = False
        self._failed: ProcessorCrashed | None = None  # the first resume that failed for good

    def names(self) -> list[str]:
        return sorted(self._factories)

    def status(self, name: str) -> ProcessorStatus:
        runtime = self._runtimes.get(self._known(name))
        declared: tuple[str, ...] = ()
        topics: tuple[str, ...] = ()
        if runtime is not None:
            declared = runtime.processor.source_topics
            topics = tuple(runtime.source_topics)
        return ProcessorStatus(
            name=name,
            group_id=group_id(name, self.settings),
            source_topics=topics,
            declared_topics=declared,
            state=self._states[name],
        )

    async def run(self, stop: asyncio.Event, *, started: asyncio.Event | None = None) -> None:
        """Start every processor, run until `stop` (module doc)."""
        self._running = True
        self._failed = None
        try:
            results = await asyncio.gather(
                *(self._start(name) for name in self.names()), return_exceptions=True
            )
            for result in results:
                if isinstance(result, BaseException):
                    raise result
            if started is not None:
                started.set()
            while not stop.is_set():
                error = await self._wait(stop)
                if error is not None:
                    raise error
        finally:
            self._running = False
            await asyncio.gather(
                *(self._stop(name, "stopped") for name in self.names()), return_exceptions=True
            )

    async def pause(self, name: str) -> bool:
        """Stop `name` and keep it stopped; True when it was running."""
        async with self._locks[self._known(name)]:
            if self._states[name] != "running":
                return False
            await self._stop_locked(name, "paused")
            log.info("processor %s paused", name)
            return True

    async def resume(self, name: str) -> bool:
        """Start `name` again after `pause`; True when it was paused. Raises `ProcessorCrashed` when
        it could not be started (module doc: the processor is then crashed, and so is `run`)."""
        self._known(name)
        # shielded: a caller cancelled mid-resume must not leave the processor half started
        task = asyncio.ensure_future(self._resume(name))
        task.add_done_callback(lambda done: done.cancelled() or done.exception())  # retrieved: logged
        return await asyncio.shield(task)

    # ---- internals -----------------------------------------------------------------------------

    def _known(self, name: str) -> str:
        if name not in self._factories:
            raise UnknownProcessor(name, list(self._factories))
        return name

    async def _resume(self, name: str) -> bool:
        async with self._locks[name]:
            if self._states[name] != "paused" or not self._running:
                return False
            delay = self.resume_backoff_s
            attempt = 0
            while True:
                attempt += 1
                try:
                    await self._start_locked(name)
                except Exception as exc:
                    if attempt < self.resume_attempts and self._running:
                        log.warning(
                            "processor %s: resume attempt %d of %d failed (%r); retrying in %.1fs",
                            name,
                            attempt,
                            self.resume_attempts,
                            exc,
                            delay,
                        )
                        self._states[name] = "starting"
                        await asyncio.sleep(delay)
                        delay *= 2
                        if self._running:
                            continue
                    raise self._resume_failed(name, attempt, exc) from exc
                log.info("processor %s resumed", name)
                return True

    def _resume_failed(self, name: str, attempts: int, exc: Exception) -> ProcessorCrashed:
        """Every resume attempt failed: `name` is crashed, and so is `run` (module doc)."""
        self._states[name] = "crashed"
        error = ProcessorCrashed(name, f"could not be resumed ({attempts} attempt(s); last error: {exc!r})")
        error.__cause__ = exc
        log.error("%s", error.message)
        if self._failed is None:
            self._failed = error
        self._changed.set()
        return error

    async def _start(self, name: str) -> None:
        async with self._locks[name]:
            await self._start_locked(name)

    async def _start_locked(self, name: str) -> None:
        """Start a fresh runtime for `name`; on failure it is stopped and `name` is `crashed`."""
        self._states[name] = "starting"
        try:
            runtime = ProcessorRuntime(
                self._factories[name](),
                self.settings,
                self.options,
                registry=self.registry,
                progress=self.progress,
            )
        except BaseException:
            self._states[name] = "crashed"
            raise
        self._runtimes[name] = runtime
        try:
            await runtime.start()
        except BaseException:
            self._states[name] = "crashed"
            await asyncio.gather(runtime.stop(), return_exceptions=True)
            raise
        self._states[name] = "running"
        self._changed.set()

    async def _stop(self, name: str, state: State) -> None:
        async with self._locks[name]:
            await self._stop_locked(name, state)

    async def _stop_locked(self, name: str, state: State) -> None:
        runtime = self._runtimes.get(name)
        was = self._states[name]
        self._states[name] = state
        self._changed.set()
        if runtime is not None and was in ("running", "starting", "crashed"):
            member = member_of(runtime)
            await runtime.stop()
            if state == "paused" and member is not None and not member.leaves_by_itself:
                await leave_group(self.settings.broker_bootstrap, member)

    async def _wait(self, stop: asyncio.Event) -> ProcessorCrashed | None:
        """Wait for `stop`, a crash of a running processor, a failed resume, or a pause/resume;
        the crash's error, or None."""
        self._changed.clear()
        if self._failed is not None:
            return self._failed
        watched = {name: rt for name, rt in self._runtimes.items() if self._states[name] == "running"}
        for name, runtime in watched.items():
            if runtime.crashed.is_set():
                return self._crashed(name, runtime)
        waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._changed.wait())]
        waiters += [asyncio.ensure_future(rt.crashed.wait()) for rt in watched.values()]
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
        if self._failed is not None:
            return self._failed
        for name, runtime in watched.items():
            if runtime.crashed.is_set() and self._states[name] == "running":
                return self._crashed(name, runtime)
        return None

    def _crashed(self, name: str, runtime: ProcessorRuntime) -> ProcessorCrashed:
        self._states[name] = "crashed"
        if runtime.error is not None:
            return runtime.error
        return ProcessorCrashed(name, "its runtime stopped without saying why")
