"""`verify` over a real SlateJournal and the real ClickHouse transcript store (chdb): defects,
relay-pending messages apart, waiting for a projection that catches up, and threads whose ids are
no longer valid."""

from __future__ import annotations

import asyncio
from pathlib import Path

from slatedb.uniffi import WriteBatch

from core.config import Settings
from core.journal.models import Message, NewMessage, ThreadRef
from core.sharding.journal import ShardedJournal
from core.sharding.shards import shard_of
from memstream.ops.progress import Progress
from memstream.ops.verify import ThreadDiff, VerifyReport, render_differences, verify
from memstream.sharding.journal_views import LazyJournalViews
from memstream.sharding.shard_sources import EveryShardJournal, every_shard
from processors.clickhouse_projection import row_of
from sinks.clickhouse.store import ClickHouseTranscriptStore
from sinks.slatedb import keys
from sinks.slatedb.journal import SlateJournal
from streams.relays.journal import DEFAULT_CURSOR, Relay
from tests.memstream.ops.local_shards import local_shards, sharded


async def append(
    journal: SlateJournal, thread: str, count: int, account: str = "acme", start: int = 0
) -> list[Message]:
    ref = ThreadRef(environment="test", account_id=account, thread_id=thread)
    ids = range(start, start + count)
    news = [NewMessage(message_id=f"{thread}-{i}", role="user", content=f"hello {i}") for i in ids]
    return await journal.append(ref, "bot", None, news)


async def test_reports_defects_and_pending_messages_apart(
    journal: SlateJournal, transcript_store: ClickHouseTranscriptStore, settings: Settings
) -> None:
    full = await append(journal, "full", 3)  # seq 1-3
    short = await append(journal, "short", 4)  # seq 4-7
    await append(journal, "missing", 1)  # seq 8
    other_account = await append(journal, "full", 2, account="globex")  # seq 9-10
    late = await append(journal, "late", 3)  # seq 11-13: 12 and 13 not yet published
    await journal.set_cursor(DEFAULT_CURSOR, 11)
    ghost = await append(journal, "ghost", 1)  # seq 14, never projected... but see below
    await transcript_store.insert(
        [row_of(m) for m in [*full, *short[:2], *other_account, *late[:1]]]
        + [row_of(m.model_copy(update={"thread_id": "phantom"})) for m in ghost]
    )
    seen: list[Progress] = []
    report = await verify(
        local_shards((journal, Relay(journal, settings))),
        sharded(journal),
        transcript_store,
        "test",
        settle_s=0,
        progress=seen.append,
    )
    assert not report.ok
    assert set(report.differences) == {
        ThreadDiff("acme", "short", "fewer", 4, 2),
        ThreadDiff("acme", "missing", "missing_thread", 1, 0),
        ThreadDiff("acme", "phantom", "unknown_thread", 0, 1),
    }
    # late: 12 and 13 unpublished; ghost: seq 14 unpublished
    assert (report.pending_threads, report.pending_messages) == (2, 3)
    assert (report.journal_threads, report.journal_messages) == (6, 14)
    assert report.projection_messages == 3 + 2 + 2 + 1 + 1
    assert seen[0].phase == "journal" and seen[-1].phase == "projection"
    assert any(p.phase == "journal" and p.done == p.total == 14 for p in seen)


async def test_waits_for_a_projection_that_catches_up(
    journal: SlateJournal, transcript_store: ClickHouseTranscriptStore, settings: Settings
) -> None:
    messages = await append(journal, "t", 5) + await append(journal, "u", 2)
    await journal.set_cursor(DEFAULT_CURSOR, 7)
    await transcript_store.insert([row_of(m) for m in messages[:3]])

    async def catch_up() -> None:
        await asyncio.sleep(1.0)
        await transcript_store.insert([row_of(m) for m in messages[3:]])

    task = asyncio.create_task(catch_up())
    seen: list[Progress] = []
    report = await verify(
        local_shards((journal, Relay(journal, settings))),
        sharded(journal),
        transcript_store,
        "test",
        settle_s=20,
        poll_s=0.2,
        progress=seen.append,
    )
    await task
    assert report.ok, report.differences
    assert (report.journal_messages, report.projection_messages, report.pending_messages) == (7, 7, 0)
    assert any(p.phase == "settle" for p in seen)


async def test_appends_after_the_snapshot_are_not_reported_as_extra(
    journal: SlateJournal, transcript_store: ClickHouseTranscriptStore, settings: Settings
) -> None:
    first = await append(journal, "t", 2)
    await journal.set_cursor(DEFAULT_CURSOR, 2)

    class GrowingStore:
        """The projection already holds a message appended while the journal was being counted."""

        async def thread_counts(self, environment: str):  # type: ignore[no-untyped-def]
            later = await append(journal, "t", 1, start=2) if not grown else []
            grown.append(True)
            await transcript_store.insert([row_of(m) for m in [*first, *later]])
            return await transcript_store.thread_counts(environment)

    grown: list[bool] = []
    report = await verify(
        local_shards((journal, Relay(journal, settings))),
        sharded(journal),
        GrowingStore(),
        "test",
        settle_s=0,
    )  # type: ignore[arg-type]
    assert report.ok, report.differences
    assert report.journal_messages == 3


