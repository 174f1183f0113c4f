"""`memstream rebuild clickhouse|qdrant`: build a fresh projection from its topic and swap it in.

Both run inside the node while the live processors keep running and writing to the live
projection. Both read their topic from the earliest offset with a private consumer (all
partitions assigned, a random group id, no offset ever committed), so no consumer group moves.
Neither relies on the broker's high watermark (wrong on Tansu): each knows from the source of
truth which records it must have seen.

ClickHouse (`rebuild_clickhouse`), from `journal.messages`:
1. `target` = the journal's last seq at start; a fresh rebuild table is created.
2. Records are decoded with the projection's pure `processors.clickhouse_projection.decode` and
   inserted into the rebuild table in batches. The journal numbers messages 1, 2, ... without
   gaps, so the rebuild is complete when every seq 1..target has been inserted (a bitmap of seen
   seqs; an insert returns once stored). While reading stalls for `idle_timeout_s`, it fails with
   the reason: the relay has not published that far yet, or the topic lacks a seq (a broker that
   lost its data: `memstream republish --from-seq N`).
3. `swap_in` exchanges the tables atomically (the old live table is dropped).
4. Catch-up: the live processor may have written messages after `target` into the old table
   before the swap. With `after` = the journal's last seq after the swap, the rebuild keeps reading
   until it also inserted every seq in (target, after] into the now-live table (inserts are
   idempotent); anything appended later is published after the swap, so the live processor writes
   it into the new table.
On any failure before the swap the rebuild table is dropped and the live table is untouched; a
failure of the catch-up (after the swap) says which seqs may be missing from the new table.

Qdrant (`rebuild_qdrant`), from `memory.entries` (a compacted topic; the last record of a key wins):
1. `begin_rebuild` opens a staging generation of the index; from then on the live projection's
   writes are mirrored into it and win over the rebuild's (`sinks.qdrant.generations`), so nothing
   the live projection applies during the rebuild is lost and no catch-up is needed.
2. Postgres is the authority: one snapshot of `memory_entries` (entry id -> version) and the
   outbox's max seq `S`. The rebuild has read enough when (a) the outbox relay published every
   row <= S and (b) for every entry of the snapshot the topic gave a record of at least its version
   (or a later tombstone): versions grow with every published change of an entry. Both only ever
   progress, so continuous writes cannot keep the rebuild from finishing; no progress for
   `idle_timeout_s` fails it with the reason. An entry the topic shows alive that is neither in
   the snapshot nor in Postgres now was deleted (entry ids are never reused): it is not written,
   whether or not its tombstone was read yet.
3. The last record of every key is planned with the projection's pure `plan` and written with its
   `ProjectionSink` into the staging generation, in batches; then `swap_in` makes it live at once.
On any failure the staging generation is discarded and the live collections are untouched.

Progress is reported through `progress` (phases `read`, `index`, `swap`, `catch-up`, `done`) with
the expected total and the rate; the final `RebuildReport` is also what the CLI prints.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import asyncpg
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from memstream.config import Settings
from memstream.engines import Engines
from memstream.errors import MemstreamError
from memstream.journal.base import Journal
from memstream.memory.outbox import ENTRIES_TOPIC
from memstream.ops.progress import Progress, ProgressCallback
from memstream.relay import DEFAULT_CURSOR, JOURNAL_TOPIC
from processors import clickhouse_projection, qdrant_projection
from sinks.clickhouse.base import TranscriptRow, TranscriptStore
from sinks.qdrant.base import CollectionRef
from sinks.qdrant.generations import RebuildableIndex, StagedIndex
from streams.runtime.processor import InvalidMessage, Record
from streams.topics import topic_name

log = logging.getLogger("memstream.ops.rebuild")

IDLE_TIMEOUT_S = 60.0
"""How long reading may make no progress before the rebuild fails with the reason."""
PROGRESS_EVERY_S = 0.5


class RebuildFailed(MemstreamError):
    """The rebuild could not complete; the live projection was left as it was."""

    code = "rebuild_failed"


@dataclass(frozen=True)
class RebuildReport:
    target: str  # "clickhouse" | "qdrant"
    rows: int  # rows/points in the fresh projection
    seconds: float
    details: dict[str, int] = field(default_factory=dict)


# ---- shared pieces ---------------------------------------------------------------------------------


class TopicReader:
    """Reads every partition of a topic from the earliest offset, without a consumer group's
    commits (random group id, assignment, auto-commit off). confluent-kafka calls run in a thread."""

    def __init__(self, settings: Settings, topic: str) -> None:
        self.topic = topic_name(settings, topic)
        self._consumer = Consumer(
            {
                "bootstrap.servers": settings.broker_bootstrap,
                "group.id": f"memstream-rebuild-{uuid.uuid4().hex[:12]}",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest",
                "allow.auto.create.topics": False,
            }
        )
        self.records = 0

    async def open(self, timeout_s: float = 10.0) -> None:
        def assign() -> None:
            try:
                topics = self._consumer.list_topics(self.topic, timeout=timeout_s).topics
            except KafkaException as exc:
                raise RebuildFailed(f"cannot list topic {self.topic}: {exc}") from None
            meta = topics.get(self.topic)
            if meta is None or meta.error is not None or not meta.partitions:
                raise RebuildFailed(f"topic {self.topic} does not exist (run `memstream topics apply`)")
            self._consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in meta.partitions])

        await asyncio.to_thread(assign)

    async def read(self, max_records: int = 2000, timeout_s: float = 0.5) -> list[Record]:
        """The next records (possibly none after `timeout_s`); broker errors are logged and skipped
        (librdkafka retries them)."""
        messages = await asyncio.to_thread(self._consumer.consume, max_records, timeout_s)
        out: list[Record] = []
        for msg in messages:
            err = msg.error()
            if err is not None:
                log.warning("rebuild: reading %s: %s", self.topic, err)
                continue
            offset, partition = msg.offset(), msg.partition()
            assert offset is not None and partition is not None
            timestamp = msg.timestamp()[1]
            out.append(
                Record(
                    topic=self.topic,
                    partition=partition,
                    offset=offset,
                    key=msg.key(),
                    value=msg.value(),
                    headers=(),  # neither projection reads headers
                    timestamp_ms=timestamp if timestamp >= 0 else None,
                )
            )
        self.records += len(out)
        return out

    async def close(self) -> None:
        await asyncio.to_thread(self._consumer.close)


class _Reporter:
    """Throttled progress with a rate."""

    def __init__(self, callback: ProgressCallback) -> None:
        self.callback = callback
        self._last = 0.0
        self._phase = ""
        self._phase_start = time.monotonic()
        self._phase_done = 0

    def __call__(
        self,
        phase: str,
        done: int,
        total: int | None,
        detail: str = "",
        *,
        force: bool = False,
        **figures: float,
    ) -> None:
        now = time.monotonic()
        if phase != self._phase:
            self._phase, self._phase_start, self._phase_done = phase, now, done
            force = True
        if not force and now - self._last < PROGRESS_EVERY_S:
            return
        self._last = now
        elapsed = now - self._phase_start
        rate = (done - self._phase_done) / elapsed if elapsed > 0 else 0.0
        self.callback(Progress(phase, done, total, detail, {"per_s": round(rate, 1), **figures}))


class SeqSet:
    """Which seqs were seen (a bitmap growing with the largest seq added)."""

    def __init__(self) -> None:
        self._bits = bytearray(1)

    def add(self, seq: int) -> None:
        if seq >= len(self._bits):
            self._bits.extend(bytes(max(seq + 1 - len(self._bits), len(self._bits))))
        if seq >= 1:
            self._bits[seq] = 1

    def count_in(self, lo: int, hi: int) -> int:
        """How many of lo..hi (inclusive) were seen."""
        return self._bits.count(1, max(lo, 1), hi + 1)

    def first_missing(self, lo: int, hi: int) -> int | None:
        """The smallest seq of lo..hi not seen (None if all were)."""
        for seq in range(max(lo, 1), hi + 1):
            if seq >= len(self._bits) or not self._bits[seq]:
                return seq
        return None


class _Stall:
    """Fails a read loop that made no progress for `timeout_s`."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.since = time.monotonic()

    def progressed(self) -> None:
        self.since = time.monotonic()

    @property
    def stalled(self) -> bool:
        return time.monotonic() - self.since > self.timeout_s


