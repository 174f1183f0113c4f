"""`memstream verify`'s deletion check (`memstream.ops.verify_deletions`) over the fakes: a completed
deletion whose rows are gone is clean (a thread id used again is not a leftover), one whose journal
messages or projection rows remain is reported, an incomplete one is reported as such, and a
projection that catches up within the wait is not a defect. On the real node:
tests/memstream/client/test_client_node.py (the thread deleted there) and the rebuild tests."""

from __future__ import annotations

import asyncio

import pytest

from core.journal.models import NewMessage, ThreadRef
from core.stores.deletions import JournalDeletion
from memstream.ops.verify_deletions import DeletionLeftover, check_deletions
from processors.clickhouse_projection import row_of
from tests.fakes.deletions import InMemoryDeletions
from tests.fakes.journal import InMemoryJournal
from tests.fakes.transcripts import InMemoryTranscriptStore

pytestmark = pytest.mark.unit

T1 = ThreadRef(environment="test", account_id="acme", thread_id="t1")


async def setup() -> tuple[InMemoryDeletions, InMemoryJournal, InMemoryTranscriptStore, int]:
    register, journal, store = InMemoryDeletions(), InMemoryJournal(), InMemoryTranscriptStore()
    written = await journal.append(
        T1, "bot", None, [NewMessage(role="user", content=f"m{i}") for i in range(3)]
    )
    await store.insert([row_of(m) for m in written])
    record = await register.open("test", "acme", "t1", "bot", None)
    return register, journal, store, record.deletion_id


async def test_a_clean_deletion_and_a_thread_used_again_are_not_reported() -> None:
    register, journal, store, deletion_id = await setup()
    await register.record_journal(deletion_id, await journal.delete_thread(T1))
    await store.delete_thread("test", "acme", "t1", 3)
    await register.complete(deletion_id)
    again = await journal.append(T1, "bot", None, [NewMessage(role="user", content="new life")])
    await store.insert([row_of(m) for m in again])
    assert await check_deletions(register, journal, store, "test", settle_s=0) == ([], [])


async def test_leftovers_and_incomplete_deletions_are_reported() -> None:
    register, journal, store, deletion_id = await setup()
    assert await check_deletions(register, journal, store, "test", settle_s=0) == (
        [f"{deletion_id} acme/t1"],
        [],
    )
    await register.record_journal(deletion_id, JournalDeletion(3, 3, ((1, 3),)))  # as if: nothing removed
    await register.complete(deletion_id)
    assert await check_deletions(register, journal, store, "test", settle_s=0) == (
        [],
        [DeletionLeftover("acme", "t1", 3, journal=3, projection=3)],
    )
    assert await check_deletions(register, journal, store, "other", settle_s=0) == ([], [])


async def test_a_projection_catching_up_within_the_wait_is_clean() -> None:
    register, journal, store, deletion_id = await setup()
    await register.record_journal(deletion_id, await journal.delete_thread(T1))
    await register.complete(deletion_id)

    async def late_projection() -> None:
        await asyncio.sleep(0.3)
        await store.delete_thread("test", "acme", "t1", 3)

    catching_up = asyncio.create_task(late_projection())
    assert await check_deletions(register, journal, store, "test", settle_s=5, poll_s=0.1) == ([], [])
    await catching_up
