"""The progress stores' contract (`core.stores.progress`: `BoundsStore`, `ProgressStore`, and
`PostgresProgress`'s watermark reads), on every store: the in-memory fake and Postgres. Relay
bounds, group checkpoints lifted by them, watermarks, scopes. What only Postgres does (a partial
set of bound rows) is in `tests/sinks/postgres/test_progress.py`."""

from __future__ import annotations

import asyncio

import pytest

from core.sequencing import PartitionBounds
from sinks.postgres.progress import PostgresProgress
from tests.fakes.progress import InMemoryProgress

TOPIC = "p.journal.messages"

Progress = InMemoryProgress | PostgresProgress


@pytest.fixture(params=["memory", pytest.param("postgres", marks=pytest.mark.engine)])
def progress(request: pytest.FixtureRequest) -> Progress:
    """The store under test, empty."""
    if request.param == "memory":
        return InMemoryProgress()
    return PostgresProgress(request.getfixturevalue("pool"))


async def test_bounds_round_trip_per_partition_count(progress: Progress) -> None:
    assert await progress.load_bounds(TOPIC, 0, 3) is None
    bounds = PartitionBounds(3, 40, (38, 40, 25))
    await progress.save_bounds(TOPIC, bounds)
    assert await progress.load_bounds(TOPIC, 0, 3) == bounds
    assert await progress.load_bounds(TOPIC, 0, 6) is None  # another partition count
    await progress.save_bounds(TOPIC, PartitionBounds(3, 10, (10, 10, 10)))  # after a rewind: replaced
    assert await progress.load_bounds(TOPIC, 0, 3) == PartitionBounds(3, 10, (10, 10, 10))


async def test_checkpoint_lifts_with_the_relays_bounds_and_only_ever_rises(progress: Progress) -> None:
    # nothing from the relay yet: values are stored, the watermark cannot rise
    stored = await progress.checkpoint("g", TOPIC, 0, 3, {0: 7})
    assert stored.watermark == 0
    await progress.save_bounds(TOPIC, PartitionBounds(3, 20, (19, 20, 3)))
    # partition 0 lags (7 < 19), 1 is caught up, 2 has seqs up to 3 not processed yet
    stored = await progress.checkpoint("g", TOPIC, 0, 3, {1: 20})
    assert stored.watermark == 0
    assert stored.done == {0: 7, 1: 20, 2: 0}
    stored = await progress.checkpoint("g", TOPIC, 0, 3, {0: 19, 2: 3})
    assert stored.watermark == 20
    assert stored.done == {0: 20, 1: 20, 2: 20}
    # a lower value (another member, an old batch) lowers nothing
    stored = await progress.checkpoint("g", TOPIC, 0, 3, {0: 5})
    assert stored.watermark == 20 and stored.done[0] == 20
    loaded = await progress.load("g")
    assert loaded.watermarks == {(TOPIC, 0): 20}
    assert loaded.done == {(TOPIC, 0, 3, 0): 20, (TOPIC, 0, 3, 1): 20, (TOPIC, 0, 3, 2): 20}
    assert (await progress.load("other")).done == {}


async def test_low_watermark_is_computed_afresh_and_an_unknown_group_counts_zero(progress: Progress) -> None:
    await progress.save_bounds(TOPIC, PartitionBounds(2, 10, (9, 10)))
    await progress.checkpoint("a", TOPIC, 0, 2, {0: 9, 1: 10})
    await progress.checkpoint("b", TOPIC, 0, 2, {0: 4, 1: 10})  # partition 0 lags
    assert await progress.low_watermark(["a", "b"], TOPIC) == 4
    assert await progress.low_watermark(["a"], TOPIC) == 10
    assert await progress.low_watermark(["a", "never-ran"], TOPIC) == 0
    assert await progress.low_watermark([], TOPIC) == 0
    # the relay went on and "a" is idle: nothing new for its partitions -> still caught up
    await progress.save_bounds(TOPIC, PartitionBounds(2, 30, (9, 10)))
    assert await progress.watermark("a", TOPIC) == 30
    await progress.forget("a")
    assert await progress.watermark("a", TOPIC) == 0


