"""ProcessorSupervisor with fake runtimes (unit): pause/resume, resume failures, crashes restarted
alone with backoff, processors that cannot run, stop, and the LeaveGroup it sends for a paused or
crashed Tansu member; leave_group's best-effort contract."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field

import pytest

import streams.runtime.supervisor as supervisor_module
from core.config import Settings
from streams.runtime.dlq import DeadLetterLimit
from streams.runtime.errors import ProcessorCannotRun, ProcessorCrashed
from streams.runtime.leave_group import Member, leave_group, member_of
from streams.runtime.options import RuntimeOptions
from streams.runtime.processor import Processor, Record
from streams.runtime.supervisor import ProcessorSupervisor

FAST_RESTARTS = RuntimeOptions(restart_backoff_initial_s=0.05, restart_backoff_max_s=0.2, restart_stable_s=60)


class Proc(Processor):
    def __init__(self, name: str) -> None:
        self.name = name
        self.source_topics = ("journal.messages",)

    async def process(self, batch: Sequence[Record]) -> None:  # never called: the runtime is fake
        raise AssertionError("fake runtimes do not consume")


@dataclass
class World:
    """What the fake runtimes did, and the failures they are told to raise."""

    runtimes: list[FakeRuntime] = field(default_factory=list)
    start_failures: list[BaseException] = field(default_factory=list)  # raised by the next starts
    start_delay_s: float = 0.0
    generation: int | None = None  # member_of answers a member with this generation (None: no member)
    left: list[Member] = field(default_factory=list)

    def of(self, name: str) -> list[FakeRuntime]:
        return [rt for rt in self.runtimes if rt.processor.name == name]


class FakeRuntime:
    world: World

    def __init__(
        self,
        processor: Processor,
        settings: Settings,
        options: object,
        *,
        registry: object,
        dead_letter_limit: DeadLetterLimit | None = None,
        progress: object = None,
    ) -> None:
        self.processor = processor
        self.dead_letter_limit = dead_letter_limit
        self.outage: tuple[float, str] | None = None
        self.group_id = f"g.{processor.name}"
        self.source_topics = [f"x.{t}" for t in processor.source_topics]
        self.crashed = asyncio.Event()
        self.error: ProcessorCrashed | None = None
        self.started = self.stopped = False
        self.world.runtimes.append(self)

    async def start(self) -> None:
        await asyncio.sleep(self.world.start_delay_s)
        if self.world.start_failures:
            raise self.world.start_failures.pop(0)
        self.started = True

    async def stop(self) -> None:
        self.stopped = True

    def crash(self, why: str) -> None:
        self.error = ProcessorCrashed(self.processor.name, why)
        self.crashed.set()


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> World:
    state = World()
    FakeRuntime.world = state

    def fake_member_of(runtime: FakeRuntime) -> Member | None:
        if state.generation is None:
            return None
        return Member(group_id=runtime.group_id, member_id="m-1", generation=state.generation)

    async def fake_leave_group(bootstrap: str, member: Member, *, timeout_s: float = 10.0) -> bool:
        state.left.append(member)
        return True

    monkeypatch.setattr(supervisor_module, "ProcessorRuntime", FakeRuntime)
    monkeypatch.setattr(supervisor_module, "member_of", fake_member_of)
    monkeypatch.setattr(supervisor_module, "leave_group", fake_leave_group)
    return state


@dataclass
class Running:
    supervisor: ProcessorSupervisor
    stop: asyncio.Event
    task: asyncio.Task[None]


@pytest.fixture
async def running(world: World) -> AsyncIterator[Running]:
    supervisor = ProcessorSupervisor(
        {"alpha": lambda: Proc("alpha"), "beta": lambda: Proc("beta")},
        Settings(),
        options=FAST_RESTARTS,
        resume_attempts=3,
        resume_backoff_s=0.01,
    )
    stop, started = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(supervisor.run(stop, started=started))
    await asyncio.wait_for(started.wait(), 5)
    yield Running(supervisor, stop, task)
    stop.set()
    await asyncio.gather(task, return_exceptions=True)


def states(supervisor: ProcessorSupervisor) -> dict[str, str]:
    return {name: supervisor.status(name).state for name in supervisor.names()}


async def until(condition: Callable[[], bool], within_s: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + within_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def test_pause_then_resume_starts_a_fresh_runtime(running: Running, world: World) -> None:
    sup = running.supervisor
    assert states(sup) == {"alpha": "running", "beta": "running"}
    assert sup.status("alpha").source_topics == ("x.journal.messages",)
    first = world.of("alpha")[0]

    assert await sup.pause("alpha") is True
    assert first.stopped
    assert states(sup) == {"alpha": "paused", "beta": "running"}
    assert await sup.pause("alpha") is False  # already paused

    assert await sup.resume("alpha") is True
    assert states(sup) == {"alpha": "running", "beta": "running"}
    second = world.of("alpha")[1]
    assert second is not first and second.started and not second.stopped
    assert await sup.resume("alpha") is False  # already running
    assert not running.task.done()


async def test_a_resume_that_fails_then_succeeds_is_retried(running: Running, world: World) -> None:
    sup = running.supervisor
    await sup.pause("alpha")
    world.start_failures = [RuntimeError("broker down"), RuntimeError("still down")]
    assert await sup.resume("alpha") is True
    assert states(sup)["alpha"] == "running"
    assert len(world.of("alpha")) == 4  # the first one, two failed starts, the one that started
    assert all(rt.stopped for rt in world.of("alpha")[1:3])  # failed starts are cleaned up
    assert not running.task.done()


async def test_a_resume_that_fails_for_good_raises_and_the_processor_restarts_later(
    running: Running, world: World
) -> None:
    sup = running.supervisor
    await sup.pause("alpha")
    world.start_failures = [RuntimeError(f"broker down {i}") for i in range(3)]
    with pytest.raises(
        ProcessorCrashed, match=r"'alpha' crashed: could not be resumed \(3 attempt"
    ) as raised:
        await sup.resume("alpha")
    assert isinstance(raised.value.__cause__, RuntimeError)
    assert "broker down 2" in raised.value.message
    assert sup.status("alpha").state == "crashed" and sup.status("alpha").degraded
    assert await sup.resume("alpha") is False  # not paused: the supervisor restarts it by itself

    # the node goes on: alpha is restarted with backoff, beta never stopped
    await until(lambda: states(sup)["alpha"] == "running")
    assert not running.task.done()
    assert not world.of("beta")[0].stopped
    status = sup.status("alpha")
    assert status.restarts == 1 and not status.degraded
    assert status.error is not None and "could not be resumed" in status.error


async def test_a_cancelled_resume_still_completes(running: Running, world: World) -> None:
    sup = running.supervisor
    await sup.pause("alpha")
    world.start_delay_s = 0.2
    caller = asyncio.create_task(sup.resume("alpha"))
    await asyncio.sleep(0.05)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    for _ in range(100):
        if states(sup)["alpha"] == "running":
            break
        await asyncio.sleep(0.02)
    assert states(sup)["alpha"] == "running"
    assert not running.task.done()


async def test_a_crash_restarts_that_processor_alone(running: Running, world: World) -> None:
    """Regression (issue 9, finding 1): a crashed processor ended `run`, and the node with it."""
    sup = running.supervisor
    first = world.of("beta")[0]
    first.crash("the dead-letter limit was reached")
    await until(lambda: len(world.of("beta")) == 2 and states(sup)["beta"] == "running")
    assert first.stopped  # the crashed runtime was stopped before the new one started
    second = world.of("beta")[1]
    assert second.started and not second.stopped
    # the same dead-letter rate limit: a restart does not allow another burst of dead letters
    assert second.dead_letter_limit is first.dead_letter_limit is not None
    assert not running.task.done()
    assert world.of("alpha") == [world.runtimes[0]] and not world.of("alpha")[0].stopped
    status = sup.status("beta")
    assert (status.state, status.restarts, status.degraded) == ("running", 1, False)
    assert status.error is not None and "dead-letter limit" in status.error


async def test_a_crashed_processor_is_degraded_until_it_runs_again(running: Running, world: World) -> None:
    sup = running.supervisor
    world.start_failures = [RuntimeError("still broken")] * 2
    world.of("alpha")[0].crash("boom")
    await until(lambda: states(sup)["alpha"] == "crashed")
    status = sup.status("alpha")
    assert status.degraded and status.problem is not None and "alpha crashed and restarts" in status.problem
    assert status.restart_in_s is not None
    await until(lambda: states(sup)["alpha"] == "running")
    assert len(world.of("alpha")) == 4  # the crashed one, two failed restarts, the one that runs
    assert not sup.status("alpha").degraded and sup.status("alpha").restarts == 1


async def test_quick_crashes_back_off_exponentially(world: World) -> None:
    options = RuntimeOptions(restart_backoff_initial_s=0.1, restart_backoff_max_s=0.4, restart_stable_s=60)
    sup = ProcessorSupervisor({"alpha": lambda: Proc("alpha")}, Settings(), options=options)
    world.start_failures = [RuntimeError(f"broken {i}") for i in range(4)]
    stop, started = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(sup.run(stop, started=started))
    try:
        await asyncio.wait_for(started.wait(), 5)
        begun = asyncio.get_running_loop().time()
        await until(lambda: states(sup)["alpha"] == "running")
        waited = asyncio.get_running_loop().time() - begun
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)
    assert waited >= 0.1 + 0.2 + 0.4 + 0.4 - 0.05  # delays doubled, capped at the maximum
    assert len(world.of("alpha")) == 5


async def test_a_crash_after_a_pause_and_resume_is_restarted_too(running: Running, world: World) -> None:
    sup = running.supervisor
    await sup.pause("alpha")
    await sup.resume("alpha")
    world.of("alpha")[-1].crash("after resume")
    await until(lambda: len(world.of("alpha")) == 3 and states(sup)["alpha"] == "running")
    assert not running.task.done()


async def test_pausing_a_crashed_processor_cancels_its_restart(world: World) -> None:
    options = RuntimeOptions(restart_backoff_initial_s=30.0)
    sup = ProcessorSupervisor({"alpha": lambda: Proc("alpha")}, Settings(), options=options)
    stop, started = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(sup.run(stop, started=started))
    try:
        await asyncio.wait_for(started.wait(), 5)
        world.of("alpha")[0].crash("boom")
        await until(lambda: states(sup)["alpha"] == "crashed")
        assert await sup.pause("alpha") is True
        assert states(sup)["alpha"] == "paused"
        assert await sup.resume("alpha") is True  # at once, not after the 30 s backoff
        assert states(sup)["alpha"] == "running" and len(world.of("alpha")) == 2
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)


async def test_stop_stops_every_runtime_and_resume_is_refused_after(running: Running, world: World) -> None:
    sup = running.supervisor
    await sup.pause("alpha")
    running.stop.set()
    await asyncio.wait_for(running.task, 5)
    assert all(rt.stopped for rt in world.runtimes)
    assert states(sup) == {"alpha": "stopped", "beta": "stopped"}
    assert await sup.resume("alpha") is False
    assert await sup.pause("beta") is False


async def test_a_failed_first_start_is_retried_and_run_goes_on(world: World) -> None:
    world.start_failures = [RuntimeError("no broker")]
    sup = ProcessorSupervisor(
        {"alpha": lambda: Proc("alpha"), "beta": lambda: Proc("beta")}, Settings(), options=FAST_RESTARTS
    )
    stop, started = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(sup.run(stop, started=started))
    try:
        await asyncio.wait_for(started.wait(), 5)
        await until(lambda: states(sup) == {"alpha": "running", "beta": "running"})
        assert sum(1 for name in ("alpha", "beta") if sup.status(name).restarts == 1) == 1
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)
    assert states(sup) == {"alpha": "stopped", "beta": "stopped"}


async def test_a_processor_that_cannot_run_is_not_restarted(world: World) -> None:
    world.start_failures = [ProcessorCannotRun("needs the node's journal: run it in the node")]
    failed: list[ProcessorCrashed] = []
    sup = ProcessorSupervisor(
        {"alpha": lambda: Proc("alpha")}, Settings(), options=FAST_RESTARTS, on_failed=failed.append
    )
    stop, started = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(sup.run(stop, started=started))
    try:
        await asyncio.wait_for(started.wait(), 5)
        await asyncio.sleep(0.3)  # several restart delays
        status = sup.status("alpha")
        assert (status.state, status.degraded, status.restarts) == ("failed", True, 0)
        assert status.problem is not None and "cannot run" in status.problem
        assert len(world.of("alpha")) == 1
        assert [str(e.__cause__) for e in failed] == ["needs the node's journal: run it in the node"]
        assert not task.done()
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)


async def test_an_outage_makes_a_running_processor_degraded(running: Running, world: World) -> None:
    sup = running.supervisor
    world.of("alpha")[0].outage = (time.monotonic() - 5, "TranscriptUnavailable: down")
    status = sup.status("alpha")
    assert status.state == "running" and status.degraded
    assert status.outage == "TranscriptUnavailable: down" and (status.outage_s or 0) >= 5
    assert status.problem is not None and "waiting" in status.problem
    world.of("alpha")[0].outage = None
    assert not sup.status("alpha").degraded


async def test_a_crashed_tansu_member_leaves_the_group_before_the_restart(
    running: Running, world: World
) -> None:
    world.generation = 0
    world.of("alpha")[0].crash("boom")
    await until(lambda: len(world.of("alpha")) == 2 and states(running.supervisor)["alpha"] == "running")
    assert world.left == [Member("g.alpha", "m-1", 0)]


@pytest.mark.parametrize(("generation", "sent"), [(0, True), (3, False), (None, False)])
async def test_pause_sends_leave_group_only_for_a_member_that_will_not(
    running: Running, world: World, generation: int | None, sent: bool
) -> None:
    world.generation = generation
    await running.supervisor.pause("alpha")
    assert world.left == ([Member("g.alpha", "m-1", 0)] if sent else [])
    running.stop.set()
    await asyncio.wait_for(running.task, 5)
    assert len(world.left) == (1 if sent else 0)  # stopping the node sends none


def test_member_leaves_by_itself_after_generation_zero() -> None:
    assert not Member("g", "m", 0).leaves_by_itself
    assert Member("g", "m", 1).leaves_by_itself


def test_member_of_a_runtime_without_a_consumer_is_none() -> None:
    runtime = FakeRuntime.__new__(FakeRuntime)  # no `app`: not started
    assert member_of(runtime) is None  # type: ignore[arg-type]


async def test_leave_group_is_best_effort_when_no_broker_answers() -> None:
    member = Member("g", "m", 0)
    assert await asyncio.wait_for(leave_group("127.0.0.1:1", member, timeout_s=1.0), 30) is False
