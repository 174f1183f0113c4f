"""The read loop of `rebuild clickhouse`: `journal.messages` into a transcript table until it holds
every seq of a range of each journal shard.

Each journal shard numbers its messages 1, 2, ... without gaps (`core.sharding.shards`; a record
names its shard, `Message.shard`), so "complete" is a fact about seqs, not about the broker's
(unreliable) high watermark: a bitmap per shard of the seqs inserted so far.

Contract of `JournalReading.run(phase, table, ranges)` (`ranges`: shard -> (lo, hi)):
- A row of a deleted message (`deleted`: the tombstones of the thread deletions, known before the
  read) is never inserted (counted in `details["deleted"]`); the seqs deletions removed from the
  journal are marked in `inserted` beforehand by the caller (`skip_deleted`, with the shard of
  each deleted thread), since the topic may lack them (a republish from the journal does not have
  them).
- Every record read is decoded with the projection's pure `processors.clickhouse_projection.decode`
  (an undecodable one is counted in `details["invalid"]` and skipped), given its context as the
  projection gives it (`processors.transcript_context.ThreadContext`: the rows written are the
  projection's) and inserted into `table` (None: the live table), whatever its seq: inserts are
  idempotent.
- Rows are inserted in batches: when `batch_size` are pending, when a read came back empty, when
  the oldest pending row has waited `flush_every_s`, and at once when the pending rows complete
  lo..hi. So a slow, steady trickle of records is inserted within `flush_every_s` and never waits
  for a full batch.
- It returns once every seq of lo..hi of every shard was inserted (an insert returns once stored).
- Progress is a seq of a range read for the first time. With none for `idle_timeout_s` (records
  of other seqs, e.g. later appends, do not count: they cannot complete a range) it inserts what it
  has read and raises RebuildFailed with the first seq still missing and why, judged from the
  cursor of the relay of its shard (the last seq it published): the relay has not published that
  seq yet, or it has and the topic lacks it (a broker that lost its data: `memstream republish
  --from-seq N`).
  Rows read are never dropped, so a failed catch-up into the live table leaves in it all it read.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field

from core.stores.deletions import SeqRanges, Tombstones
from core.stores.transcripts import TranscriptRow, TranscriptStore
from memstream.ops.rebuild_base import RebuildFailed, Reporter, Stall
from memstream.ops.topic_reader import RecordSource
from processors import clickhouse_projection
from processors.transcript_context import ThreadContext, entry_of, with_context
from streams.runtime.processor import InvalidMessage

log = logging.getLogger("memstream.ops.rebuild")

FLUSH_EVERY_S = 0.5
"""The longest a row read waits for its batch to fill before it is inserted."""


class SeqSet:
    """Which seqs were seen (a bitmap growing with the largest seq added)."""

    def __init__(self) -> None:
        self._bits = bytearray(1)

    def add(self, seq: int) -> None:
        if seq >= len(self._bits):
            self._bits.extend(bytes(max(seq + 1 - len(self._bits), len(self._bits))))
        if seq >= 1:
            self._bits[seq] = 1

    def __contains__(self, seq: int) -> bool:
        return 1 <= seq < len(self._bits) and self._bits[seq] == 1

    def count_in(self, lo: int, hi: int) -> int:
        """How many of lo..hi (inclusive) were seen."""
        return self._bits.count(1, max(lo, 1), hi + 1)

    def first_missing(self, lo: int, hi: int) -> int | None:
        """The smallest seq of lo..hi not seen (None if all were)."""
        for seq in range(max(lo, 1), hi + 1):
            if seq not in self:
                return seq
        return None


Ranges = Mapping[int, tuple[int, int]]
"""Per journal shard, the inclusive range of its seqs (lo, hi) a phase must insert."""


@dataclass
class JournalReading:
    """Reads `journal.messages` into the store, remembering which seqs of which shard it inserted
    (module doc). `published(shard)`: the cursor of the shard's relay, the last seq it published."""

    reader: RecordSource
    store: TranscriptStore
    published: Callable[[int], Awaitable[int]]
    report: Reporter
    batch_size: int
    idle_timeout_s: float
    details: dict[str, int]
    flush_every_s: float = FLUSH_EVERY_S
    inserted: defaultdict[int, SeqSet] = field(default_factory=lambda: defaultdict(SeqSet))
    deleted: Tombstones = field(default_factory=Tombstones)
    _context: ThreadContext | None = None

    def skip_deleted(self, ranges: Iterable[tuple[int, SeqRanges]]) -> None:
        """Count the seqs thread deletions removed from the journal as done: none will be inserted
        (`ranges`: each deleted thread's shard and seqs)."""
        for shard, seqs in ranges:
            for lo, hi in seqs:
                for seq in range(lo, hi + 1):
                    self.inserted[shard].add(seq)

    def _done(self, ranges: Ranges) -> int:
        return sum(self.inserted[shard].count_in(lo, hi) for shard, (lo, hi) in ranges.items())

    async def run(self, phase: str, table: str | None, ranges: Ranges) -> None:
        """Insert what the topic gives into `table` (None: the live one) until every seq of every
        shard's range was inserted (module doc); RebuildFailed when no seq of a range not read
        before arrives for `idle_timeout_s`."""
        total = sum(max(0, hi - lo + 1) for lo, hi in ranges.values())
        done = self._done(ranges)
        self.report(phase, done, total, force=True)
        stall = Stall(self.idle_timeout_s)
        pending: list[TranscriptRow] = []
        fresh: set[tuple[int, int]] = set()  # (shard, seq) of a range among `pending`, not inserted before
        oldest = 0.0  # when the oldest pending row was read
        while done < total:
            records = await self.reader.read()
            self.details["records"] += len(records)
            for record in records:
                try:
                    row = clickhouse_projection.decode(record)
                except InvalidMessage as exc:
                    self.details["invalid"] += 1
                    log.warning("rebuild clickhouse: skipping %s: %s", record.position, exc)
                    continue
                if self.deleted.deleted(row.environment, row.account_id, row.thread_id, row.seq):
                    self.details["deleted"] = self.details.get("deleted", 0) + 1
                    self.inserted[row.shard].add(row.seq)
                    continue
                if not pending:
                    oldest = time.monotonic()
                pending.append(row)
                lo, hi = ranges.get(row.shard, (1, 0))
                key = (row.shard, row.seq)
                if lo <= row.seq <= hi and row.seq not in self.inserted[row.shard] and key not in fresh:
                    fresh.add(key)
                    stall.progressed()
            if pending and (
                done + len(fresh) >= total
                or len(pending) >= self.batch_size
                or not records
                or time.monotonic() - oldest >= self.flush_every_s
            ):
                await self._insert(pending, table)
                pending, fresh = [], set()
                done = self._done(ranges)
            if done < total and stall.stalled:
                if pending:
                    await self._insert(pending, table)
                raise await self._stalled(ranges)
            self.report(phase, done, total, records=float(self.details["records"]))
        self.report(phase, done, total, force=True)

    async def _insert(self, rows: list[TranscriptRow], table: str | None) -> None:
        if self._context is None or self._context.table != table:
            self._context = ThreadContext(self.store, table)
        made = [entry_of(row) for row in rows]
        await self.store.insert(with_context(rows, await self._context.prior(made)), table=table)
        self._context.remember(made)
        for row in rows:
            self.inserted[row.shard].add(row.seq)
        self.details["inserted"] += len(rows)

    async def _stalled(self, ranges: Ranges) -> RebuildFailed:
        shard, missing, hi = next(
            (shard, missing, hi)
            for shard, (lo, hi) in sorted(ranges.items())
            if (missing := self.inserted[shard].first_missing(lo, hi)) is not None
        )  # some range is not complete
        published = await self.published(shard)
        topic = self.reader.topic
        waited = f"for {self.idle_timeout_s:g}s {topic} brought none of the seqs still missing"
        sharded = len(ranges) > 1 or shard != 0
        journal = f"journal shard {shard}" if sharded else "the journal"
        option = f" --shard {shard}" if sharded else ""
        if published < missing:
            return RebuildFailed(
                f"the relay has published {journal} up to seq {published} of {hi}: is it running (and "
                f"the broker reachable)? {waited}."
            )
        return RebuildFailed(
            f"the topic {topic} lacks seq {missing} of {journal} (the relay published up to {published}; "
            f"{waited}): run `memstream republish --from-seq {missing}{option}`, then rebuild again."
        )
