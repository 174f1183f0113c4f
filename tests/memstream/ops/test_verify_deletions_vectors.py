"""`memstream verify`'s deletion check covers the message vectors (`transcript-vectors`) on the
real ClickHouse (chdb): the vectors a completed deletion left are reported, none once the
thread's vectors up to its seq are deleted, and those of the thread id used again never are."""

from __future__ import annotations

from core.journal.models import NewMessage
from memstream.ops.verify_deletions import DeletionLeftover, check_deletions
from processors.transcript_vectors import vector_of
from sinks.clickhouse.store import ClickHouseTranscriptStore
from sinks.clickhouse.vectors import ClickHouseMessageVectors
from tests.memstream.ops.test_verify_deletions import T1
from tests.memstream.ops.test_verify_deletions import setup as thread_of_three


async def test_vectors_left_by_a_completed_deletion_are_reported(
    transcript_store: ClickHouseTranscriptStore,
) -> None:
    register, journal, store, deletion_id = await thread_of_three()
    vectors = ClickHouseMessageVectors(transcript_store)
    old = [m for page in [await journal.after(T1, -1, 10)] for m in page]
    await vectors.insert_vectors([vector_of(m, "m", [1.0]) for m in old])
    await register.record_journal(deletion_id, await journal.delete_thread(T1))
    await store.delete_thread("test", "acme", "t1", 3)
    await register.complete(deletion_id)
    again = await journal.append(T1, "bot", None, [NewMessage(role="user", content="new life")])
    await vectors.insert_vectors([vector_of(m, "m", [1.0]) for m in again])
    assert await check_deletions(register, journal, store, "test", settle_s=0) == ([], [])  # not asked
    assert await check_deletions(register, journal, store, "test", settle_s=0, vectors=vectors) == (
        [],
        [DeletionLeftover("acme", "t1", 3, journal=0, projection=0, vectors=3)],
    )
    assert await vectors.delete_thread("test", "acme", "t1", 3) == 3
    assert await check_deletions(register, journal, store, "test", settle_s=0, vectors=vectors) == ([], [])
    assert await vectors.count_thread_rows("test", "acme", "t1", 4) == 1  # the thread used again
