"""`core.user_erasure.UserErasure` over the fakes: every thread of the user through a thread deletion
and their memory, a report, tenancy (another user, another account), a repeat (a new erasure of
zeros), a crash midway finished by `resume`, appends racing the erasure, and one erasure of a user
at a time."""

from __future__ import annotations

import asyncio

import pytest

from core.auth import Principal
from core.errors import Conflict, ErasureIncomplete, InvalidInput, NotFound
from core.user_erasure import add_counts
from tests.core.user_erasure_setup import Setup

pytestmark = pytest.mark.unit

ACME = Principal(account_id="acme", environment="dev", key_id="k1")


async def test_an_erasure_reaches_every_thread_and_the_memory_of_the_user_only() -> None:
    setup = Setup()
    await setup.thread("t1", "ada", n=3)
    await setup.thread("t2", "ada")
    await setup.thread("t3", "bob")
    await setup.thread("t4", None)
    await setup.thread("t1", "ada", account="globex")  # the same user id in another account
    await setup.remember("ada", "ada.private")
    await setup.remember("ada", "ada.shared", "shared")
    await setup.remember("bob", "bob.private")
    await setup.remember("ada", "ada.private", account="globex")

    record = await setup.erasure.erase(ACME, "ada")

    assert record.completed_at is not None and record.user_id == "ada"
    threads = record.report["threads"]
    assert threads["threads"] == 2
    assert [(d["thread_id"], d["up_to_seq"]) for d in threads["deletions"]] == [("t1", 3), ("t2", 5)]
    assert [d["deletion_id"] for d in threads["deletions"]] == list(record.deletions)
    assert threads["deleted"] == {
        "thread": {"rows": 2},
        "journal": {"messages": 5},
        "summaries": {"objects": 4},
    }
    assert record.report["memory"] == {
        "private_entries": 1,
        "unlinked_entries": 1,
        "quarantine_deleted": 0,
        "quarantine_unlinked": 0,
    }
    assert record.report["caches"] == {"evicted": 1}
    assert await setup.threads_of("ada") == [] and await setup.threads_of("bob") == ["t3"]
    assert await setup.threads_of("ada", account="globex") == ["t1"]
    assert await setup.journal_threads() == [("acme", "t3"), ("acme", "t4"), ("globex", "t1")]
    assert {t.scope for t in setup.published} == {("dev", "acme", "t1"), ("dev", "acme", "t2")}
    assert (await setup.memory.user_rows("dev", "acme", "ada")).total == 0
    assert (await setup.memory.user_rows("dev", "acme", "bob")).private == 1
    assert (await setup.memory.user_rows("dev", "globex", "ada")).private == 1


async def test_a_repeat_is_a_new_erasure_of_what_came_since_and_an_unknown_user_is_not_found() -> None:
    setup = Setup()
    await setup.thread("t1", "ada")
    first = await setup.erasure.erase(ACME, "ada")
    again = await setup.erasure.erase(ACME, "ada")
    assert again.erasure_id != first.erasure_id and again.completed_at is not None
    assert again.report["threads"] == {"threads": 0, "deletions": [], "deleted": {}}
    assert again.report["memory"] == dict.fromkeys(first.report["memory"], 0)
    await setup.thread("t5", "ada")  # the user came back
    third = await setup.erasure.erase(ACME, "ada")
    assert [d["thread_id"] for d in third.report["threads"]["deletions"]] == ["t5"]
    with pytest.raises(NotFound, match="'nobody'"):
        await setup.erasure.erase(ACME, "nobody")
    with pytest.raises(NotFound):  # ada of acme is not ada of globex
        await setup.erasure.erase(Principal(account_id="globex", environment="dev", key_id="k2"), "ada")
    for bad in ("", "a/b", "x" * 129):
        with pytest.raises(InvalidInput):
            await setup.erasure.erase(ACME, bad)
    assert len(setup.register.records) == 3


async def test_only_memory_makes_a_user_known() -> None:
    setup = Setup()
    await setup.remember("ada", "ada.private")
    record = await setup.erasure.erase(ACME, "ada")
    assert record.report["threads"]["threads"] == 0 and record.report["memory"]["private_entries"] == 1


