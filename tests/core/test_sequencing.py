"""Progress facts through the journal (core.sequencing): stamps, bounds, lifting, and a simulation
checking that a group's stored progress never claims a seq it did not process."""

from __future__ import annotations

import random
import time
import uuid

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


@pytest.mark.parametrize("seed", range(40))
async def test_stored_progress_never_claims_an_unprocessed_seq(seed: int) -> None:
    """Random journals, relay passes (rewinds, restarts, broker losses dropping the topic, batches
    published twice) and a consumer reading partitions at random speeds, sometimes jumping over
    records without processing them (a group reset to a later offset): after every step, every
    seq <= W and every seq of a partition <= its done value was processed. Once everything is
    processed and the relay stored its bounds, W reaches the relay's cursor."""
    rng = random.Random(seed)
    n = rng.choice([1, 3, 6])
    keys = [f"thread-{i}".encode() for i in range(rng.randint(1, 12))]
    journal: list[bytes] = []  # journal[seq - 1] = key
    topic = "journal.messages"
    logs: list[list[Record]] = [[] for _ in range(n)]
    positions = [0] * n
    processed: set[int] = set()
    store = InMemoryProgress()
    tracker = ProgressTracker("g", store)
    cursor = 0
    bounds: PartitionBounds | None = None

    def check() -> None:
        watermark = tracker.watermark(topic)
        assert all(seq in processed for seq in range(1, watermark + 1)), (watermark, sorted(processed))
        for (_, count, partition), value in store.groups.get("g", GroupProgress()).done.items():
            for seq in range(1, value + 1):
                if partition_for(journal[seq - 1], count) == partition:
                    assert seq in processed, (partition, value, seq)

    def publish(batch_size: int) -> None:
        nonlocal cursor, bounds
        batch = [
            (seq, journal[seq - 1]) for seq in range(cursor + 1, min(len(journal), cursor + batch_size) + 1)
        ]
        if not batch:
            return
        if bounds is None or bounds.cursor != cursor:
            bounds = PartitionBounds.start(n, cursor)
        stamps, after = bounds.stamp(batch)
        for (seq, key), (partition, stamp) in zip(batch, stamps, strict=True):
            headers = tuple((k, v if isinstance(v, bytes) else None) for k, v in stamp_headers(stamp))
            logs[partition].append(Record(topic, partition, len(logs[partition]), key, b"", headers, None))
            assert stamp.seq == seq
        if rng.random() < 0.15:
            return  # crash before the cursor: the batch is published again later
        store.bounds[(topic, n)] = after
        cursor, bounds = after.cursor, after

    async def consume(partition: int, count: int) -> None:
        records = logs[partition][positions[partition] : positions[partition] + count]
        positions[partition] += len(records)
        todo = [r for r in records if not tracker.skippable(r)]
        for record in todo:
            stamp = stamp_of(record.headers)
            assert stamp is not None
            processed.add(stamp.seq)
        tracker.advance(records)
        await tracker.checkpoint()

    for _ in range(400):
        action = rng.random()
        if action < 0.3:
            journal.extend(rng.choice(keys) for _ in range(rng.randint(1, 8)))
        elif action < 0.55:
            publish(rng.randint(1, 10))
        elif action < 0.82:
            await consume(rng.randrange(n), rng.randint(1, 6))
        elif action < 0.85:  # the group jumps over a few records without processing them
            partition = rng.randrange(n)
            positions[partition] = min(len(logs[partition]), positions[partition] + rng.randint(1, 2))
        elif action < 0.9:  # the broker loses the topic; the node rewinds to the stored watermark
            logs = [[] for _ in range(n)]
            positions = [0] * n
            cursor = min(cursor, (await store.load("g")).watermarks.get(topic, 0))
        elif action < 0.95:  # a rewind on the same topic (memstream republish)
            cursor = rng.randint(0, cursor)
        else:  # the consumer restarts from its stored progress (and from the start of the topic)
            tracker = ProgressTracker("g", store)
            await tracker.load()
            positions = [0] * n
        check()
    # drain: publish everything, consume everything, then the watermark reaches the cursor
    while cursor < len(journal):
        publish(10)
    for partition in range(n):
        await consume(partition, len(logs[partition]))
    check()
    if (await store.checkpoint("g", topic, n, {})).watermark < cursor:  # jumped-over records: republish
        cursor = (await store.load("g")).watermarks[topic]  # them, as a node would
        logs = [[] for _ in range(n)]
        positions = [0] * n
        while cursor < len(journal):
            publish(10)
        for partition in range(n):
            await consume(partition, len(logs[partition]))
        check()
    assert processed == set(range(1, len(journal) + 1))
    assert (await store.checkpoint("g", topic, n, {})).watermark == cursor == len(journal)
