"""ProgressTracker (unit): what it skips, how its chains advance, and that the store's failures
never stop processing."""

from __future__ import annotations

import asyncio
import logging

import pytest

from core.sequencing import PartitionBounds, Stamp, partition_for
from core.stores.progress import GroupProgress
from streams.runtime.processor import Record
from streams.runtime.progress import ProgressTracker
from streams.sequencing import stamp_headers
from tests.fakes.outage import Outage
from tests.fakes.progress import InMemoryProgress

TOPIC = "p.journal.messages"


def stamped(
    seq: int,
    prev: int,
    key: bytes = b"thread-1",
    partitions: int = 3,
    partition: int | None = None,
    shard: int = 0,
) -> Record:
    stamp = Stamp(seq, prev, partitions, shard)
    headers = tuple((k, v if isinstance(v, bytes) else None) for k, v in stamp_headers(stamp))
    where = partition_for(key, partitions) if partition is None else partition
    return Record(TOPIC, where, seq, key, b"{}", headers, None)


def down(store: InMemoryProgress) -> Outage[InMemoryProgress]:
    """`store` with Postgres down: every call raises ConnectionError until `restore()`."""
    return Outage(
        store, methods={"load", "checkpoint", "claim_scope"}, error=lambda: ConnectionError("postgres down")
    )


async def test_a_chain_advances_only_from_what_was_done() -> None:
    store = InMemoryProgress()
    tracker = ProgressTracker("g", store)
    p = partition_for(b"thread-1", 3)
    # the relay published seqs up to 20, all of them on partition p
    await store.save_bounds(TOPIC, PartitionBounds(3, 20, tuple(20 if i == p else 0 for i in range(3))))
    tracker.advance([stamped(5, 0), stamped(9, 5)])
    assert tracker.done(TOPIC, 0, 3, p) == 9
    tracker.advance([stamped(20, 12)])  # 12 is above what was done: a predecessor may be missing
    assert tracker.done(TOPIC, 0, 3, p) == 9
    tracker.advance([stamped(9, 5), stamped(12, 9), stamped(20, 12)])  # a republished copy fills it
    assert tracker.done(TOPIC, 0, 3, p) == 20
    await tracker.checkpoint()
    assert (await store.load("g")).done == {(TOPIC, 0, 3, i): 20 for i in range(3)}
    assert tracker.watermark(TOPIC) == 20


async def test_the_shards_of_one_partition_keep_chains_of_their_own() -> None:
    """Records of two journal shards interleave in one partition: each extends its shard's chain
    only, a seq done in one shard says nothing of the same seq in another, and each shard's
    progress is stored apart."""
    store = InMemoryProgress()
    tracker = ProgressTracker("g", store)
    p = partition_for(b"thread-1", 3)
    tracker.advance([stamped(1, 0, shard=0), stamped(1, 0, shard=1), stamped(2, 1, shard=0)])
    tracker.advance([stamped(5, 3, shard=1)])  # shard 1's seqs 2..3 of this partition are missing
    assert tracker.done(TOPIC, 0, 3, p) == 2
    assert tracker.done(TOPIC, 1, 3, p) == 1
    assert tracker.skippable(stamped(2, 1, shard=0))
    assert not tracker.skippable(stamped(2, 1, shard=1))
    await tracker.checkpoint()
    stored = (await store.load("g")).done
    assert stored[(TOPIC, 0, 3, p)] == 2 and stored[(TOPIC, 1, 3, p)] == 1
    again = ProgressTracker("g", store)
    await again.load()
    assert again.skippable(stamped(2, 1, shard=0)) and not again.skippable(stamped(2, 1, shard=1))


async def test_records_already_done_are_skippable_and_foreign_stamps_count_for_nothing() -> None:
    store = InMemoryProgress()
    p = partition_for(b"thread-1", 3)
    store.groups["g"] = GroupProgress(watermarks={(TOPIC, 0): 4}, done={(TOPIC, 0, 3, p): 10})
    tracker = ProgressTracker("g", store)
    await tracker.load()
    assert tracker.skippable(stamped(10, 7))
    assert tracker.skippable(stamped(3, 0, key=b"other-thread"))  # below the watermark, any partition
    assert not tracker.skippable(stamped(11, 10))
    wrong = stamped(8, 0, partition=(p + 1) % 3)  # not where the relay puts that key
    assert not tracker.skippable(wrong)
    tracker.advance([wrong])
    assert tracker.done(TOPIC, 0, 3, (p + 1) % 3) == 4
    plain = Record(TOPIC, p, 1, b"thread-1", b"{}", (("message_id", b"m"),), None)
    assert not tracker.skippable(plain)


async def test_store_failures_never_stop_processing(caplog: pytest.LogCaptureFixture) -> None:
    store = InMemoryProgress()
    outage = down(store)
    now = [0.0]
    tracker = ProgressTracker("g", outage.proxy, retry_after_s=10, timeout_s=0.2, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="memstream.runtime.progress"):
        await tracker.load()  # starts from nothing
        tracker.advance([stamped(1, 0)])
        await tracker.checkpoint()
        tracker.advance([stamped(2, 1)])
        await tracker.checkpoint()  # within retry_after_s: not even tried
    assert sum("could not store" in r.getMessage() for r in caplog.records) == 1
    outage.fail(None)  # now it hangs
    now[0] = 11.0
    await asyncio.wait_for(tracker.checkpoint(), 2)  # a hanging store times out
    assert (await store.load("g")).done == {}
    outage.restore()
    now[0] = 22.0
    await tracker.checkpoint()
    p = partition_for(b"thread-1", 3)
    stored = (await store.load("g")).done
    assert stored == {(TOPIC, 0, 3, i): 2 if i == p else 0 for i in range(3)}  # kept, stored once it could


def test_bounds_continue_across_batches_of_one_pass() -> None:
    """The stamps the tracker chains are the relay's (a sanity link between both halves)."""
    first, after = PartitionBounds.start(3, 0).stamp([(1, b"thread-1"), (2, b"thread-1")])
    second, _ = after.stamp([(3, b"thread-1")])
    assert [s.prev for _, s in first + second] == [0, 1, 2]


async def test_a_scope_that_cannot_be_claimed_disables_skipping_and_storing() -> None:
    """The stored progress may belong to another store: nothing is skipped on its word, and
    nothing is stored for it, until the runtime restarts."""
    store = InMemoryProgress()
    store.groups["g"] = GroupProgress(watermarks={(TOPIC, 0): 50})
    outage = down(store)
    tracker = ProgressTracker("g", outage.proxy)
    await tracker.load("clickhouse:new")
    outage.restore()
    assert tracker.disabled
    assert not tracker.skippable(stamped(5, 0))
    tracker.advance([stamped(5, 0)])
    await tracker.checkpoint()
    assert outage.calls["checkpoint"] == 0
    assert await store.load("g") == GroupProgress(watermarks={(TOPIC, 0): 50})


async def test_a_claimed_scope_loads_the_progress() -> None:
    store = InMemoryProgress()
    store.groups["g"] = GroupProgress(watermarks={(TOPIC, 0): 50})
    tracker = ProgressTracker("g", store)
    await tracker.load("clickhouse:same")
    assert not tracker.disabled
    assert tracker.skippable(stamped(5, 0))