# ---- ClickHouse ----------------------------------------------------------------------------------------


async def rebuild_clickhouse(
    engines: Engines,
    *,
    progress: ProgressCallback,
    batch_size: int = 5000,
    idle_timeout_s: float = IDLE_TIMEOUT_S,
    relay_cursor: str = DEFAULT_CURSOR,
) -> RebuildReport:
    """Rebuild the transcript store from `journal.messages` and swap it in (module doc).
    Raises RebuildFailed (rebuild table dropped, live table untouched) or the store's errors."""
    journal = engines.journal
    if journal is None:
        raise RebuildFailed("rebuild clickhouse runs in the node (it needs the node's journal)")
    store = engines.transcripts()
    started = time.monotonic()
    await store.ensure_schema()
    target = await journal.last_seq()
    reading = _JournalReading(
        reader=TopicReader(engines.settings, JOURNAL_TOPIC),
        store=store,
        journal=journal,
        relay_cursor=relay_cursor,
        report=_Reporter(progress),
        batch_size=batch_size,
        idle_timeout_s=idle_timeout_s,
        details={"target_seq": target, "records": 0, "invalid": 0, "inserted": 0, "caught_up": 0},
    )
    table = await store.create_rebuild_table()
    try:
        try:
            await reading.reader.open()
            await reading.run("read", table, 1, target)
            reading.report("swap", 0, 1, f"swapping {table} in", force=True)
            await store.swap_in(table)
        except BaseException:
            await _quietly(store.drop_table(table), f"dropping rebuild table {table}")
            raise
        reading.report("swap", 1, 1, force=True)
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
        await reading.reader.close()
    rows = await store.row_count()
    seconds = time.monotonic() - started
    reading.report("done", rows, rows, f"{rows} rows in {seconds:.1f}s", force=True)
    return RebuildReport(target="clickhouse", rows=rows, seconds=seconds, details=reading.details)


