"""`JournalReading` (the read loop of `rebuild clickhouse`) over a scripted reader and the in-memory
store: when rows are inserted, when it completes, and why it fails."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

import pytest

from core.stores.transcripts import TranscriptStore
from memstream.ops.journal_reading import JournalReading
from memstream.ops.rebuild_base import RebuildFailed, Reporter
from streams.runtime.processor import Record
from tests.fakes.transcripts import InMemoryTranscriptStore
from tests.processors.transcript_support import message, record_of


def record(seq: int, shard: int = 0) -> Record:
    return record_of(message(f"t{shard}", seq - 1, f"hello {seq}", seq=seq, shard=shard), seq)


class ScriptedReader:
    """Each read waits `every_s`, then returns `script(n)`'s records for the n-th read (from 1):
    seqs of shard 0, or (shard, seq) pairs."""

    topic = "test.journal.messages"

    def __init__(
        self, script: Callable[[int], Sequence[int | tuple[int, int]]], every_s: float = 0.01
    ) -> None:
        self.script = script
        self.every_s = every_s
        self.reads = 0

    async def read(self, max_records: int = 2000, timeout_s: float = 0.5) -> list[Record]:
        await asyncio.sleep(self.every_s)
        self.reads += 1
        items = [(0, item) if isinstance(item, int) else item for item in self.script(self.reads)]
        return [record(seq, shard) for shard, seq in items]


def seqs(store: InMemoryTranscriptStore, table: str | None, shard: int = 0) -> set[int]:
    """The seqs of `shard` inserted into `table` (None: the live table)."""
    return {r.seq for t, rows in store.inserts if t == table for r in rows if r.shard == shard}


def reading(
    reader: ScriptedReader, store: TranscriptStore, *, published: int, idle_s: float
) -> JournalReading:
    async def cursor(shard: int) -> int:
        return published

    return JournalReading(
        reader=reader,
        store=store,
        published=cursor,
        report=Reporter(lambda _: None),
        batch_size=5000,
        idle_timeout_s=idle_s,
        details={"records": 0, "invalid": 0, "inserted": 0},
    )


def one_per_read(n: int) -> list[int]:
    """A steady trickle: seq n at the n-th read, never an empty read."""
    return [n]


async def test_a_steady_trickle_completes_without_waiting_for_a_full_batch() -> None:
    store = InMemoryTranscriptStore()
    table = await store.create_rebuild_table()
    run = reading(ScriptedReader(one_per_read), store, published=10**6, idle_s=1.0)
    started = time.monotonic()
    await asyncio.wait_for(run.run("read", table, {0: (1, 3)}), 5)
    assert time.monotonic() - started < 0.5  # the read completing the range was inserted at once
    assert seqs(store, table) == {1, 2, 3}


async def test_rows_beyond_the_range_are_inserted_within_the_flush_interval() -> None:
    # a catch-up of 1..40 fed one record per read: inserted in batches by time, not at the end
    store = InMemoryTranscriptStore()
    run = reading(ScriptedReader(one_per_read, every_s=0.05), store, published=10**6, idle_s=2.0)
    run.flush_every_s = 0.2
    await asyncio.wait_for(run.run("catch-up", None, {0: (1, 40)}), 10)
    assert seqs(store, None) == set(range(1, 41))
    assert len(store.inserts) > 3  # batches by time, well below batch_size
    assert all(len(rows) <= 6 for _, rows in store.inserts[:-1])


@pytest.mark.parametrize("published", [3, 10])
async def test_a_seq_the_topic_lacks_fails_although_later_records_keep_coming(published: int) -> None:
    # seqs 1, 2, then only live appends 5, 6, ...: seq 3 never comes though the relay published it
    # (3: the relay has not published all of 1..4 yet, but what it has includes the missing seq)
    store = InMemoryTranscriptStore()
    table = await store.create_rebuild_table()
    reader = ScriptedReader(lambda n: [n] if n <= 2 else [n + 2])
    run = reading(reader, store, published=published, idle_s=0.5)
    with pytest.raises(RebuildFailed, match=r"lacks seq 3 .*memstream republish --from-seq 3"):
        await asyncio.wait_for(run.run("read", table, {0: (1, 4)}), 5)
    assert {1, 2} <= seqs(store, table)


async def test_a_relay_behind_is_named_as_the_reason() -> None:
    store = InMemoryTranscriptStore()
    table = await store.create_rebuild_table()
    run = reading(ScriptedReader(lambda n: [n] if n <= 2 else []), store, published=2, idle_s=0.5)
    behind = "relay has published the journal up to seq 2 of 4: is it running"
    with pytest.raises(RebuildFailed, match=behind):
        await asyncio.wait_for(run.run("read", table, {0: (1, 4)}), 5)


async def test_a_failed_catch_up_still_inserts_every_row_it_read() -> None:
    # catch-up of 5..8 into the live table: 5 and 6 arrive, 7 never, later appends keep coming
    store = InMemoryTranscriptStore()
    reader = ScriptedReader(lambda n: [n + 4] if n <= 2 else [n + 100])
    run = reading(reader, store, published=8, idle_s=0.5)
    run.flush_every_s = 60.0  # neither the timer nor the batch size inserts them: the failure does
    run.batch_size = 10**6
    with pytest.raises(RebuildFailed, match="lacks seq 7"):
        await asyncio.wait_for(run.run("catch-up", None, {0: (5, 8)}), 5)
    assert {5, 6} <= seqs(store, None)


async def test_every_shard_completes_its_own_range() -> None:
    """Two journal shards each number seqs from 1: seq 2 of shard 0 does not stand for seq 2 of
    shard 1, and the read ends only once both ranges are in."""
    store = InMemoryTranscriptStore()
    table = await store.create_rebuild_table()
    script = [[(0, 1), (1, 1), (0, 2)], [(0, 3)], [(1, 2)], [(1, 3)]]
    run = reading(
        ScriptedReader(lambda n: script[n - 1] if n <= len(script) else []), store, published=3, idle_s=2
    )
    await asyncio.wait_for(run.run("read", table, {0: (1, 3), 1: (1, 3)}), 5)
    assert seqs(store, table, 0) == seqs(store, table, 1) == {1, 2, 3}


async def test_a_seq_one_shard_lacks_is_named_with_its_shard() -> None:
    store = InMemoryTranscriptStore()
    table = await store.create_rebuild_table()
    reader = ScriptedReader(lambda n: [(0, 1), (0, 2), (1, 1)] if n == 1 else [])
    run = reading(reader, store, published=2, idle_s=0.5)
    failed = r"lacks seq 2 of journal shard 1 .*memstream republish --from-seq 2 --shard 1"
    with pytest.raises(RebuildFailed, match=failed):
        await asyncio.wait_for(run.run("read", table, {0: (1, 2), 1: (1, 2)}), 5)
    run.skip_deleted([(1, ((2, 2),))])  # a deleted thread's seq of shard 1: never on the topic
    await asyncio.wait_for(run.run("read", table, {0: (1, 2), 1: (1, 2)}), 5)
