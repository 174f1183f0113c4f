"""`memstream replay` inside the node: check activity, pause the processor if told to, reset, resume.

`run_replay(...)` works on the node's `ProcessorSupervisor` and a `GroupOffsets` (broker admin,
called in worker threads):
1. plans the targets (`GroupOffsets.plan`); with `dry_run` returns the plan and what makes the group
   look active, changing nothing;
2. refuses (`GroupActive`, nothing changed) while the group is active - the node runs the processor,
   or the broker reports members or a non-empty state - unless `coordinate`;
3. with `coordinate`: pauses the node's processor (it commits its batch and leaves the group), then
   commits the targets, retrying while the broker still refuses because of a member (at most
   `idle_timeout_s`: another consumer of the group elsewhere keeps it refused); whatever happens,
   resumes the processor it paused. When that resume fails for good (`ProcessorSupervisor.resume`:
   the processor is crashed, and the node stops as on any processor crash) it raises
   `ResumeFailed`, whose message says both whether the group was reset and why the resume failed;
   a reset that failed while the resume succeeded raises the reset's own error;
4. without `coordinate` (group idle): commits the targets once; a broker refusal raises `GroupActive`.
Once the targets are committed, `forget_progress(group)` (when given) deletes the group's stored
journal progress before the processor resumes, so it processes the replayed records instead of
skipping them as done (`streams.runtime.progress`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from core.errors import Conflict, MemstreamError, NotFound
from memstream.ops.progress import Progress, ProgressCallback, no_progress
from memstream.ops.replay import GroupActive, GroupOffsets, ReplayPlan
from memstream.ops.replay_from import ReplayFrom
from streams.runtime.errors import ProcessorCrashed, UnknownProcessor
from streams.runtime.status import ProcessorStatus
from streams.runtime.supervisor import ProcessorSupervisor


class ResumeFailed(MemstreamError):
    """The processor paused for a coordinated replay could not be resumed (module doc).

    `reset` is True when the group's offsets were changed before; `reset_error` says why not
    otherwise; `__cause__` is the resume's `ProcessorCrashed`."""

    code = "resume_failed"

    def __init__(self, name: str, group: str, reset_error: BaseException | None, resume: ProcessorCrashed):
        self.reset = reset_error is None
        self.reset_error = reset_error
        if reset_error is None:
            outcome = f"group {group} WAS reset to the planned offsets"
        else:
            outcome = f"group {group} was NOT reset ({_describe(reset_error)})"
        super().__init__(
            f"{outcome}, but processor {name} could not be resumed afterwards: {resume.message}. The node "
            "treats this as a processor crash and stops; start it again (`memstream up` or `memstream "
            "node`): the processor then reads from the group's committed offsets"
        )


def _describe(error: BaseException) -> str:
    return error.message if isinstance(error, MemstreamError) else f"{type(error).__name__}: {error}"


@dataclass(frozen=True)
class ReplayOutcome:
    plan: ReplayPlan
    applied: bool
    active: tuple[str, ...] = ()  # reasons the group looked active before anything was done
    paused: bool = False  # the node paused (and resumed) the processor
    waited_s: float = 0.0  # time spent waiting for the broker to accept the change
    notes: tuple[str, ...] = field(default_factory=tuple)


def processor_status(supervisor: ProcessorSupervisor, name: str) -> ProcessorStatus:
    """The node's processor `name`; NotFound listing the node's processors otherwise."""
    try:
        return supervisor.status(name)
    except UnknownProcessor:
        raise NotFound(
            f"no processor named {name!r}; the node runs: {', '.join(supervisor.names()) or 'none'}"
        ) from None


async def run_replay(
    offsets: GroupOffsets,
    supervisor: ProcessorSupervisor,
    name: str,
    start: ReplayFrom,
    *,
    coordinate: bool = False,
    dry_run: bool = False,
    idle_timeout_s: float = 30.0,
    progress: ProgressCallback = no_progress,
    forget_progress: Callable[[str], Awaitable[None]] | None = None,
    topics: Mapping[str, str] | None = None,
) -> ReplayOutcome:
    """See the module doc. `topics` (declared name -> broker name): the processor's source topics
    when it has no runtime in this node now (not started yet, or crashed); by default they come
    from its runtime."""
    status = processor_status(supervisor, name)
    if status.source_topics:
        topics = dict(zip(status.declared_topics, status.source_topics, strict=True))
    elif topics is None:
        raise Conflict(f"processor {name} has not started yet in this node: retry in a few seconds")
    progress(Progress("plan", 0, 1, f"reading offsets of group {status.group_id}"))
    plan = await asyncio.to_thread(offsets.plan, name, status.group_id, topics, start)
    active = list[str]()
    if status.state in ("running", "starting"):
        active.append(f"this node runs processor {name} ({status.state})")
    broker_says = await asyncio.to_thread(offsets.activity, status.group_id)
    if broker_says is not None:
        active.append(broker_says)
    progress(Progress("plan", 1, 1, f"{len(plan.partitions)} partition(s)"))
    if dry_run:
        return ReplayOutcome(plan=plan, applied=False, active=tuple(active))
    if not coordinate:
        if active:
            raise GroupActive(
                f"group {status.group_id} is active ({'; '.join(active)}): nothing was changed. Use "
                "--coordinate to have the node pause the processor, reset and resume it"
            )
        await asyncio.to_thread(offsets.apply, plan)
        if forget_progress is not None:
            await forget_progress(plan.group_id)
        return ReplayOutcome(plan=plan, applied=True)
    progress(Progress("pause", 0, 1, f"pausing processor {name}"))
    paused = await supervisor.pause(name)
    progress(Progress("pause", 1, 1, f"processor {name} {'paused' if paused else 'was not running'}"))
    waited = 0.0
    reset_error: BaseException | None = None
    try:
        waited = await _apply_when_idle(offsets, plan, idle_timeout_s, progress)
        if forget_progress is not None:
            await forget_progress(plan.group_id)
    except BaseException as exc:  # cancellation included: the processor is resumed all the same
        reset_error = exc
    if paused:
        progress(Progress("resume", 0, 1, f"resuming processor {name} (starting its consumer)"))
        try:
            await supervisor.resume(name)
        except ProcessorCrashed as exc:
            if isinstance(reset_error, asyncio.CancelledError):
                raise reset_error from None
            raise ResumeFailed(name, plan.group_id, reset_error, exc) from exc
        progress(Progress("resume", 1, 1, f"processor {name} resumed"))
    if reset_error is not None:
        raise reset_error
    return ReplayOutcome(plan=plan, applied=True, active=tuple(active), paused=paused, waited_s=waited)


async def _apply_when_idle(
    offsets: GroupOffsets, plan: ReplayPlan, timeout_s: float, progress: ProgressCallback
) -> float:
    """Commit the targets, retrying while the broker still counts a member (a rebalance finishing,
    or a stopped member not yet expired) for at most `timeout_s`."""
    started = time.monotonic()
    while True:
        try:
            await asyncio.to_thread(offsets.apply, plan)
        except GroupActive:
            waited = time.monotonic() - started
            if waited >= timeout_s:
                raise
            progress(
                Progress(
                    "reset",
                    round(waited),
                    round(timeout_s),
                    f"waiting for the broker to release group {plan.group_id}",
                )
            )
            await asyncio.sleep(0.5)
            continue
        progress(Progress("reset", 1, 1, f"group {plan.group_id} reset"))
        return time.monotonic() - started
