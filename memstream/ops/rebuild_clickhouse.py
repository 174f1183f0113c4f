"""`memstream rebuild clickhouse`: a fresh transcript table built from `journal.messages`, swapped in.

Runs inside the node while the live processor keeps writing to the live table. It reads the topic
from the earliest offset with a private consumer (`TopicReader`: no consumer group moves) and
knows from the journal, not the broker's high watermark (wrong on Tansu), which seqs it must have:
1. `target` = the journal's last seq at start; a fresh rebuild table is created.
2. `JournalReading` inserts the topic into the rebuild table until it holds every seq 1..target
   (or fails, saying whether the relay is behind or the topic lacks a seq).
3. `swap_in` exchanges the tables atomically (the old live table is dropped).
4. Catch-up: the live processor may have written messages after `target` into the old table
   before the swap. With `after` = the journal's last seq after the swap, the rebuild keeps reading
   until it also inserted every seq in (target, after] into the now-live table (inserts are
   idempotent); anything appended later is published after the swap, so the live processor writes
   it into the new table.
On any failure before the swap the rebuild table is dropped and the live table is untouched; a
failure of the catch-up (after the swap) says which seqs may be missing from the new table (all
rows read were inserted into it).
5. Vectors: the message vectors (`transcript-vectors`, `core.stores.message_vectors`) are keyed
   like the rows, so every vector of a message the new table holds stays valid; the vectors
   inserted before the rebuild started whose message the new table no longer holds are deleted
   (`MessageVectorStore.prune`; a vector inserted after that is kept: its message may be one
   the live projection has not written into the new table yet).
Deletions (`core.thread_deletion`): the tombstones and the deleted seqs are loaded from the
register before reading, so no row of a deleted message enters the new table and the seqs the
journal no longer has count as done. A deletion completed while the rebuild reads deleted its
rows from the old table only: right after the swap, the register is read again and every
tombstone not known at the start is applied to the new live table and to the message vectors (and
its seqs count as done for the catch-up); later deletions reach them through the live processors.
The vectors of deletions known at the start: their messages are not in the new table, so the
prune deletes them.
Progress phases: `read`, `swap`, `catch-up`, `done`.
"""

from __future__ import annotations

import time

from core.stores.deletions import Tombstones
from memstream.engines import Engines
from memstream.ops.journal_reading import JournalReading
from memstream.ops.progress import ProgressCallback
from memstream.ops.rebuild_base import IDLE_TIMEOUT_S, RebuildFailed, RebuildReport, Reporter, quietly
from memstream.ops.topic_reader import TopicReader
from sinks.postgres.deletions import PostgresDeletions
from streams.relays.journal import DEFAULT_CURSOR, JOURNAL_TOPIC


async def rebuild_clickhouse(
    engines: Engines,
    *,
    progress: ProgressCallback,
    batch_size: int = 5000,
    idle_timeout_s: float = IDLE_TIMEOUT_S,
    relay_cursor: str = DEFAULT_CURSOR,
) -> RebuildReport:
    """Rebuild the transcript store from `journal.messages` and swap it in (module doc).
    Raises RebuildFailed or the store's errors; before the swap, the live table is untouched."""
    journal = engines.journal
    if journal is None:
        raise RebuildFailed("rebuild clickhouse runs in the node (it needs the node's journal)")
    if engines.pool is None:
        raise RebuildFailed("rebuild clickhouse runs in the node (it needs the deletion register)")
    register = PostgresDeletions(engines.pool)
    store = engines.transcripts()
    vectors = engines.message_vectors()
    started = time.monotonic()
    await store.ensure_schema()
    vectors_before = await vectors.clock()
    target = await journal.last_seq()
    reader = TopicReader(engines.settings, JOURNAL_TOPIC)
    reading = JournalReading(
        reader=reader,
        store=store,
        published=lambda: journal.get_cursor(relay_cursor),
        report=Reporter(progress),
        batch_size=batch_size,
        idle_timeout_s=idle_timeout_s,
        details={
            "target_seq": target,
            "records": 0,
            "invalid": 0,
            "inserted": 0,
            "caught_up": 0,
            "deleted": 0,
        },
        deleted=Tombstones(await register.tombstones()),
    )
    reading.skip_deleted(await register.deleted_seqs())
    table = await store.create_rebuild_table()
    try:
        try:
            await reader.open()
            await reading.run("read", table, 1, target)
            reading.report("swap", 0, 1, f"swapping {table} in", force=True)
            await store.swap_in(table)
        except BaseException:
            await quietly(store.drop_table(table), f"dropping rebuild table {table}")
            raise
        reading.report("swap", 1, 1, force=True)
        for tombstone in await register.tombstones():  # deleted while we read: from the old table only
            if reading.deleted.add(tombstone):
                await store.delete_thread(*tombstone.scope, tombstone.up_to_seq)
                await vectors.delete_thread(*tombstone.scope, tombstone.up_to_seq)
        reading.skip_deleted(await register.deleted_seqs())
        # catch-up: what the live processor wrote into the old table between our read and the swap
        after = await journal.last_seq()
        reading.details["target_seq_after_swap"] = after
        before = reading.details["inserted"]
        try:
            await reading.run("catch-up", None, target + 1, after)
        except RebuildFailed as exc:
            raise RebuildFailed(
                f"the rebuilt table was swapped in (every message up to seq {target}), but catching up "
                f"seq {target + 1}..{after} failed: {exc} Replay `clickhouse-projection` to fill them."
            ) from exc
        reading.details["caught_up"] = reading.details["inserted"] - before
    finally:
        await reader.close()
    await vectors.prune(vectors_before)
    rows = await store.row_count()
    seconds = time.monotonic() - started
    reading.report("done", rows, rows, f"{rows} rows in {seconds:.1f}s", force=True)
    return RebuildReport(target="clickhouse", rows=rows, seconds=seconds, details=reading.details)
