"""A consumer group's progress through the journal, kept outside the broker (`core.sequencing`).

`ProgressTracker(group_id, store)` is what the runtime keeps per processor:
- `load(scope)` reads the group's stored progress (at start). With the processor's
  `progress_scope()` (the store its effects live in), it first claims the scope
  (`ProgressStore.claim_scope`): progress made on another store is dropped, so a store created
  anew gets every record again; a claim that fails leaves the tracker disabled for this run
  (nothing skipped, nothing stored);
- `skippable(record)`: the record's stamp shows a seq the group already processed (seq <= the
  done value of its shard and partition, or the group's watermark of its shard): the runtime does
  not hand it to the processor again. This is what makes a republish from the lowest checkpoint
  cheap for a processor that was ahead: its old records are recognised from their headers,
  without decoding;
- `advance(records)`: after a batch's effects are durable (processed, dead-lettered or skipped),
  extend each (shard, partition)'s chain (`core.sequencing`: the records of several journal shards
  interleave in a partition, each shard's seqs form a chain of their own);
- `checkpoint()`: store what advanced, one `store.checkpoint` call per (topic, shard, partition
  count) of the batch, and take back the lifted values and the shard's watermark.

Only records carrying a valid stamp whose partition matches `partition_for(key, partitions)` count
(records of other topics, or produced by anything but a stamping relay, are ignored). Progress is
an optimisation with a conservative failure mode: when the store cannot be reached, `load` starts
from nothing (no record is skipped) and `checkpoint` keeps what advanced for a later call (it
retries at most every `retry_after_s` and logs at most once per outage); a store call taking more
than `timeout_s` counts as failed, so processing never waits long for it. A lower stored value
only means more is published again after a broker loss.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable

from core.sequencing import Stamp, partition_for
from core.stores.progress import PartitionKey, ProgressStore, ShardKey
from streams.runtime.processor import Record
from streams.sequencing import stamp_of

log = logging.getLogger("memstream.runtime.progress")


class ProgressTracker:
    """One consumer group's journal progress inside a runtime (module doc)."""

    def __init__(
        self,
        group_id: str,
        store: ProgressStore,
        *,
        retry_after_s: float = 10.0,
        timeout_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.group_id = group_id
        self.store = store
        self.retry_after_s = retry_after_s
        self.timeout_s = timeout_s
        self._clock = clock
        self._done: dict[PartitionKey, int] = {}
        self._watermarks: dict[ShardKey, int] = {}
        self._pending: dict[tuple[str, int, int], dict[int, int]] = {}
        self._retry_at = 0.0
        self._failing = False
        self.skipped = 0
        """Records recognised as already processed since start."""
        self.disabled = False
        """The scope could not be claimed: nothing is skipped or stored in this run."""

    def watermark(self, topic: str, shard: int = 0) -> int:
        """Every seq of journal `shard` <= this was processed by the group (as far as this tracker
        knows)."""
        return self._watermarks.get((topic, shard), 0)

    def done(self, topic: str, shard: int, partitions: int, partition: int) -> int:
        """Every seq of `shard` routed to the partition that is <= this was processed (as far as known)."""
        return max(self._done.get((topic, shard, partitions, partition), 0), self.watermark(topic, shard))

    async def load(self, scope: str | None = None) -> None:
        if scope is not None and not await self._claim(scope):
            return
        try:
            stored = await asyncio.wait_for(self.store.load(self.group_id), self.timeout_s)
        except Exception as exc:
            log.warning(
                "group %s: could not read its stored progress (%r); starting without it (nothing is skipped)",
                self.group_id,
                exc,
            )
            return
        for key, value in stored.done.items():
            self._done[key] = max(self._done.get(key, 0), value)
        for (topic, shard), value in stored.watermarks.items():
            self._watermarks[(topic, shard)] = max(self.watermark(topic, shard), value)

    async def _claim(self, scope: str) -> bool:
        try:
            dropped = await asyncio.wait_for(self.store.claim_scope(self.group_id, scope), self.timeout_s)
        except Exception as exc:
            self.disabled = True
            log.warning(
                "group %s: could not claim its progress for store %s (%r); running without stored "
                "progress (nothing is skipped or stored) until it restarts",
                self.group_id,
                scope,
                exc,
            )
            return False
        if dropped:
            log.warning(
                "group %s: its stored progress was made on another store than %s: dropped, every "
                "record is processed again",
                self.group_id,
                scope,
            )
        return True

    def skippable(self, record: Record) -> bool:
        """True when `record` carries a seq the group already processed (module doc)."""
        if self.disabled:
            return False
        stamp = self._stamp(record)
        return stamp is not None and stamp.seq <= self.done(
            record.topic, stamp.shard, stamp.partitions, record.partition
        )

    def advance(self, records: Iterable[Record]) -> None:
        """Extend the chains with `records`, in consumption order, whose effects are durable."""
        for record in records:
            stamp = self._stamp(record)
            if stamp is None:
                continue
            done = self.done(record.topic, stamp.shard, stamp.partitions, record.partition)
            if stamp.prev <= done < stamp.seq:
                self._done[(record.topic, stamp.shard, stamp.partitions, record.partition)] = stamp.seq
                pending = self._pending.setdefault((record.topic, stamp.shard, stamp.partitions), {})
                pending[record.partition] = stamp.seq

    async def checkpoint(self) -> None:
        """Store what advanced (module doc); never raises for the store's errors."""
        if self.disabled:
            self._pending.clear()
            return
        if not self._pending or self._clock() < self._retry_at:
            return
        for (topic, shard, partitions), done in list(self._pending.items()):
            try:
                stored = await asyncio.wait_for(
                    self.store.checkpoint(self.group_id, topic, shard, partitions, done), self.timeout_s
                )
            except Exception as exc:
                self._retry_at = self._clock() + self.retry_after_s
                if not self._failing:
                    self._failing = True
                    log.warning(
                        "group %s: could not store its progress (%r); processing goes on, retrying in %.0fs",
                        self.group_id,
                        exc,
                        self.retry_after_s,
                    )
                return
            del self._pending[(topic, shard, partitions)]
            for partition, value in stored.done.items():
                key = (topic, shard, partitions, partition)
                self._done[key] = max(self._done.get(key, 0), value)
            self._watermarks[(topic, shard)] = max(self.watermark(topic, shard), stored.watermark)
        if self._failing:
            self._failing = False
            log.info("group %s: its progress is stored again", self.group_id)

    def _stamp(self, record: Record) -> Stamp | None:
        stamp = stamp_of(record.headers)
        if stamp is None or record.key is None:
            return None
        if partition_for(record.key, stamp.partitions) != record.partition:
            return None  # not where a stamping relay puts that key: the stamp proves nothing here
        return stamp
