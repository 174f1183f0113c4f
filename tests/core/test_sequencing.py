"""Progress facts through the journal (core.sequencing): stamps, bounds, lifting, and a simulation
checking that a group's stored progress never claims a seq it did not process."""

from __future__ import annotations

import itertools
import random
import time
import uuid
from dataclasses import dataclass, field

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from core.sequencing import Mark, PartitionBounds, Stamp, lift, partition_for
from core.stores.progress import GroupProgress
from streams.runtime.processor import Record
from streams.runtime.progress import ProgressTracker
from streams.sequencing import stamp_headers, stamp_of
from tests.fakes.progress import InMemoryProgress


def test_partition_for_is_the_producers_default_partitioner(broker: str) -> None:
    """Explicit partitions must equal what the relay's producer chose before (and what existing
    topics hold): librdkafka's default for keyed records, on Tansu and on Apache Kafka."""
    topic = f"t{uuid.uuid4().hex[:10]}.partitioning"
    admin = AdminClient({"bootstrap.servers": broker})
    admin.create_topics([NewTopic(topic, 6, 1)])[topic].result(timeout=20)
    time.sleep(0.5)
    producer = Producer({"bootstrap.servers": broker, "enable.idempotence": True})
    delivered: list[tuple[bytes, int]] = []
    keys = [f"thread-{i}".encode() for i in range(200)] + [b"a", b"\xff\x00", "Zürich".encode()]
    for key in keys:
        producer.produce(
            topic, b"v", key, on_delivery=lambda err, msg: delivered.append((msg.key(), msg.partition()))
        )
    assert producer.flush(20) == 0
    assert len(delivered) == len(keys)
    assert all(partition == partition_for(key, 6) for key, partition in delivered)
    admin.delete_topics([topic])[topic].result(timeout=20)


def test_a_pass_stamps_each_record_with_its_partitions_previous_seq() -> None:
    keys = {seq: f"thread-{seq % 5}".encode() for seq in range(1, 41)}
    bounds = PartitionBounds.start(4, 10)
    stamps, after = bounds.stamp([(seq, keys[seq]) for seq in range(11, 41)])
    last_on: dict[int, int] = {}
    for seq, (partition, stamp) in zip(range(11, 41), stamps, strict=True):
        assert partition == partition_for(keys[seq], 4)
        assert stamp == Stamp(seq=seq, prev=last_on.get(partition, 10), partitions=4)
        last_on[partition] = seq
    assert after.cursor == 40
    assert after.bounds == tuple(last_on.get(p, 10) for p in range(4))
    # the next batch continues the chain
    more, _ = after.stamp([(41, keys[1])])
    assert more[0][1].prev == last_on[partition_for(keys[1], 4)]


def test_a_missing_seq_raises_every_bound_past_it() -> None:
    stamps, after = PartitionBounds.start(3, 0).stamp([(1, b"a"), (4, b"a")])
    assert stamps[1][1].prev == 3  # 2 and 3 may have been routed anywhere
    assert min(after.bounds) == 3
    with pytest.raises(ValueError, match="ascend"):
        after.stamp([(4, b"b")])


def test_stamp_headers_round_trip_and_malformed_stamps_are_ignored() -> None:
    stamp = Stamp(seq=12, prev=7, partitions=6)
    headers = [
        ("message_id", b"m-1"),
        *((k, v if isinstance(v, bytes) else None) for k, v in stamp_headers(stamp)),
    ]
    assert stamp_of(headers) == stamp
    assert stamp_of([("seq", b"12"), ("prev_seq", b"7")]) is None  # partitions missing
    assert stamp_of([("seq", b"12"), ("prev_seq", b"12"), ("partitions", b"6")]) is None  # prev must be below
    assert stamp_of([("seq", b"-1"), ("prev_seq", b"0"), ("partitions", b"6")]) is None
    assert stamp_of([("seq", b"x"), ("prev_seq", b"0"), ("partitions", b"6")]) is None
    assert stamp_of([("seq", b"3"), ("prev_seq", b"0"), ("partitions", b"0")]) is None
    assert stamp_of(None) is None


def test_a_stamp_names_its_shard_and_a_record_without_one_is_of_shard_0() -> None:
    stamp = Stamp(seq=12, prev=7, partitions=6, shard=3)
    headers = [(k, v if isinstance(v, bytes) else None) for k, v in stamp_headers(stamp)]
    assert ("shard", b"3") in headers
    assert stamp_of(headers) == stamp
    before_shards = [("seq", b"12"), ("prev_seq", b"7"), ("partitions", b"6")]  # what relays wrote
    assert stamp_of(before_shards) == Stamp(seq=12, prev=7, partitions=6, shard=0)
    for bad in (b"x", b"-1", b"256", b""):
        assert stamp_of([("shard", bad), *before_shards]) is None


