"""`memstream rebuild qdrant`: agent memory's vector index rebuilt from `memory.entries`, swapped in.

Runs inside the node while the live processor keeps writing to the live index. It reads the topic
(compacted: the last record of a key wins) from the earliest offset with a private consumer
(`TopicReader`: no consumer group moves):
1. `begin_rebuild` opens a staging generation of the index; from then on the live projection's
   writes are mirrored into it and win over the rebuild's (`sinks.qdrant.generations`), so nothing
   the live projection applies during the rebuild is lost and no catch-up is needed.
2. Postgres is the authority: one snapshot of `memory_entries` (entry id -> version) and the
   outbox's max seq `S`. The rebuild has read enough when (a) the outbox relay published every
   row <= S and (b) for every entry of the snapshot the topic gave a record of at least its version
   (or a later tombstone): versions grow with every published change of an entry. Progress is
   either of them advancing (records of other entries or later versions do not count), so
   continuous writes cannot keep the rebuild from finishing. With no progress for
   `idle_timeout_s` it fails, saying which: outbox rows still unpublished (the outbox relay is not
   running or cannot reach the broker), or none left and the topic lacks the latest record of some
   entries (the broker lost them; the outbox deletes rows once published, so they cannot be
   republished from it). An entry the topic shows alive that is neither in the snapshot nor in
   Postgres now was deleted (entry ids are never reused): it is not written, whether or not its
   tombstone was read yet.
3. The last record of every key is planned with the projection's pure `plan` and written with its
   `ProjectionSink` into the staging generation, in batches; then `swap_in` makes it live at once.
On any failure the staging generation is discarded and the live collections are untouched.
Progress phases: `read`, `index`, `swap`, `done`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

import asyncpg

from core.stores.vectors import CollectionRef
from memstream.engines import Engines
from memstream.ops.progress import ProgressCallback
from memstream.ops.rebuild_base import IDLE_TIMEOUT_S, RebuildFailed, RebuildReport, Reporter, Stall, quietly
from memstream.ops.topic_reader import RecordSource, TopicReader
from processors import qdrant_projection
from sinks.qdrant.generations import RebuildableIndex, StagedIndex
from streams.relays.memory_entries import ENTRIES_TOPIC
from streams.runtime.processor import InvalidMessage, Record

log = logging.getLogger("memstream.ops.rebuild")

CHECK_EVERY_S = 1.0
"""While records keep coming, how often the outbox is asked what is left to publish."""


@dataclass
class EntriesState:
    """The last record of each key read so far, what it says about its entry, and how many
    entries of the Postgres `snapshot` (entry id -> version) it covers."""

    snapshot: dict[str, int]
    latest: dict[bytes, Record] = field(default_factory=dict)
    versions: dict[str, int | None] = field(default_factory=dict)  # entry_id -> version (None: deleted)
    refs: set[CollectionRef] = field(default_factory=set)
    invalid: int = 0
    covered: int = 0

    def add(self, record: Record, model_id: str) -> None:
        try:
            ref, entry_id, event = qdrant_projection.decode(record, model_id)
        except InvalidMessage as exc:
            self.invalid += 1
            log.warning("rebuild qdrant: skipping %s: %s", record.position, exc)
            return
        assert record.key is not None  # decode checked it
        wanted = self.snapshot.get(entry_id)
        before = wanted is not None and self.covers(entry_id, wanted)
        self.latest.pop(record.key, None)
        self.latest[record.key] = record
        self.versions[entry_id] = event.version if event is not None else None
        self.refs.add(ref)
        if wanted is not None:  # a duplicate of an older record may uncover an entry until it repeats
            self.covered += int(self.covers(entry_id, wanted)) - int(before)

    def covers(self, entry_id: str, version: int) -> bool:
        """Whether the topic gave `version` (or later, or a tombstone) of the entry."""
        seen = self.versions.get(entry_id, 0)
        return seen is None or seen >= version

    def first_uncovered(self) -> str | None:
        return next((e for e, v in self.snapshot.items() if not self.covers(e, v)), None)


async def _snapshot(pool: asyncpg.Pool) -> tuple[int, dict[str, int]]:
    """(the outbox's max seq, entry id -> version) in one snapshot."""
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        max_seq = await conn.fetchval("SELECT coalesce(max(seq), 0) FROM memory_outbox")
        rows = await conn.fetch("SELECT entry_id, version FROM memory_entries")
    return int(max_seq), {str(r["entry_id"]): int(r["version"]) for r in rows}


async def _unpublished(pool: asyncpg.Pool, max_seq: int) -> int:
    return int(await pool.fetchval("SELECT count(*) FROM memory_outbox WHERE seq <= $1", max_seq))


async def read_entries(
    reader: RecordSource,
    pool: asyncpg.Pool,
    state: EntriesState,
    max_seq: int,
    *,
    model_id: str,
    report: Reporter,
    idle_timeout_s: float,
) -> None:
    """Read `reader` into `state` until the outbox published every row <= `max_seq` and the
    topic covers every entry of the snapshot (module doc); RebuildFailed, with which of the two
    is lacking, after `idle_timeout_s` without progress."""
    total = len(state.snapshot)
    stall = Stall(idle_timeout_s)
    best: int | None = None
    checked = 0.0
    records_read = 0
    while True:
        records = await reader.read()
        records_read += len(records)
        for record in records:
            state.add(record, model_id)
        report("read", state.covered, total, records=float(records_read))
        if records and time.monotonic() - checked < CHECK_EVERY_S:
            continue
        checked = time.monotonic()
        unpublished = await _unpublished(pool, max_seq)
        if unpublished == 0 and state.covered == total:
            return
        left = unpublished + total - state.covered
        if best is None or left < best:
            best = left
            stall.progressed()
        elif stall.stalled:
            raise _stalled(reader.topic, state, unpublished, max_seq, idle_timeout_s)


def _stalled(topic: str, state: EntriesState, unpublished: int, max_seq: int, idle_s: float) -> RebuildFailed:
    lacking = len(state.snapshot) - state.covered
    waited = f"(no progress for {idle_s:g}s). Nothing was swapped in."
    if unpublished:
        return RebuildFailed(
            f"reading {topic}: {unpublished} outbox row(s) up to seq {max_seq} unpublished: "
            f"is the outbox relay running (and the broker reachable)? {waited}"
        )
    return RebuildFailed(
        f"the topic {topic} lacks the latest record of {lacking} memory entr(ies) (e.g. "
        f"{state.first_uncovered()}) although the outbox relay published them: the broker lost "
        f"records, which the outbox no longer holds {waited}"
    )


async def _gone(pool: asyncpg.Pool, state: EntriesState) -> set[str]:
    """Entries the topic shows alive that are neither in the snapshot nor in Postgres now: deleted
    (entry ids are never reused), so the rebuild does not write them, whether or not their
    tombstone has reached the topic yet."""
    live = [e for e, v in state.versions.items() if v is not None and e not in state.snapshot]
    if not live:
        return set()
    rows = await pool.fetch(
        "SELECT entry_id::text AS id FROM memory_entries WHERE entry_id = ANY($1::uuid[])", live
    )
    return set(live) - {r["id"] for r in rows}


async def rebuild_qdrant(
    engines: Engines,
    *,
    progress: ProgressCallback,
    batch_size: int = 256,
    idle_timeout_s: float = IDLE_TIMEOUT_S,
) -> RebuildReport:
    """Rebuild agent memory's vector index from `memory.entries` and swap it in (module doc).
    Raises RebuildFailed (staging discarded, live collections untouched) or the index's errors."""
    pool = engines.pool
    if pool is None:
        raise RebuildFailed("rebuild qdrant runs in the node (it needs the node's Postgres pool)")
    index = engines.index()
    if not isinstance(index, RebuildableIndex):
        raise RebuildFailed(f"the vector index {type(index).__name__} cannot be rebuilt")
    embedder = engines.embedder()
    report = Reporter(progress)
    started = time.monotonic()
    generation = await index.begin_rebuild()
    reader = TopicReader(engines.settings, ENTRIES_TOPIC)
    try:
        await reader.open()
        max_seq, snapshot = await _snapshot(pool)
        state = EntriesState(snapshot)
        total = len(snapshot)
        report("read", 0, total, f"reading {reader.topic} (outbox up to seq {max_seq})", force=True)
        await read_entries(
            reader,
            pool,
            state,
            max_seq,
            model_id=embedder.model_id,
            report=report,
            idle_timeout_s=idle_timeout_s,
        )
        report("read", total, total, force=True)
        gone = await _gone(pool, state)
        sink = qdrant_projection.ProjectionSink(StagedIndex(index, generation), embedder, engines.sparse())
        records_list = list(state.latest.values())
        planned = 0
        for start in range(0, len(records_list), batch_size):
            chunk = records_list[start : start + batch_size]
            plan = qdrant_projection.plan(chunk, embedder.model_id, datetime.now(UTC))
            for ref, entries in list(plan.upserts.items()):
                kept = [e for e in entries if e.entry_id not in gone]
                if len(kept) < len(entries):
                    plan.deletes.setdefault(ref, []).extend(e.entry_id for e in entries if e.entry_id in gone)
                    plan.upserts[ref] = kept
            if not plan.empty:
                await sink.write(plan)
            planned += len(chunk)
            report("index", planned, len(records_list))
        report("index", planned, len(records_list), force=True)
        report("swap", 0, 1, f"swapping generation {generation} in", force=True)
        await index.swap_in(generation)
    except BaseException:
        await quietly(index.discard_rebuild(generation), f"discarding generation {generation}")
        raise
    finally:
        await reader.close()
    points = await _count_points(index, state)
    seconds = time.monotonic() - started
    details = {
        "records": reader.records,
        "keys": len(state.latest),
        "invalid": state.invalid,
        "snapshot_entries": total,
        "outbox_max_seq": max_seq,
    }
    report("done", points, points, f"{points} points in {seconds:.1f}s", force=True)
    return RebuildReport(target="qdrant", rows=points, seconds=seconds, details=details)


async def _count_points(index: RebuildableIndex, state: EntriesState) -> int:
    total = 0
    for ref in state.refs:
        total += await index.count(ref)
    return total