@dataclass
class _JournalReading:
    """Reads `journal.messages` into the store, remembering which seqs it inserted."""

    reader: TopicReader
    store: TranscriptStore
    journal: Journal
    relay_cursor: str
    report: _Reporter
    batch_size: int
    idle_timeout_s: float
    details: dict[str, int]
    seen: SeqSet = field(default_factory=SeqSet)

    async def run(self, phase: str, table: str | None, lo: int, hi: int) -> None:
        """Insert what the topic gives into `table` (None: the live one) until every seq lo..hi
        was inserted; RebuildFailed when that stops progressing for `idle_timeout_s`."""
        total = max(0, hi - lo + 1)
        done = self.seen.count_in(lo, hi)
        self.report(phase, done, total, force=True)
        stall = _Stall(self.idle_timeout_s)
        pending: list[TranscriptRow] = []
        while done < total:
            records = await self.reader.read()
            self.details["records"] += len(records)
            for record in records:
                try:
                    pending.append(clickhouse_projection.decode(record))
                except InvalidMessage as exc:
                    self.details["invalid"] += 1
                    log.warning("rebuild clickhouse: skipping %s: %s", record.position, exc)
            if pending and (len(pending) >= self.batch_size or not records):
                await self._insert(pending, table)
                pending = []
                now_done = self.seen.count_in(lo, hi)
                if now_done > done:
                    done = now_done
                    stall.progressed()
            if stall.stalled:
                raise await self._stalled(lo, hi)
            self.report(phase, done, total, records=float(self.details["records"]))
        if pending:
            await self._insert(pending, table)
        self.report(phase, done, total, force=True)

    async def _insert(self, rows: list[TranscriptRow], table: str | None) -> None:
        await self.store.insert(rows, table=table)
        for row in rows:
            self.seen.add(row.seq)
        self.details["inserted"] += len(rows)

    async def _stalled(self, lo: int, hi: int) -> RebuildFailed:
        missing = self.seen.first_missing(lo, hi)
        published = await self.journal.get_cursor(self.relay_cursor)
        topic = self.reader.topic
        if published < hi:
            return RebuildFailed(
                f"the relay has published the journal up to seq {published} of {hi}: is it running (and "
                f"the broker reachable)? {topic} gave nothing new for {self.idle_timeout_s:.0f}s."
            )
        return RebuildFailed(
            f"the topic {topic} lacks seq {missing} (the relay published up to {published}): run "
            f"`memstream republish --from-seq {missing}`, then rebuild again."
        )


