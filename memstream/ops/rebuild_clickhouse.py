"""`memstream rebuild clickhouse`: a fresh transcript table built from `journal.messages`, swapped in.

Runs inside the node while the live processor keeps writing to the live table. It reads the topic
from the earliest offset with a private consumer (`TopicReader`: no consumer group moves) and
knows from the journal, not the broker's high watermark (wrong on Tansu), which seqs it must have,
per journal shard (`core.sharding.shards`: each numbers its own seqs; with shards across nodes,
the ones other nodes write are read through read-only views: `memstream.sharding.shard_sources`):
1. `target` = each shard's last seq at start; a fresh rebuild table is created.
2. `JournalReading` inserts the topic into the rebuild table until it holds every seq 1..target
   of every shard (or fails, saying whether a relay is behind or the topic lacks a seq).
3. `swap_in` exchanges the tables atomically (the old live table is dropped).
4. Catch-up: the live processor may have written messages after `target` into the old table
   before the swap. With `after` = each shard's last seq after the swap, the rebuild keeps reading
   until it also inserted every seq in (target, after] of every shard into the now-live table
   (inserts are idempotent); anything appended later is published after the swap, so the live
   processor writes it into the new table.
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
journal no longer has count as done (in the shard of their thread: a thread lives in one shard, so
its tombstone's seqs are that shard's). A deletion completed while the rebuild reads deleted its
rows from the old table only: right after the swap, the register is read again and every
tombstone not known at the start is applied to the new live table and to the message vectors (and
its seqs count as done for the catch-up); later deletions reach them through the live processors.
The vectors of deletions known at the start: their messages are not in the new table, so the
prune deletes them.
Progress phases: `read`, `swap`, `catch-up`, `done`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from core.sharding.shards import shard_of
from core.stores.deletions import SeqRanges, Tombstones
from memstream.engines import Engines
from memstream.ops.journal_reading import JournalReading, Ranges
from memstream.ops.progress import ProgressCallback
from memstream.ops.rebuild_base import IDLE_TIMEOUT_S, RebuildFailed, RebuildReport, Reporter, quietly
from memstream.ops.topic_reader import TopicReader
from sinks.postgres.deletions import PostgresDeletions
from streams.journal_shards import ShardSources
from streams.relays.journal import JOURNAL_TOPIC


async def rebuild_clickhouse(
    engines: Engines,
    shards: ShardSources,
    *,
    progress: ProgressCallback,
    batch_size: int = 5000,
    idle_timeout_s: float = IDLE_TIMEOUT_S,
) -> RebuildReport:
    """Rebuild the transcript store from `journal.messages` and swap it in (module doc); `shards`:
    every journal shard (`ShardSource`: its seqs and its relay's durable cursor). The caller first
    makes sure the topic holds every shard's seqs from 1 (`JournalTopicGuard.ensure_full_history`).
    Raises RebuildFailed or the store's errors; before the swap, the live table is untouched."""
    if not shards:
        raise RebuildFailed("rebuild clickhouse runs in the node (it needs the node's journal)")
    count = engines.settings.journal_shards
    if len(shards) != count:
        raise RebuildFailed(
            f"rebuild clickhouse needs every journal shard ({len(shards)} of {count} were given)"
        )
    if engines.pool is None:
        raise RebuildFailed("rebuild clickhouse runs in the node (it needs the deletion register)")
    register = PostgresDeletions(engines.pool)
    store = engines.transcripts()
    vectors = engines.message_vectors()
    started = time.monotonic()
    await store.ensure_schema()
    vectors_before = await vectors.clock()
    source_of = {source.shard: source for source in shards}
    target = {source.shard: await source.last_seq() for source in shards}
    reader = TopicReader(engines.settings, JOURNAL_TOPIC)

    async def published(shard: int) -> int:  # the durable cursor of the shard's relay
        return await source_of[shard].published()

    def by_shard(deleted: Mapping[tuple[str, str, str], SeqRanges]) -> list[tuple[int, SeqRanges]]:
        return [(shard_of(*scope, count), seqs) for scope, seqs in deleted.items()]

    reading = JournalReading(
        reader=reader,
        store=store,
        published=published,
        report=Reporter(progress),
        batch_size=batch_size,
        idle_timeout_s=idle_timeout_s,
        details={
            **_seqs("target_seq", target),
            "records": 0,
            "invalid": 0,
            "inserted": 0,
            "caught_up": 0,
            "deleted": 0,
        },
        deleted=Tombstones(await register.tombstones()),
    )
    reading.skip_deleted(by_shard(await register.deleted_seqs()))
    table = await store.create_rebuild_table()
    try:
        try:
            await reader.open()
            await reading.run("read", table, {shard: (1, last) for shard, last in target.items()})
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
        reading.skip_deleted(by_shard(await register.deleted_seqs()))
        # catch-up: what the live processor wrote into the old table between our read and the swap
        after = {source.shard: await source.last_seq() for source in shards}
        reading.details.update(_seqs("target_seq_after_swap", after))
        before = reading.details["inserted"]
        catch_up: Ranges = {shard: (target[shard] + 1, last) for shard, last in after.items()}
        try:
            await reading.run("catch-up", None, catch_up)
        except RebuildFailed as exc:
            raise RebuildFailed(
                f"the rebuilt table was swapped in (every message up to {_described(target)}), but "
                f"catching up {_described(after, catch_up)} failed: {exc} Replay `clickhouse-projection` "
                "to fill them."
            ) from exc
        reading.details["caught_up"] = reading.details["inserted"] - before
    finally:
        await reader.close()
    await vectors.prune(vectors_before)
    rows = await store.row_count()
    seconds = time.monotonic() - started
    reading.report("done", rows, rows, f"{rows} rows in {seconds:.1f}s", force=True)
    return RebuildReport(target="clickhouse", rows=rows, seconds=seconds, details=reading.details)


def _seqs(name: str, seqs: Mapping[int, int]) -> dict[str, int]:
    """`{name: seq}` for one shard, `{name_shard_K: seq, ...}` for several (the report's details)."""
    if len(seqs) == 1 and 0 in seqs:
        return {name: seqs[0]}
    return {f"{name}_shard_{shard}": seq for shard, seq in sorted(seqs.items())}


def _described(seqs: Mapping[int, int], ranges: Ranges | None = None) -> str:
    """`seq 120` (one shard) or `seq 120 of shard 0, seq 98 of shard 1` (several); with `ranges`,
    each shard's range (`seq 121..130`)."""
    parts = []
    for shard, last in sorted(seqs.items()):
        text = f"seq {last}" if ranges is None else f"seq {ranges[shard][0]}..{ranges[shard][1]}"
        parts.append(text if len(seqs) == 1 and shard == 0 else f"{text} of shard {shard}")
    return ", ".join(parts)
