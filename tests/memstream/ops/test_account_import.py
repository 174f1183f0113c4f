"""`AccountImport` over the fakes (unit): a journal outage while appending (the thread's shard
moving between nodes: `ShardNotLocal`; the journal away) stops the import with its error instead
of being reported as a conflict, and the import run again afterwards adds what is missing; a
refusal of the journal that is about the data stays a reported conflict."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import pytest

from core.errors import Conflict, JournalUnavailable, MemstreamError, ShardNotLocal
from core.journal.models import Message, NewMessage, ThreadRef
from core.stores.agents import AgentRecord
from core.summaries.models import Summary
from core.threads import Thread
from memstream.ops.account_export import AccountStores, export_account
from memstream.ops.account_import import import_account
from tests.fakes.agents import InMemoryAgents
from tests.fakes.journal import InMemoryJournal
from tests.fakes.quarantine import InMemoryQuarantineStore
from tests.fakes.summaries import InMemorySummaryStore
from tests.fakes.threads import InMemoryThreadStore


class Versions:
    async def versions(self, thread: ThreadRef, agent_id: str) -> list[Summary]:
        return []


class Restore:
    """Threads inserted into the fake store unless there (agents are not in these files)."""

    def __init__(self, threads: InMemoryThreadStore) -> None:
        self.threads = threads

    async def restore_thread(self, thread: Thread) -> tuple[Thread, bool]:
        key = (thread.environment, thread.account_id, thread.thread_id)
        stored = self.threads.threads.get(key)
        if stored is not None:
            return stored, False
        self.threads.threads[key] = thread
        return thread, True

    async def restore_agent(
        self,
        environment: str,
        account_id: str,
        agent_id: str,
        capabilities: Sequence[str],
        created_at: datetime,
        updated_at: datetime,
    ) -> tuple[AgentRecord, bool]:
        raise AssertionError("the files of these tests hold no agent")


class FailingJournal(InMemoryJournal):
    """Appends raise `error` while it is set."""

    def __init__(self) -> None:
        super().__init__()
        self.error: MemstreamError | None = None

    async def append(
        self, thread: ThreadRef, agent_id: str, user_id: str | None, messages: Sequence[NewMessage]
    ) -> list[Message]:
        if self.error is not None:
            raise self.error
        return await super().append(thread, agent_id, user_id, messages)


def stores(journal: InMemoryJournal) -> AccountStores:
    threads = InMemoryThreadStore()
    summaries = InMemorySummaryStore()
    return AccountStores(
        threads=threads,
        journal=journal,
        summary_versions=Versions(),
        summaries=summaries,
        agents=InMemoryAgents(),
        entries=InMemoryQuarantineStore(),
        restore=Restore(threads),
    )


async def exported() -> list[str]:
    source = stores(InMemoryJournal())
    assert isinstance(source.threads, InMemoryThreadStore)
    await source.threads.upsert("test", "acme", "t-1", "bot", "alice", {})
    ref = ThreadRef(environment="test", account_id="acme", thread_id="t-1")
    messages = [NewMessage(message_id=f"m-{i}", role="user", content=f"hello {i}") for i in range(3)]
    await source.journal.append(ref, "bot", "alice", messages)
    return [line async for line in export_account(source, "test", "acme")]


@pytest.mark.parametrize(
    "outage",
    [
        ShardNotLocal(1, "thread t-1 lives in journal shard 1, served by node 'b'; retry"),
        JournalUnavailable("away"),
    ],
)
async def test_an_outage_while_appending_stops_the_import_and_a_second_run_completes_it(
    outage: MemstreamError,
) -> None:
    lines = await exported()
    journal = FailingJournal()
    target = stores(journal)
    journal.error = outage
    with pytest.raises(type(outage)):
        await import_account(target, "test", "acme", lines)
    journal.error = None
    report = await import_account(target, "test", "acme", lines)
    assert report.ok and report.conflicts == []
    assert (report.added["message"], report.unchanged["thread"]) == (3, 1)
    ref = ThreadRef(environment="test", account_id="acme", thread_id="t-1")
    assert [m.message_id for m in await journal.after(ref, -1)] == ["m-0", "m-1", "m-2"]


async def test_a_refusal_about_the_data_is_a_conflict_and_the_import_goes_on() -> None:
    lines = await exported()
    journal = FailingJournal()
    journal.error = Conflict("message id m-0 is used by another thread")
    report = await import_account(stores(journal), "test", "acme", lines)
    assert not report.ok and report.added["thread"] == 1 and report.added["message"] == 0
    assert [(c["type"], c["id"]) for c in report.conflicts] == [("message", "m-0")]
    assert "conflict: message id m-0 is used by another thread" in report.conflicts[0]["detail"]
