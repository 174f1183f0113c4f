"""ConsumerRestart (unit, the fake broker admin and supervisor of test_replay_run): a reset the
broker refuses because it still counts a member is tried again after a resume; other failures and
the last refusal raise, and the processor is resumed every time."""

from __future__ import annotations

import pytest

from core.config import Settings
from memstream.ops.replay import GroupActive, ReplayPlan
from memstream.ops.topic_restart import ConsumerRestart
from tests.memstream.ops.test_replay_run import FakeOffsets, FakeSupervisor


class RefusingOffsets(FakeOffsets):
    """Refuses the first `refusals` resets as a broker still counting a member does."""

    def __init__(self, refusals: int) -> None:
        super().__init__()
        self.refusals = refusals

    def apply(self, plan: ReplayPlan) -> None:
        if self.refusals > 0:
            self.refusals -= 1
            raise GroupActive("the broker refused: it has active members (Unknown member)")
        super().apply(plan)


def restart_of(offsets: FakeOffsets, supervisor: FakeSupervisor, attempts: int = 3) -> ConsumerRestart:
    return ConsumerRestart(
        Settings(),
        supervisor,
        lambda topic: ["alpha"] if topic == "journal.messages" else [],
        offsets=lambda: offsets,
        idle_timeout_s=0.0,
        attempts=attempts,
    )


async def test_a_refused_reset_is_tried_again_after_a_resume() -> None:
    offsets, supervisor = RefusingOffsets(refusals=2), FakeSupervisor()
    restart = restart_of(offsets, supervisor)
    await restart("journal.messages")
    assert supervisor.calls == ["pause", "resume"] * 3 and supervisor.state == "running"
    assert len(offsets.applied) == 1 and restart.restarts == 1


async def test_the_last_refusal_raises_with_the_processor_resumed() -> None:
    offsets, supervisor = RefusingOffsets(refusals=3), FakeSupervisor()
    restart = restart_of(offsets, supervisor)
    with pytest.raises(GroupActive, match="active members"):
        await restart("journal.messages")
    assert supervisor.calls == ["pause", "resume"] * 3 and supervisor.state == "running"
    assert offsets.applied == [] and restart.restarts == 0


async def test_a_topic_nobody_here_reads_changes_nothing() -> None:
    offsets, supervisor = FakeOffsets(), FakeSupervisor()
    await restart_of(offsets, supervisor)("memory.entries")
    assert supervisor.calls == [] and offsets.applied == []