async def test_threads_with_ids_no_longer_valid_are_reported_not_fatal(
    tmp_path: Path, transcript_store: ClickHouseTranscriptStore, settings: Settings
) -> None:
    """A thread id ending in a line feed (accepted before ids were matched in full) in the journal
    and in the projection, and one in the projection only (a record no journal holds): verify
    counts and names them escaped instead of failing to build their ThreadRef."""
    url = f"file://{tmp_path}/legacy-journal"
    journal = await SlateJournal.open(url, flush_interval_ms=1)
    kept = await append(journal, "t", 2)  # seq 1-2
    old_thread = kept[0].model_copy(
        update={"message_id": "m9\n", "thread_id": "t9\n", "offset": 0, "seq": 3, "content": "old"}
    )
    row_key = b"m/test/acme/t9\n/" + keys.offset_suffix(0)  # as the old code built it
    batch = WriteBatch()
    batch.put(row_key, old_thread.model_dump_json().encode())
    batch.put(keys.seq_key(3), row_key)
    await (await journal._db.write(batch)).await_durable()
    await journal.set_cursor(DEFAULT_CURSOR, 3)
    await journal.close()
    journal = await SlateJournal.open(url, flush_interval_ms=1)
    poison = kept[0].model_copy(update={"thread_id": "fz-poison\n", "message_id": "p1", "seq": 9})
    await transcript_store.insert([row_of(m) for m in [*kept, old_thread, poison]])
    try:
        report = await verify(
            local_shards((journal, Relay(journal, settings))),
            sharded(journal),
            transcript_store,
            "test",
            settle_s=0,
        )
    finally:
        await journal.close()

    assert report.differences == (ThreadDiff("acme", "fz-poison\n", "unknown_thread", 0, 1),)
    assert (report.journal_threads, report.journal_messages) == (2, 3)
    assert report.invalid_id_count == 2
    assert report.invalid_id_threads == ("acme/'fz-poison\\n'", "acme/'t9\\n'")
    assert render_differences(report.differences) == [
        "  acme/'fz-poison\\n': in the projection only (not in the journal) (journal 0, projection 1)"
    ]


async def test_counts_the_shards_other_nodes_write_through_views(
    tmp_path: Path, transcript_store: ClickHouseTranscriptStore, settings: Settings
) -> None:
    """Shards across nodes: this node writes shard 0, another node shard 1 (read through a view),
    nobody created shard 2 yet (empty). Every shard is counted; a row missing from the projection
    for a thread of the other node's shard is a defect, not pending."""
    sharded_settings = settings.model_copy(
        update={"data_dir": tmp_path, "journal_shards": 3, "journal_reader_poll_ms": 10}
    )
    writers = [
        await SlateJournal.open(sharded_settings.shard_journal(k), shard=k, shards=3, flush_interval_ms=1)
        for k in (0, 1)
    ]
    views = LazyJournalViews(sharded_settings)
    try:
        refs: dict[int, list[ThreadRef]] = {0: [], 1: []}
        i = 0
        while min(len(r) for r in refs.values()) < 2:
            ref = ThreadRef(environment="test", account_id="acme", thread_id=f"t{i}")
            shard = shard_of("test", "acme", ref.thread_id, 3)
            if shard in refs and len(refs[shard]) < 2:
                refs[shard].append(ref)
            i += 1
        stored: list[Message] = []
        for shard, writer in enumerate(writers):
            for ref in refs[shard]:
                news = [
                    NewMessage(message_id=f"{ref.thread_id}-{n}", role="user", content="hi") for n in range(3)
                ]
                stored += await writer.append(ref, "bot", None, news)
            await writer.set_cursor(DEFAULT_CURSOR, 6)  # each relay published its shard's 6 messages
        [here] = local_shards((writers[0], Relay(writers[0], sharded_settings)))
        journal = EveryShardJournal(ShardedJournal(3, {0: writers[0]}), views)

        async def verified() -> VerifyReport:
            return await verify(every_shard([here], views), journal, transcript_store, "test", settle_s=0)

        await transcript_store.insert([row_of(m) for m in stored[:-1]])  # the other node's last is missing
        deadline = asyncio.get_running_loop().time() + 5
        while (report := await verified()).journal_messages < 12:  # the view follows its writer
            assert asyncio.get_running_loop().time() < deadline, report
            await asyncio.sleep(0.05)
        last = stored[-1]
        assert report.differences == (ThreadDiff("acme", last.thread_id, "fewer", 3, 2),)
        assert (report.journal_threads, report.pending_messages) == (4, 0)
        await transcript_store.insert([row_of(last)])
        report = await verified()
        assert report.ok, report.differences
        assert (report.journal_messages, report.projection_messages) == (12, 12)
    finally:
        await views.close()
        for writer in writers:
            await writer.close()
