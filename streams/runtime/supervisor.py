"""Processors of one process that can be paused and resumed one at a time (the node's processors).

`ProcessorSupervisor(factories, settings)` runs, like `run_processors`, one faust App per processor
in the running loop; `run(stop)` returns after `stop` was set and every runtime stopped, and raises
`ProcessorCrashed` for the first processor that crashed (after stopping the others). In addition:
- `pause(name)` stops that processor's runtime (the batch in progress finishes and is committed; the
  consumer leaves the group - on Tansu, where aiokafka skips the LeaveGroup, `leave_group` sends it)
  and keeps it stopped;
- `resume(name)` builds a fresh processor with its factory (a runtime starts once) and starts it;
  it returns once the consumer group was joined, reading from the group's committed offsets.
Both are no-ops when the processor is already in that state; they are serialised per processor.
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
from streams.runtime.errors import UnknownProcessor
from streams.runtime.leave_group import leave_group, member_of
from streams.runtime.options import RuntimeOptions
from streams.runtime.processor import Processor, group_id
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
    ) -> None:
        self.settings = settings
        self.options = options
        self.registry = registry
        self._factories = dict(factories)
        self._runtimes: dict[str, ProcessorRuntime] = {}
        self._states: dict[str, State] = {name: "stopped" for name in self._factories}
        self._locks = {name: asyncio.Lock() for name in self._factories}
        self._changed = asyncio.Event()
        self._running = False

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
                crashed = await self._wait(stop)
                if crashed is not None:
                    assert crashed.error is not None
                    raise crashed.error
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
        """Start `name` again after `pause`; True when it was paused (module doc)."""
        async with self._locks[self._known(name)]:
            if self._states[name] != "paused" or not self._running:
                return False
            await self._start_locked(name)
            log.info("processor %s resumed", name)
            return True

    # ---- internals -----------------------------------------------------------------------------

    def _known(self, name: str) -> str:
        if name not in self._factories:
            raise UnknownProcessor(name, list(self._factories))
        return name

    async def _start(self, name: str) -> None:
        async with self._locks[name]:
            await self._start_locked(name)

    async def _start_locked(self, name: str) -> None:
        runtime = ProcessorRuntime(
            self._factories[name](), self.settings, self.options, registry=self.registry
        )
        self._runtimes[name] = runtime
        self._states[name] = "starting"
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

    async def _wait(self, stop: asyncio.Event) -> ProcessorRuntime | None:
        """Wait for `stop`, a crash of a running processor, or a pause/resume; the crashed one or None."""
        self._changed.clear()
        watched = {name: rt for name, rt in self._runtimes.items() if self._states[name] == "running"}
        for runtime in watched.values():
            if runtime.crashed.is_set():
                return runtime
        waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._changed.wait())]
        waiters += [asyncio.ensure_future(rt.crashed.wait()) for rt in watched.values()]
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
        for name, runtime in watched.items():
            if runtime.crashed.is_set() and self._states[name] == "running":
                self._states[name] = "crashed"
                return runtime
        return None