def test_a_shards_bounds_stamp_its_records_with_the_shard() -> None:
    stamps, after = PartitionBounds.start(2, 0, shard=5).stamp([(1, b"a"), (2, b"b")])
    assert {stamp.shard for _, stamp in stamps} == {5}
    assert after.shard == 5
    with pytest.raises(ValueError, match="shard"):
        PartitionBounds(2, 0, (0, 0), shard=-1)


@pytest.mark.parametrize(
    ("marks", "done", "watermark", "lifted", "new_watermark"),
    [
        # every partition caught up with what the relay sent it: W = the relay's cursor
        ({0: Mark(5, 9), 1: Mark(9, 9)}, {0: 5, 1: 9}, 0, {0: 9, 1: 9}, 9),
        # an idle partition (nothing since the pass started at 4) does not pin W
        ({0: Mark(4, 9), 1: Mark(9, 9)}, {1: 9}, 4, {0: 9, 1: 9}, 9),
        # a partition with unprocessed records holds W back at what it did
        ({0: Mark(8, 9), 1: Mark(9, 9)}, {0: 6, 1: 9}, 0, {0: 6, 1: 9}, 6),
        # no mark for a partition: it keeps its value; unknown partitions count as W
        ({0: Mark(5, 9)}, {0: 5}, 2, {0: 9, 1: 2}, 2),
        # W never goes down (a fact from before stays true)
        ({0: Mark(8, 9), 1: Mark(8, 9)}, {}, 7, {0: 7, 1: 7}, 7),
        # lifting is by the partition's own values or W
        ({0: Mark(3, 20), 1: Mark(3, 20)}, {0: 1}, 3, {0: 20, 1: 20}, 20),
    ],
)
def test_lift(
    marks: dict[int, Mark], done: dict[int, int], watermark: int, lifted: dict[int, int], new_watermark: int
) -> None:
    assert lift(2, marks, done, watermark) == (lifted, new_watermark)


# ---- a simulation of relays, broker losses and a consumer, checking every stored claim -------------


@dataclass
class _Shard:
    """One journal shard of the simulation: its journal (keys by seq), its relay's cursor and bounds."""

    shard: int
    journal: list[bytes] = field(default_factory=list)  # journal[seq - 1] = key
    cursor: int = 0
    bounds: PartitionBounds | None = None


