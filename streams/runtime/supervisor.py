"""Processors of one process, each kept running on its own: restarted alone after a crash, paused
and resumed one at a time (the node's processors, and `memstream worker NAME`).

`ProcessorSupervisor(factories, settings)` runs one faust App per processor in the running loop (a
`ProcessorRuntime` of a processor built by its factory); `run(stop)` returns after `stop` was set
and every runtime stopped. It never raises because of a processor: the others, and whatever else
the process serves, keep going.
- Crashes: a processor whose runtime crashed (`ProcessorRuntime.crashed`: the dead-letter limit, a
  failed commit, ...) or whose start failed (its `start()`, its factory) is `crashed`: its runtime
  is stopped (the consumer leaves the group - on Tansu, where aiokafka skips the LeaveGroup,
  `leave_group` sends it) and a fresh runtime is started after `options.restart_delay(n)` for its
  n-th crash in a row (a crash after `options.restart_stable_s` of running counts as the first),
  until one runs. Its uncommitted records are redelivered to the new one. The runtimes of one
  processor share one dead-letter rate limit, so restarts do not reset it.
- A start that raises `ProcessorCannotRun` (e.g. a processor that needs the node, run as a worker)
  makes the processor `failed`: it is never restarted, and `on_failed(error)` is called (a worker
  running only that processor then stops).
- `pause(name)` stops a `running` processor's runtime (the batch in progress finishes and is
  committed; the consumer leaves the group), or cancels the pending restart of a `crashed` one, and
  keeps it stopped (`paused`);
- `resume(name)` builds a fresh processor with its factory (a runtime starts once) and starts it;
  it returns once the runtime started (its processor and faust app are up: the consumer joins the
  group in the background and reads from the group's committed offsets). A start that fails is
  retried `resume_attempts` times in all, `resume_backoff_s` apart (doubling). When every attempt
  failed, `resume` raises `ProcessorCrashed` (cause: the last error) and the processor is
  `crashed` like any other: restarted with backoff. A resume that began runs to its end even when
  its caller is cancelled.
Both are no-ops (False) when the processor is not in a state they leave; they are serialised per
processor. A paused processor stays paused until resumed or until `run` returns.

`status(name)` gives the state, the last crash (`error`, kept after a successful restart), the
number of `restarts`, when the next restart is due, and the outage the batch in progress is
waiting out (`outage`: a store or the broker unavailable); `degraded` is True while the processor
is crashed, failed, restarting, or waiting out an outage.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping

from core.config import Settings
from core.errors import error_chain as chain
from core.stores.progress import ProgressStore
from streams.runtime.app import ProcessorRuntime
from streams.runtime.dlq import DeadLetterLimit
from streams.runtime.errors import ProcessorCannotRun, ProcessorCrashed, UnknownProcessor
from streams.runtime.leave_group import leave_group, member_of
from streams.runtime.options import RuntimeOptions
from streams.runtime.processor import Processor, group_id
from streams.runtime.status import ProcessorStatus, State
from streams.topics import TopicRegistry

log = logging.getLogger("memstream.runtime")


class _Slot:
    """One supervised processor: its current runtime and its crash history."""

    def __init__(self, name: str, factory: Callable[[], Processor], limit: DeadLetterLimit) -> None:
        self.name = name
        self.factory = factory
        self.dead_letter_limit = limit
        self.state: State = "stopped"
        self.runtime: ProcessorRuntime | None = None
        self.live = False  # `runtime` was created and not stopped yet
        self.lock = asyncio.Lock()
        self.error: ProcessorCrashed | None = None
        self.restarts = 0
        self.crashes_in_a_row = 0
        self.started_at: float | None = None
        self.restart_at: float | None = None
        self.restarting = False
        self.recovery: asyncio.Task[None] | None = None


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
        on_failed: Callable[[ProcessorCrashed], None] | None = None,
        progress: ProgressStore | None = None,
    ) -> None:
        if resume_attempts < 1:
            raise ValueError("resume_attempts must be >= 1")
        self.settings = settings
        self.options = options
        self.registry = registry
        self.resume_attempts = resume_attempts
        self.resume_backoff_s = resume_backoff_s
        self.on_failed = on_failed
        self.progress = progress
        self._opts = options or RuntimeOptions()
        self._slots = {
            name: _Slot(name, factory, DeadLetterLimit(self._opts.dlq_limit, self._opts.dlq_window_s))
            for name, factory in factories.items()
        }
        self._changed = asyncio.Event()
        self._running = False

    def names(self) -> list[str]:
        return sorted(self._slots)

    def status(self, name: str) -> ProcessorStatus:
        slot = self._slots[self._known(name)]
        runtime = slot.runtime
        declared: tuple[str, ...] = ()
        topics: tuple[str, ...] = ()
        outage: tuple[float, str] | None = None
        if runtime is not None:
            declared = runtime.processor.source_topics
            topics = tuple(runtime.source_topics)
            if slot.state == "running":
                outage = runtime.outage
        now = time.monotonic()
        restart_in: float | None = None
        if slot.state == "crashed" and slot.restart_at is not None:
            restart_in = max(0.0, slot.restart_at - now)
        return ProcessorStatus(
            name=name,
            group_id=group_id(name, self.settings),
            source_topics=topics,
            declared_topics=declared,
            state=slot.state,
            error=slot.error.message if slot.error is not None else None,
            restarts=slot.restarts,
            restart_in_s=restart_in,
            restarting=slot.restarting,
            outage=outage[1] if outage is not None else None,
            outage_s=now - outage[0] if outage is not None else None,
        )

    def statuses(self) -> list[ProcessorStatus]:
        """`status` of every processor, by name."""
        return [self.status(name) for name in self.names()]

    async def run(self, stop: asyncio.Event, *, started: asyncio.Event | None = None) -> None:
        """Start every processor and keep them running until `stop` (module doc). `started` is set
        once every processor's first start ended (started, or crashed and scheduled to restart)."""
        self._running = True
        try:
            await asyncio.gather(*(self._first_start(slot) for slot in self._slots.values()))
            if started is not None:
                started.set()
            while not stop.is_set():
                await self._watch(stop)
        finally:
            self._running = False
            recoveries = [slot.recovery for slot in self._slots.values() if slot.recovery is not None]
            for task in recoveries:
                task.cancel()
            await asyncio.gather(*recoveries, return_exceptions=True)
            await asyncio.gather(
                *(self._stop(slot, "stopped") for slot in self._slots.values()), return_exceptions=True
            )

    async def pause(self, name: str) -> bool:
        """Stop `name` and keep it stopped; True when it was running or waiting for its restart."""
        slot = self._slots[self._known(name)]
        async with slot.lock:
            if slot.state not in ("running", "crashed"):
                return False
            if slot.recovery is not None:
                slot.recovery.cancel()  # not inside the lock: sleeping, or waiting for it
            await self._stop_locked(slot, "paused", leave=True)
            log.info("processor %s paused", name)
            return True

    async def resume(self, name: str) -> bool:
        """Start `name` again after `pause`; True when it was paused. Raises `ProcessorCrashed` when
        it could not be started (module doc: the processor is then restarted with backoff)."""
        slot = self._slots[self._known(name)]
        # shielded: a caller cancelled mid-resume must not leave the processor half started
        task = asyncio.ensure_future(self._resume(slot))
        task.add_done_callback(lambda done: done.cancelled() or done.exception())  # retrieved: logged
        return await asyncio.shield(task)

    # ---- internals -----------------------------------------------------------------------------

    def _known(self, name: str) -> str:
        if name not in self._slots:
            raise UnknownProcessor(name, list(self._slots))
        return name

    async def _first_start(self, slot: _Slot) -> None:
        async with slot.lock:
            try:
                await self._start_locked(slot)
            except Exception as exc:
                self._crashed(slot, exc)

    async def _watch(self, stop: asyncio.Event) -> None:
        """Handle crashed runtimes, then wait for `stop`, a crash or a change of state."""
        self._changed.clear()
        watched: list[ProcessorRuntime] = []
        for slot in self._slots.values():
            runtime = slot.runtime
            if slot.state != "running" or runtime is None:
                continue
            if runtime.crashed.is_set():
                error = runtime.error or ProcessorCrashed(slot.name, "its runtime stopped without saying why")
                self._crashed(slot, error)
            else:
                watched.append(runtime)
        waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._changed.wait())]
        waiters += [asyncio.ensure_future(runtime.crashed.wait()) for runtime in watched]
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    def _crashed(self, slot: _Slot, exc: BaseException) -> None:
        """Record a crash (or a failed start) of `slot` and schedule its restart (module doc)."""
        if isinstance(exc, ProcessorCrashed):
            error = exc
        else:
            error = ProcessorCrashed(slot.name, f"{type(exc).__name__}: {exc}")
            error.__cause__ = exc
        slot.error = error
        slot.restarting = False
        self._changed.set()
        if any(isinstance(err, ProcessorCannotRun) for err in chain(error)):
            slot.state = "failed"
            log.error("processor %s cannot run in this process and is not restarted: %s", slot.name, error)
            if self.on_failed is not None:
                self.on_failed(error)
            return
        now = time.monotonic()
        if slot.started_at is not None and now - slot.started_at >= self._opts.restart_stable_s:
            slot.crashes_in_a_row = 0
        slot.started_at = None
        slot.crashes_in_a_row += 1
        delay = self._opts.restart_delay(slot.crashes_in_a_row)
        slot.state = "crashed"
        slot.restart_at = now + delay
        if not self._running:
            return
        log.error(
            "%s; restarting it alone in %.1fs (crash %d in a row; the other processors keep running)",
            error.message,
            delay,
            slot.crashes_in_a_row,
        )
        if slot.recovery is None or slot.recovery.done():
            slot.recovery = asyncio.create_task(self._recover(slot), name=f"memstream.{slot.name}.restart")

    async def _recover(self, slot: _Slot) -> None:
        """Stop the crashed runtime, then start fresh ones (with backoff) until one runs."""
        while True:
            async with slot.lock:
                if slot.state != "crashed" or not self._running:
                    return
                await self._stop_runtime(slot, leave=True)
                due = slot.restart_at if slot.restart_at is not None else time.monotonic()
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            async with slot.lock:
                if slot.state != "crashed" or not self._running:
                    return
                slot.restarting = True
                try:
                    await self._start_locked(slot)
                except Exception as exc:
                    self._crashed(slot, exc)
                    continue
                slot.restarts += 1
                log.info("processor %s restarted (restart %d)", slot.name, slot.restarts)
                return

    async def _resume(self, slot: _Slot) -> bool:
        async with slot.lock:
            if slot.state != "paused" or not self._running:
                return False
            delay = self.resume_backoff_s
            attempt = 0
            while True:
                attempt += 1
                try:
                    await self._start_locked(slot)
                except Exception as exc:
                    retry = not any(isinstance(err, ProcessorCannotRun) for err in chain(exc))
                    if retry and attempt < self.resume_attempts and self._running:
                        log.warning(
                            "processor %s: resume attempt %d of %d failed (%r); retrying in %.1fs",
                            slot.name,
                            attempt,
                            self.resume_attempts,
                            exc,
                            delay,
                        )
                        slot.state = "starting"
                        await asyncio.sleep(delay)
                        delay *= 2
                        if self._running:
                            continue
                    error = ProcessorCrashed(
                        slot.name, f"could not be resumed ({attempt} attempt(s); last error: {exc!r})"
                    )
                    error.__cause__ = exc
                    self._crashed(slot, error)
                    raise error from exc
                log.info("processor %s resumed", slot.name)
                return True

    async def _start_locked(self, slot: _Slot) -> None:
        """Start a fresh runtime for `slot`; on failure it is stopped again and the error raised."""
        slot.state = "starting"
        self._changed.set()
        try:
            runtime = ProcessorRuntime(
                slot.factory(),
                self.settings,
                self.options,
                registry=self.registry,
                dead_letter_limit=slot.dead_letter_limit,
                progress=self.progress,
            )
        except BaseException:
            slot.state = "crashed"
            raise
        slot.runtime = runtime
        slot.live = True
        try:
            await runtime.start()
        except BaseException:
            slot.state = "crashed"
            slot.live = False
            await asyncio.gather(runtime.stop(), return_exceptions=True)
            raise
        slot.state = "running"
        slot.started_at = time.monotonic()
        slot.restarting = False
        self._changed.set()

    async def _stop(self, slot: _Slot, state: State) -> None:
        async with slot.lock:
            await self._stop_locked(slot, state, leave=False)

    async def _stop_locked(self, slot: _Slot, state: State, *, leave: bool) -> None:
        slot.state = state
        slot.restarting = False
        self._changed.set()
        await self._stop_runtime(slot, leave=leave)

    async def _stop_runtime(self, slot: _Slot, *, leave: bool) -> None:
        """Stop `slot`'s runtime if it is live; with `leave`, make sure its member leaves the group."""
        runtime = slot.runtime
        if runtime is None or not slot.live:
            return
        slot.live = False
        member = member_of(runtime)
        stopping = asyncio.ensure_future(runtime.stop())
        try:
            await asyncio.shield(stopping)
        except asyncio.CancelledError:  # e.g. the node stops during a restart: finish this stop first
            await asyncio.gather(stopping, return_exceptions=True)
            raise
        if leave and member is not None and not member.leaves_by_itself:
            await leave_group(self.settings.broker_bootstrap, member)
