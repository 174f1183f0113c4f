"""run_replay --coordinate (unit, fake broker admin and supervisor): the processor paused is always
resumed, and a resume that fails is reported apart from the reset's own outcome."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from core.config import Settings
from memstream.ops.replay import BrokerOpFailed, GroupOffsets, PartitionTarget, ReplayPlan
from memstream.ops.replay_from import Earliest, ReplayFrom
from memstream.ops.replay_run import ResumeFailed, run_replay
from streams.runtime.errors import ProcessorCrashed
from streams.runtime.status import ProcessorStatus
from streams.runtime.supervisor import ProcessorSupervisor

GROUP = "p.memstream.alpha"


class FakeOffsets(GroupOffsets):
    def __init__(self, apply_error: Exception | None = None) -> None:
        self.apply_error = apply_error
        self.applied: list[ReplayPlan] = []

    def plan(self, processor: str, group: str, topics: Mapping[str, str], start: ReplayFrom) -> ReplayPlan:
        target = PartitionTarget(topic="p.journal.messages", partition=0, committed=30, target=0)
        return ReplayPlan(processor=processor, group_id=group, start=start.describe(), partitions=(target,))

    def activity(self, group: str) -> str | None:
        return None

    def apply(self, plan: ReplayPlan) -> None:
        if self.apply_error is not None:
            raise self.apply_error
        self.applied.append(plan)


class FakeSupervisor(ProcessorSupervisor):
    def __init__(self, resume_error: ProcessorCrashed | None = None) -> None:
        super().__init__({}, Settings())
        self.state = "running"
        self.resume_error = resume_error
        self.calls: list[str] = []

    def names(self) -> list[str]:
        return ["alpha"]

    def status(self, name: str) -> ProcessorStatus:
        return ProcessorStatus(
            name="alpha",
            group_id=GROUP,
            source_topics=("p.journal.messages",),
            declared_topics=("journal.messages",),
            state="running" if self.state == "running" else "paused",
        )

    async def pause(self, name: str) -> bool:
        self.calls.append("pause")
        self.state = "paused"
        return True

    async def resume(self, name: str) -> bool:
        self.calls.append("resume")
        if self.resume_error is not None:
            raise self.resume_error
        self.state = "running"
        return True


async def test_coordinated_replay_pauses_resets_and_resumes() -> None:
    offsets, supervisor = FakeOffsets(), FakeSupervisor()
    outcome = await run_replay(offsets, supervisor, "alpha", Earliest(), coordinate=True)
    assert outcome.applied and outcome.paused
    assert supervisor.calls == ["pause", "resume"]
    assert len(offsets.applied) == 1


async def test_a_failed_resume_after_a_reset_says_both() -> None:
    crash = ProcessorCrashed("alpha", "could not be resumed (3 attempt(s); last error: broker down)")
    offsets, supervisor = FakeOffsets(), FakeSupervisor(resume_error=crash)
    with pytest.raises(ResumeFailed) as raised:
        await run_replay(offsets, supervisor, "alpha", Earliest(), coordinate=True)
    error = raised.value
    assert error.reset and error.code == "resume_failed" and error.__cause__ is crash
    assert f"group {GROUP} WAS reset to the planned offsets" in error.message
    assert "processor alpha could not be resumed afterwards" in error.message
    assert "broker down" in error.message and "start it again" in error.message
    assert len(offsets.applied) == 1


async def test_a_failed_resume_after_a_failed_reset_says_both() -> None:
    crash = ProcessorCrashed("alpha", "could not be resumed")
    offsets = FakeOffsets(apply_error=BrokerOpFailed("changing the offsets failed: broker gone"))
    with pytest.raises(ResumeFailed) as raised:
        await run_replay(offsets, FakeSupervisor(resume_error=crash), "alpha", Earliest(), coordinate=True)
    assert not raised.value.reset
    assert f"group {GROUP} was NOT reset (changing the offsets failed: broker gone)" in raised.value.message
    assert "could not be resumed" in raised.value.message


async def test_a_failed_reset_still_resumes_and_raises_its_own_error() -> None:
    offsets = FakeOffsets(apply_error=BrokerOpFailed("broker gone"))
    supervisor = FakeSupervisor()
    with pytest.raises(BrokerOpFailed, match="broker gone"):
        await run_replay(offsets, supervisor, "alpha", Earliest(), coordinate=True)
    assert supervisor.calls == ["pause", "resume"] and supervisor.state == "running"


async def test_a_replay_forgets_the_groups_stored_progress_between_reset_and_resume() -> None:
    """Otherwise the resumed processor would skip every replayed record as already done."""
    offsets, supervisor = FakeOffsets(), FakeSupervisor()
    forgotten: list[tuple[str, list[str]]] = []

    async def forget(group: str) -> None:
        forgotten.append((group, list(supervisor.calls)))

    await run_replay(offsets, supervisor, "alpha", Earliest(), coordinate=True, forget_progress=forget)
    assert forgotten == [(GROUP, ["pause"])]  # after the reset, before the resume
    supervisor.state = "paused"  # not run by the node: no coordination needed
    forgotten.clear()
    await run_replay(offsets, supervisor, "alpha", Earliest(), forget_progress=forget)
    assert [group for group, _ in forgotten] == [GROUP]
    failing = FakeOffsets(apply_error=BrokerOpFailed("broker gone"))
    forgotten.clear()
    with pytest.raises(BrokerOpFailed):
        await run_replay(
            failing, FakeSupervisor(), "alpha", Earliest(), coordinate=True, forget_progress=forget
        )
    assert forgotten == []  # nothing was reset: nothing is forgotten