async def test_each_shard_keeps_its_own_bounds_done_values_and_watermark(progress: Progress) -> None:
    """Journal shards number their own seqs: the bounds, done values and watermark of one shard say
    nothing of another's, in the same topic and partitions."""
    await progress.save_bounds(TOPIC, PartitionBounds(2, 10, (9, 10), shard=0))
    await progress.save_bounds(TOPIC, PartitionBounds(2, 7, (7, 5), shard=2))
    assert await progress.load_bounds(TOPIC, 0, 2) == PartitionBounds(2, 10, (9, 10), shard=0)
    assert await progress.load_bounds(TOPIC, 2, 2) == PartitionBounds(2, 7, (7, 5), shard=2)
    assert await progress.load_bounds(TOPIC, 1, 2) is None
    shard_0 = await progress.checkpoint("g", TOPIC, 0, 2, {0: 9, 1: 10})
    assert shard_0.watermark == 10
    shard_2 = await progress.checkpoint("g", TOPIC, 2, 2, {0: 3})  # partition 0 of shard 2 lags
    assert shard_2.watermark == 0 and shard_2.done == {0: 3, 1: 0}
    assert await progress.low_watermark(["g"], TOPIC, 0) == 10
    assert await progress.low_watermark(["g"], TOPIC, 2) == 0
    assert await progress.low_watermark(["g"], TOPIC, 1) == 0  # nothing of shard 1 yet
    shard_2 = await progress.checkpoint("g", TOPIC, 2, 2, {0: 7, 1: 5})
    assert shard_2.watermark == 7
    loaded = await progress.load("g")
    assert loaded.watermarks == {(TOPIC, 0): 10, (TOPIC, 2): 7}
    assert loaded.done[(TOPIC, 2, 2, 0)] == 7 and loaded.done[(TOPIC, 0, 2, 0)] == 10
    await progress.forget("g")
    assert await progress.watermark("g", TOPIC, 2) == 0


async def test_concurrent_checkpoints_of_one_group_keep_the_highest(progress: Progress) -> None:
    await progress.save_bounds(TOPIC, PartitionBounds(4, 100, (97, 98, 99, 100)))
    await asyncio.gather(
        *(progress.checkpoint("g", TOPIC, 0, 4, {p: v}) for p in range(4) for v in (10, 50, 90 + p + 7))
    )
    assert (await progress.load("g")).done == {(TOPIC, 0, 4, p): 100 for p in range(4)}
    assert await progress.watermark("g", TOPIC) == 100


async def test_progress_made_on_another_store_is_dropped_when_a_new_store_claims_the_group(
    progress: Progress,
) -> None:
    """Regression (issue 9, second writer): a node projecting into its own new ClickHouse found the
    group's progress made by the other node on ITS store and skipped every record up to it."""
    await progress.save_bounds(TOPIC, PartitionBounds(2, 10, (10, 9)))
    await progress.checkpoint("g", TOPIC, 0, 2, {0: 10, 1: 9})
    await progress.checkpoint("other", TOPIC, 0, 2, {0: 10, 1: 9})
    assert await progress.watermark("g", TOPIC) == 10
    # progress stored before scopes existed is kept by the first claim; the same scope keeps it
    assert await progress.claim_scope("g", "clickhouse:a") is False
    assert await progress.claim_scope("g", "clickhouse:a") is False
    assert await progress.watermark("g", TOPIC) == 10
    # another store: everything of the group is dropped, nothing of other groups
    assert await progress.claim_scope("g", "clickhouse:b") is True
    assert await progress.watermark("g", TOPIC) == 0
    assert (await progress.load("g")).done == {}
    assert await progress.watermark("other", TOPIC) == 10
    assert await progress.claim_scope("g", "clickhouse:b") is False
