"""`core.thread_deletion.ThreadDeletion` over the fakes: the steps in order, tenancy, idempotence, and
a deletion interrupted midway finished by `resume` (the node at start) or a repeated DELETE."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import pytest

from core.auth import Principal
from core.errors import DeletionIncomplete, NotFound
from core.journal.models import NewMessage, ThreadRef
from core.stores.deletions import DeletionRecord, Tombstone
from core.thread_deletion import ThreadDeletion
from tests.fakes.deletions import InMemoryDeletions
from tests.fakes.journal import InMemoryJournal
from tests.fakes.threads import InMemoryThreadStore

pytestmark = pytest.mark.unit

ACME = Principal(account_id="acme", environment="dev", key_id="k1")
OTHER = Principal(account_id="other", environment="dev", key_id="k2")


class Step:
    """A further step that fails its first `failures` runs (a crash midway)."""

    def __init__(self, name: str, failures: int = 0) -> None:
        self.name = name
        self.failures = failures
        self.runs: list[int] = []

    async def run(self, record: DeletionRecord) -> Mapping[str, Any]:
        self.runs.append(record.deletion_id)
        if self.failures:
            self.failures -= 1
            raise RuntimeError("injected crash")
        return {"deleted": 1}


class Setup:
    def __init__(self, *steps: Step) -> None:
        self.threads = InMemoryThreadStore()
        self.journal = InMemoryJournal()
        self.register = InMemoryDeletions()
        self.published: list[tuple[int, Tombstone]] = []
        self.service = ThreadDeletion(self.threads, self.journal, self.register, self.publish, steps)

    async def publish(self, deletion_id: int, tombstone: Tombstone, requested_at: datetime) -> None:
        self.published.append((deletion_id, tombstone))

    async def thread(self, thread_id: str, account: str = "acme", n: int = 2) -> None:
        await self.threads.upsert("dev", account, thread_id, "bot", None, {})
        ref = ThreadRef(environment="dev", account_id=account, thread_id=thread_id)
        await self.journal.append(
            ref, "bot", None, [NewMessage(role="user", content=f"m{i}") for i in range(n)]
        )


async def test_a_deletion_reaches_every_step_and_answers_its_report_again() -> None:
    step = Step("summaries")
    setup = Setup(step)
    await setup.thread("t1")
    await setup.thread("t2")
    record = await setup.service.delete(ACME, "t1")
    assert record.completed_at is not None and record.up_to_seq == 2
    assert dict(record.report) == {
        "thread": {"rows": 1},
        "journal": {"messages": 2, "up_to_seq": 2},
        "event": {"published": True, "up_to_seq": 2},
        "summaries": {"deleted": 1},
    }
    assert setup.published == [(record.deletion_id, Tombstone("dev", "acme", "t1", 2))]
    assert await setup.threads.get("dev", "acme", "t1") is None
    assert [m.thread_id for m in await setup.journal.read_from_seq(0, 10)] == ["t2", "t2"]
    assert await setup.service.delete(ACME, "t1") == record  # idempotent: the same report
    assert len(setup.published) == 1 and step.runs == [record.deletion_id]


async def test_another_accounts_thread_is_not_found() -> None:
    setup = Setup()
    await setup.thread("t1")
    with pytest.raises(NotFound):
        await setup.service.delete(OTHER, "t1")
    with pytest.raises(NotFound):
        await setup.service.delete(ACME, "never")
    assert setup.published == [] and len(await setup.journal.read_from_seq(0, 10)) == 2


async def test_a_deletion_interrupted_midway_is_finished_by_resume() -> None:
    step = Step("redis", failures=1)
    setup = Setup(step)
    await setup.thread("t1")
    with pytest.raises(DeletionIncomplete, match="steps done: thread, journal, event") as stopped:
        await setup.service.delete(ACME, "t1")
    assert isinstance(stopped.value.__cause__, RuntimeError)
    (left,) = await setup.register.incomplete()
    assert set(left.report) == {"thread", "journal", "event"}
    (finished,) = await setup.service.resume()
    assert finished.completed_at is not None and finished.report["redis"] == {"deleted": 1}
    assert finished.report["journal"]["messages"] == 2  # the first outcome, not the re-run's
    assert len(setup.published) == 1  # the event step was done: not published again
    assert await setup.register.incomplete() == []


async def test_a_thread_used_again_after_its_deletion_is_deleted_anew() -> None:
    setup = Setup()
    await setup.thread("t1")
    first = await setup.service.delete(ACME, "t1")
    await setup.thread("t1", n=3)
    second = await setup.service.delete(ACME, "t1")
    assert second.deletion_id != first.deletion_id
    assert (first.up_to_seq, second.up_to_seq, second.report["journal"]["messages"]) == (2, 5, 3)
