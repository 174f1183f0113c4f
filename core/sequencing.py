"""Progress through a numbered log, provable per partition without broker offsets (pure functions).

The journal relay publishes journal seqs 1, 2, 3, ... in order, each message to the partition of
its key. A consumer group wants one durable fact it can keep outside the broker: its *watermark*
W, "every seq <= W was processed". Broker offsets cannot give it: the embedded broker forgets
topics and offsets when it restarts, a topic can be recreated (a new incarnation with new
offsets), and another node may publish the same journal to another broker. So the relay states
facts about seqs only, which stay true on every broker and every incarnation of the topic:

- It chooses each record's partition itself: `partition_for(key, n)` is CRC-32 of the key modulo
  the partition count, librdkafka's default partitioner (`consistent_random`) for non-empty keys,
  so the mapping is what the producer would have chosen anyway.
- It stamps each record with three headers (`Stamp`, written by `streams.sequencing`): `seq`,
  `partitions` (n, the count the mapping used) and `prev_seq`: "every seq routed to this
  partition that is below `seq` is <= `prev_seq`" (the previous seq it published to that
  partition in this pass, or the pass's start cursor when there is none).
- After each confirmed batch it stores `PartitionBounds`: per partition p a bound b_p with "every
  seq routed to p that is <= cursor is <= b_p".

A consumer keeps per partition p a `done` value d_p: "every seq routed to p that is <= d_p was
processed". Processing a record (seq s, prev a) with a <= d_p (or a <= W) proves every seq of p up
to s processed: d_p becomes s (the chain). Otherwise nothing is concluded (a predecessor may be
missing: the record came from a later pass, or the consumer started in the middle of a topic).

`lift` combines both: when d_p >= b_p, every seq of p up to the bound's cursor is processed, so
d_p rises to that cursor; W is then the smallest d_p over all n partitions. This is what keeps an
idle partition from pinning W: a partition that received nothing since the pass started has
b_p = the pass start, and a partition whose last record was processed has d_p = b_p; both are
lifted to the relay's cursor. A partition with unprocessed records keeps d_p below b_p and holds W
back, as it must. Every value only ever rises; a fact from any pass or broker stays true.

Shards (`core.sharding.shards`). A deployment of N journal shards has N journals, each numbering
its own seqs 1, 2, 3, ... and each with a relay of its own, all publishing to the same topic with
the same partition mapping, so the records of several shards interleave in one partition. Every
fact above is about the seqs of ONE shard: the stamp carries its `shard`, a relay's
`PartitionBounds` are its shard's, and a consumer keeps `done` values d_(k,p) and a watermark W_k
per shard k. Within a partition the records of shard k still arrive in shard k's seq order within
a pass (one relay, one idempotent producer, per shard), and the records of other shards are not
seqs of shard k: they neither extend nor break shard k's chain. So the argument above holds for
each shard on its own, with every value indexed by the shard; a seq missing in one shard holds
back that shard's chain and watermark only. With one shard everything is shard 0, as it was
before shards existed (a record without a shard header is of shard 0).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


def partition_for(key: bytes, partitions: int) -> int:
    """The partition of `key` among `partitions`: librdkafka's default for a non-empty key."""
    if partitions < 1:
        raise ValueError("partitions must be >= 1")
    return zlib.crc32(key) % partitions


@dataclass(frozen=True, slots=True)
class Stamp:
    """What a record's headers say (module doc): its `seq`, its partition's `prev` bound, and the
    partition count `partitions` of the mapping, all within its journal `shard`."""

    seq: int
    prev: int
    partitions: int
    shard: int = 0


@dataclass(frozen=True)
class PartitionBounds:
    """The facts of the relay of journal `shard` after publishing up to `cursor` (module doc):
    `bounds[p]` bounds every seq of the shard routed to partition p that is <= `cursor`."""

    partitions: int
    cursor: int
    bounds: tuple[int, ...]
    shard: int = 0

    def __post_init__(self) -> None:
        if len(self.bounds) != self.partitions or self.partitions < 1:
            raise ValueError("bounds must have one value per partition")
        if self.shard < 0:
            raise ValueError("shard must be >= 0")

    @classmethod
    def start(cls, partitions: int, cursor: int, shard: int = 0) -> PartitionBounds:
        """A pass starting after `cursor`: every seq <= cursor is trivially <= cursor."""
        return cls(partitions, cursor, (cursor,) * partitions, shard)

    def stamp(self, records: Sequence[tuple[int, bytes]]) -> tuple[list[tuple[int, Stamp]], PartitionBounds]:
        """(partition, stamp) for each `(seq, key)` of `records` (ascending seqs after `cursor`),
        and the bounds once all of them are published. A seq missing between two records (the
        journal has none; this is defensive) may belong to any partition: every bound rises past it.
        """
        bounds = list(self.bounds)
        expected = self.cursor + 1
        out: list[tuple[int, Stamp]] = []
        for seq, key in records:
            if seq < expected:
                raise ValueError(f"seqs must ascend after the cursor: got {seq}, expected >= {expected}")
            if seq > expected:  # unknown routing of expected..seq-1
                bounds = [max(bound, seq - 1) for bound in bounds]
            partition = partition_for(key, self.partitions)
            stamp = Stamp(seq=seq, prev=bounds[partition], partitions=self.partitions, shard=self.shard)
            out.append((partition, stamp))
            bounds[partition] = seq
            expected = seq + 1
        cursor = records[-1][0] if records else self.cursor
        return out, PartitionBounds(self.partitions, cursor, tuple(bounds), self.shard)


@dataclass(frozen=True, slots=True)
class Mark:
    """One partition's bound as stored by a shard's relay: every seq of the shard routed to it that
    is <= `cursor` is <= `bound`."""

    bound: int
    cursor: int


def lift(
    partitions: int, marks: Mapping[int, Mark], done: Mapping[int, int], watermark: int
) -> tuple[dict[int, int], int]:
    """A group's per-partition `done` values of one shard raised by that shard's relay's `marks`,
    and its new watermark of the shard (module doc). Partitions without a mark keep their value; W
    rises only when all `partitions` are known (a partition with neither mark nor value counts as
    `watermark`)."""
    lifted: dict[int, int] = {}
    for partition in range(partitions):
        value = max(done.get(partition, 0), watermark)
        mark = marks.get(partition)
        if mark is not None and value >= mark.bound:
            value = max(value, mark.cursor)
        lifted[partition] = value
    return lifted, max(watermark, min(lifted.values()))