@pytest.mark.parametrize("seed", range(40))
async def test_stored_progress_never_claims_an_unprocessed_seq(seed: int) -> None:
    """Random journal shards (1 to 3, each with its own seqs and relay, all publishing to the same
    partitions, interleaved), relay passes (rewinds, restarts, broker losses dropping the topic,
    batches published twice) and a consumer reading partitions at random speeds, sometimes jumping
    over records without processing them (a group reset to a later offset): after every step,
    every seq of a shard <= the shard's W and every seq of a shard routed to a partition <= its
    done value was processed. Once everything is processed and the relays stored their bounds,
    each shard's W reaches its relay's cursor."""
    rng = random.Random(seed)
    n = rng.choice([1, 3, 6])
    keys = [f"thread-{i}".encode() for i in range(rng.randint(1, 12))]
    shards = [_Shard(k) for k in range(rng.choice([1, 2, 3]))]
    topic = "journal.messages"
    logs: list[list[Record]] = [[] for _ in range(n)]
    positions = [0] * n
    processed: set[tuple[int, int]] = set()  # (shard, seq)
    store = InMemoryProgress()
    tracker = ProgressTracker("g", store)

    def check() -> None:
        for shard in shards:
            watermark = tracker.watermark(topic, shard.shard)
            assert all((shard.shard, seq) in processed for seq in range(1, watermark + 1)), (shard, watermark)
        for (_, k, count, partition), value in store.groups.get("g", GroupProgress()).done.items():
            journal = shards[k].journal
            for seq in range(1, value + 1):
                if partition_for(journal[seq - 1], count) == partition:
                    assert (k, seq) in processed, (k, partition, value, seq)

    def publish(shard: _Shard, batch_size: int) -> None:
        journal, cursor = shard.journal, shard.cursor
        batch = [
            (seq, journal[seq - 1]) for seq in range(cursor + 1, min(len(journal), cursor + batch_size) + 1)
        ]
        if not batch:
            return
        if shard.bounds is None or shard.bounds.cursor != cursor:
            shard.bounds = PartitionBounds.start(n, cursor, shard.shard)
        stamps, after = shard.bounds.stamp(batch)
        for (seq, key), (partition, stamp) in zip(batch, stamps, strict=True):
            headers = tuple((k, v if isinstance(v, bytes) else None) for k, v in stamp_headers(stamp))
            logs[partition].append(Record(topic, partition, len(logs[partition]), key, b"", headers, None))
            assert (stamp.seq, stamp.shard) == (seq, shard.shard)
        if rng.random() < 0.15:
            return  # crash before the cursor: the batch is published again later
        store.bounds[(topic, shard.shard, n)] = after
        shard.cursor, shard.bounds = after.cursor, after

    async def consume(partition: int, count: int) -> None:
        records = logs[partition][positions[partition] : positions[partition] + count]
        positions[partition] += len(records)
        todo = [r for r in records if not tracker.skippable(r)]
        for record in todo:
            stamp = stamp_of(record.headers)
            assert stamp is not None
            processed.add((stamp.shard, stamp.seq))
        tracker.advance(records)
        await tracker.checkpoint()

    async def republish_lost() -> None:
        nonlocal logs, positions
        logs = [[] for _ in range(n)]
        positions = [0] * n
        stored = (await store.load("g")).watermarks
        for shard in shards:
            shard.cursor = min(shard.cursor, stored.get((topic, shard.shard), 0))

    for _ in range(400):
        action = rng.random()
        if action < 0.3:
            rng.choice(shards).journal.extend(rng.choice(keys) for _ in range(rng.randint(1, 8)))
        elif action < 0.55:
            publish(rng.choice(shards), rng.randint(1, 10))
        elif action < 0.82:
            await consume(rng.randrange(n), rng.randint(1, 6))
        elif action < 0.85:  # the group jumps over a few records without processing them
            partition = rng.randrange(n)
            positions[partition] = min(len(logs[partition]), positions[partition] + rng.randint(1, 2))
        elif action < 0.9:  # the broker loses the topic; the node rewinds each shard to its watermark
            await republish_lost()
        elif action < 0.95:  # a rewind of one shard on the same topic (memstream republish)
            shard = rng.choice(shards)
            shard.cursor = rng.randint(0, shard.cursor)
        else:  # the consumer restarts from its stored progress (and from the start of the topic)
            tracker = ProgressTracker("g", store)
            await tracker.load()
            positions = [0] * n
        check()

    async def drain() -> None:  # publish everything, consume everything
        for shard in shards:
            while shard.cursor < len(shard.journal):
                publish(shard, 10)
        for partition in range(n):
            await consume(partition, len(logs[partition]))
        check()

    async def watermarks() -> list[int]:
        return [(await store.checkpoint("g", topic, shard.shard, n, {})).watermark for shard in shards]

    await drain()
    if await watermarks() != [shard.cursor for shard in shards]:  # jumped-over records: republish
        await republish_lost()  # them, as a node would
        await drain()
    assert processed == {(shard.shard, seq) for shard in shards for seq in range(1, len(shard.journal) + 1)}
    assert await watermarks() == [shard.cursor for shard in shards] == [len(s.journal) for s in shards]


async def test_a_seq_missing_in_one_shard_holds_back_only_that_shard() -> None:
    """Two shards publish into the same two partitions; shard 1's seq 2 never arrives (lost before
    the broker confirmed it, say): shard 1 stops at seq 1 in its partition and in its watermark,
    while shard 0, interleaved in the same partitions, reaches its end."""
    topic, n = "journal.messages", 2
    store = InMemoryProgress()
    tracker = ProgressTracker("g", store)
    published: list[list[tuple[int, bytes, tuple[tuple[str, bytes | None], ...]]]] = []
    for shard, keys in ((0, [b"a", b"b", b"a", b"b"]), (1, [b"a", b"a", b"a"])):
        stamps, after = PartitionBounds.start(n, 0, shard).stamp(list(enumerate(keys, start=1)))
        await store.save_bounds(topic, after)
        published.append([])
        for (seq, key), (partition, stamp) in zip(enumerate(keys, start=1), stamps, strict=True):
            if (shard, seq) != (1, 2):  # shard 1's seq 2 is never delivered
                headers = tuple((k, v if isinstance(v, bytes) else None) for k, v in stamp_headers(stamp))
                published[shard].append((partition, key, headers))
    records: list[Record] = []
    for pair in itertools.zip_longest(*published):  # interleaved, each shard in its own order
        for partition, key, headers in filter(None, pair):
            records.append(Record(topic, partition, len(records), key, b"", headers, None))
    tracker.advance(records)
    await tracker.checkpoint()
    assert tracker.watermark(topic, 0) == 4
    assert tracker.watermark(topic, 1) == 1
    shared = partition_for(b"a", n)
    assert tracker.done(topic, 1, n, shared) == 1
    assert tracker.done(topic, 0, n, shared) == 4  # the same partition, the other shard
    stamps = [stamp_of(r.headers) for r in records]
    not_done = [
        (s.shard, s.seq) for r, s in zip(records, stamps, strict=True) if s and not tracker.skippable(r)
    ]
    assert not_done == [(1, 3)]  # after the gap in its shard: it would be processed again