async def _quietly(call: Any, what: str) -> None:
    try:
        await call
    except Exception as exc:  # the original failure matters more
        log.warning("rebuild: %s failed: %s", what, exc)


# ---- Qdrant -----------------------------------------------------------------------------------------


@dataclass
class _EntriesState:
    """The last record of each key read so far, and what it says about its entry."""

    latest: dict[bytes, Record] = field(default_factory=dict)
    versions: dict[str, int | None] = field(default_factory=dict)  # entry_id -> version (None: deleted)
    refs: set[CollectionRef] = field(default_factory=set)
    invalid: int = 0

    def add(self, record: Record, model_id: str) -> None:
        try:
            ref, entry_id, event = qdrant_projection.decode(record, model_id)
        except InvalidMessage as exc:
            self.invalid += 1
            log.warning("rebuild qdrant: skipping %s: %s", record.position, exc)
            return
        assert record.key is not None  # decode checked it
        self.latest.pop(record.key, None)
        self.latest[record.key] = record
        self.versions[entry_id] = event.version if event is not None else None
        self.refs.add(ref)

    def covers(self, entry_id: str, version: int) -> bool:
        """Whether the topic gave `version` (or later, or a tombstone) of the entry."""
        seen = self.versions.get(entry_id, 0)
        return seen is None or seen >= version


async def _snapshot(pool: asyncpg.Pool) -> tuple[int, dict[str, int]]:
    """(the outbox's max seq, entry id -> version) in one snapshot."""
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        max_seq = await conn.fetchval("SELECT coalesce(max(seq), 0) FROM memory_outbox")
        rows = await conn.fetch("SELECT entry_id, version FROM memory_entries")
    return int(max_seq), {str(r["entry_id"]): int(r["version"]) for r in rows}


async def _gone(pool: asyncpg.Pool, state: _EntriesState, snapshot: dict[str, int]) -> set[str]:
    """Entries the topic shows alive that are neither in the snapshot nor in Postgres now: deleted
    (entry ids are never reused), so the rebuild does not write them, whether or not their
    tombstone has reached the topic yet."""
    live = [e for e, v in state.versions.items() if v is not None and e not in snapshot]
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
    report = _Reporter(progress)
    started = time.monotonic()
    generation = await index.begin_rebuild()
    reader = TopicReader(engines.settings, ENTRIES_TOPIC)
    try:
        await reader.open()
        max_seq, snapshot = await _snapshot(pool)
        state = _EntriesState()
        total = len(snapshot)
        report("read", 0, total, f"reading {reader.topic} (outbox up to seq {max_seq})", force=True)
        stall = _Stall(idle_timeout_s)
        best: int | None = None
        checked = 0.0
        while True:
            records = await reader.read()
            for record in records:
                state.add(record, embedder.model_id)
            covered = sum(1 for e, v in snapshot.items() if state.covers(e, v))
            report("read", covered, total, records=float(reader.records))
            if records and time.monotonic() - checked < 1.0:
                continue
            checked = time.monotonic()
            unpublished = int(
                await pool.fetchval("SELECT count(*) FROM memory_outbox WHERE seq <= $1", max_seq)
            )
            if unpublished == 0 and covered == total:
                break
            if best is None or unpublished + total - covered < best:
                best = unpublished + total - covered
                stall.progressed()
            elif stall.stalled:
                raise RebuildFailed(
                    f"reading {reader.topic} stopped progressing: {unpublished} outbox row(s) up to seq "
                    f"{max_seq} unpublished (is the outbox relay running?) and {total - covered} "
                    "entr(ies) of Postgres without their latest record on the topic. Nothing was swapped in."
                )
        report("read", total, total, force=True)
        gone = await _gone(pool, state, snapshot)
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
        await _quietly(index.discard_rebuild(generation), f"discarding generation {generation}")
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


async def _count_points(index: RebuildableIndex, state: _EntriesState) -> int:
    total = 0
    for ref in state.refs:
        total += await index.count(ref)
    return total