async def test_an_erasure_stopped_in_a_thread_deletion_is_finished_by_resume() -> None:
    setup = Setup()
    await setup.thread("t1", "ada")
    await setup.thread("t2", "ada")
    await setup.remember("ada", "ada.private")
    setup.summaries.failures = 1  # the first thread's deletion stops after its journal step
    with pytest.raises(ErasureIncomplete, match="steps done: none, threads deleted so far: 1") as stopped:
        await setup.erasure.erase(ACME, "ada")
    assert isinstance(stopped.value.__cause__.__cause__, RuntimeError)  # type: ignore[union-attr]
    (left,) = await setup.register.incomplete()
    assert len(left.deletions) == 1 and await setup.threads_of("ada") == ["t2"]  # t1's row is gone
    assert (await setup.memory.user_rows("dev", "acme", "ada")).private == 1  # memory comes after

    (finished,) = await setup.erasure.resume()
    assert finished.erasure_id == left.erasure_id and finished.completed_at is not None
    assert [d["thread_id"] for d in finished.report["threads"]["deletions"]] == ["t1", "t2"]
    assert finished.report["threads"]["deleted"]["journal"] == {"messages": 4}
    assert setup.summaries.runs == ["t1", "t1", "t2"]
    assert await setup.deletions.incomplete() == [] and await setup.register.incomplete() == []
    assert (await setup.memory.user_rows("dev", "acme", "ada")).total == 0


async def test_an_erasure_stopped_after_the_memory_step_does_not_run_it_again() -> None:
    setup = Setup()
    await setup.thread("t1", "ada")
    await setup.remember("ada", "ada.private")
    setup.caches.failures = 1
    with pytest.raises(ErasureIncomplete, match="steps done: threads, memory"):
        await setup.erasure.erase(ACME, "ada")
    await setup.remember("ada", "ada.later")  # written after the memory step: not this erasure's
    finished = await setup.erasure.erase(ACME, "ada")  # the same erasure, asked again
    assert finished.report["memory"]["private_entries"] == 1 and setup.caches.runs == 2
    assert (await setup.memory.user_rows("dev", "acme", "ada")).private == 1


async def test_a_thread_an_append_creates_during_the_erasure_is_erased_too() -> None:
    setup = Setup()
    await setup.thread("t1", "ada")
    await setup.thread("t3", "bob")

    async def append_meanwhile(thread_id: str) -> None:
        if thread_id == "t1":  # while t1 is being deleted, the user appends to a new thread
            await setup.thread("t0", "ada")
            await setup.thread("t9", "ada")

    setup.summaries.during = append_meanwhile
    record = await setup.erasure.erase(ACME, "ada")
    assert sorted(d["thread_id"] for d in record.report["threads"]["deletions"]) == ["t0", "t1", "t9"]
    assert await setup.threads_of("ada") == [] and await setup.journal_threads() == [("acme", "t3")]


async def test_a_thread_appends_keep_creating_stops_the_erasure() -> None:
    setup = Setup()
    await setup.thread("t1", "ada")

    async def recreate(thread_id: str) -> None:
        await setup.thread(thread_id, "ada")  # after the journal step: the thread is there again

    setup.summaries.during = recreate
    with pytest.raises(ErasureIncomplete, match="stop the appends of this user") as stopped:
        await setup.erasure.erase(ACME, "ada")
    assert isinstance(stopped.value.__cause__, Conflict)
    setup.summaries.during = None  # the appends stopped: the same erasure finishes
    record = await setup.erasure.erase(ACME, "ada")
    assert record.completed_at is not None and await setup.threads_of("ada") == []
    assert [d["thread_id"] for d in record.report["threads"]["deletions"]] == ["t1"] * 4


async def test_concurrent_erasures_of_a_user_run_once() -> None:
    setup = Setup()
    for thread_id in ("t1", "t2", "t3"):
        await setup.thread(thread_id, "ada")
    records = await asyncio.gather(*(setup.erasure.erase(ACME, "ada") for _ in range(4)))
    assert len({r.erasure_id for r in records}) == 1 and len({r.completed_at for r in records}) == 1
    assert records[0].report["threads"]["threads"] == 3 and setup.summaries.runs == ["t1", "t2", "t3"]


def test_add_counts_sums_counts_only() -> None:
    totals: dict[str, dict[str, int]] = {}
    for report in (
        {
            "journal": {"messages": 2, "up_to_seq": 9},
            "event": {"published": True},
            "summaries": {"agents": ["a"]},
        },
        {"journal": {"messages": 3, "up_to_seq": 12}, "redis": {"keys": 4}},
    ):
        add_counts(totals, report)
    assert totals == {"journal": {"messages": 5}, "redis": {"keys": 4}}
