"""republish (unit, the in-memory journal and a fake relay): the report counts what the relay
published, a rewind that published nothing fails, and a relay that makes no progress stops the wait
with its error."""

from __future__ import annotations

import pytest

from core.config import Settings
from core.errors import InvalidInput
from core.journal.models import NewMessage, ThreadRef
from memstream.ops.progress import Progress
from memstream.ops.republish import (
    RepublishIncomplete,
    RepublishMoved,
    RepublishReport,
    RepublishStalled,
    ShardsRepublished,
    republish,
    republish_shards,
    shards_to_republish,
)
from streams.journal_shards import LocalShard
from streams.relays.journal import Relay
from streams.topic_guards import JournalTopicGuard
from tests.fakes.journal import InMemoryJournal
from tests.fakes.progress import InMemoryProgress


async def journal_of(messages: int) -> InMemoryJournal:
    """A journal whose last seq is `messages`."""
    journal = InMemoryJournal()
    await journal.append(
        ThreadRef(environment="test", account_id="a", thread_id="t"),
        "agent",
        None,
        [NewMessage(role="user", content=f"m{i}") for i in range(messages)],
    )
    return journal


class FakeRelay(Relay):
    """A relay at `cursor` that publishes one message per look at its cursor after the first one
    while `publishing`; `rewind_works=False` makes a rewind that moves nothing."""

    def __init__(
        self, journal: InMemoryJournal, cursor: int, *, publishing: bool = True, rewind_works: bool = True
    ):
        super().__init__(journal, Settings())
        self.at = cursor
        self.last = len(journal.by_seq)
        self.publishing = publishing
        self.rewind_works = rewind_works
        self.looks = 0

    async def cursor(self) -> int:
        self.looks += 1
        if self.publishing and self.looks > 1 and self.at < self.last:
            self.at += 1
            self.stats.published += 1
        return self.at

    async def rewind(self, to_seq: int = 0) -> None:
        self.stats.rewinds += 1
        if self.rewind_works:
            self.at = to_seq


async def test_the_report_counts_what_the_relay_published() -> None:
    journal = await journal_of(30)
    relay = FakeRelay(journal, 30)
    seen: list[Progress] = []
    report = await republish(journal, relay, 10, progress=seen.append, poll_s=0)
    assert (report.from_seq, report.last_seq, report.range_messages) == (10, 30, 21)
    assert report.published == 21 and report.rewound
    assert seen[-1].done == seen[-1].total == 21


async def test_a_relay_behind_the_range_is_followed_not_rewound() -> None:
    journal = await journal_of(30)
    relay = FakeRelay(journal, 5)
    report = await republish(journal, relay, 10, poll_s=0)
    assert not report.rewound and relay.stats.rewinds == 0
    assert report.published == 25  # seq 6..30: published for the first time, the range included


async def test_a_rewind_that_published_nothing_fails() -> None:
    journal = await journal_of(30)
    relay = FakeRelay(journal, 30, rewind_works=False)
    with pytest.raises(RepublishIncomplete, match=r"published only 0 of the 21 message\(s\) of seq 10..30"):
        await republish(journal, relay, 10, poll_s=0)


async def test_a_relay_without_progress_stops_the_wait_with_its_last_error() -> None:
    journal = await journal_of(30)
    relay = FakeRelay(journal, 30, publishing=False)
    relay.stats.last_error = "KafkaException: broker down"
    with pytest.raises(RepublishStalled) as raised:
        await republish(journal, relay, 10, poll_s=0.01, idle_timeout_s=0.2)
    message = raised.value.message
    assert "has not moved from seq 9 for 0.2s" in message
    assert "last relay error: KafkaException: broker down" in message
    assert "memstream republish --from-seq 10" in message


async def shards_of(*sizes: int) -> list[LocalShard]:
    """A local shard per size: its journal holds that many messages, its relay published them all."""
    shards = []
    for shard, size in enumerate(sizes):
        journal = InMemoryJournal(shard=shard)
        if size:
            ref = ThreadRef(environment="test", account_id="a", thread_id=f"t{shard}")
            await journal.append(
                ref, "agent", None, [NewMessage(role="user", content=f"m{i}") for i in range(size)]
            )
        relay = FakeRelay(journal, size)
        shards.append(
            LocalShard(shard, journal, relay, JournalTopicGuard(journal, relay, InMemoryProgress(), []))
        )
    return shards


async def test_a_seq_of_one_shard_needs_the_shard_and_zero_means_every_shard() -> None:
    shards = await shards_of(30, 0, 12)
    with pytest.raises(InvalidInput, match=r"3 shards.*add --shard K \(shard 0, 1, 2\)") as refused:
        await shards_to_republish(shards, 10, None)
    assert refused.value.field == "shard"
    with pytest.raises(InvalidInput, match="--shard 5 is not a journal shard of this node") as refused:
        await shards_to_republish(shards, 10, 5)
    assert refused.value.field == "shard"
    with pytest.raises(InvalidInput, match="past the journal's last seq 12") as refused:
        await shards_to_republish(shards, 20, 2)
    assert refused.value.field == "from_seq"
    assert [s.shard for s in await shards_to_republish(shards, 10, 0)] == [0]
    assert [s.shard for s in await shards_to_republish(shards, 0, None)] == [0, 2]  # shard 1 is empty
    report = await republish_shards(await shards_to_republish(shards, 1, None), 1, idle_timeout_s=5)
    assert isinstance(report, ShardsRepublished)
    assert [(r.shard, r.from_seq, r.last_seq, r.range_messages) for r in report.shards] == [
        (0, 1, 30, 30),
        (2, 1, 12, 12),
    ]
    one = await republish_shards(await shards_to_republish(shards, 5, 2), 5, idle_timeout_s=5)
    assert isinstance(one, RepublishReport) and (one.shard, one.from_seq, one.published) == (2, 5, 8)


async def test_one_shard_needs_no_shard() -> None:
    [only] = await shards_of(7)
    assert await shards_to_republish([only], 3, None) == [only]


async def test_a_shard_that_moves_away_ends_the_wait_saying_who_publishes_the_rest() -> None:
    (local,) = await shards_of(30)
    assert isinstance(local.relay, FakeRelay)
    local.relay.publishing = False
    looks = {"n": 0}

    def moved() -> bool:  # the node closes the shard after the rewind
        looks["n"] += 1
        return looks["n"] > 2

    with pytest.raises(RepublishMoved) as raised:
        await republish(local.journal, local.relay, 10, poll_s=0, moved=moved)
    assert local.relay.at == 9  # rewound: the cursor, stored in the shard's journal, moved with it
    assert raised.value.code == "shard_moved"
    assert "the journal moved to another node while seq 10..30 was being republished" in raised.value.message
    assert "new owner's relay publishes seq 10..30 from that cursor, once" in raised.value.message

    before = local.relay.stats.rewinds
    with pytest.raises(RepublishMoved, match="before its relay was rewound: nothing was republished"):
        await republish(local.journal, local.relay, 10, poll_s=0, moved=lambda: True)
    assert local.relay.stats.rewinds == before
