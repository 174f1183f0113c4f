"""The relay's progress facts (core.sequencing) on a real journal, real brokers and real Postgres:
explicit partitions, stamps, stored bounds, passes."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import defaultdict
from pathlib import Path

import asyncpg
import pytest
from confluent_kafka import Message as KafkaMessage

from core.config import Settings
from core.journal.models import Message, NewMessage, ThreadRef
from core.sequencing import PartitionBounds, Stamp, partition_for
from sinks.postgres.progress import PostgresProgress
from sinks.slatedb.journal import SlateJournal
from streams.admin import apply_topics
from streams.codecs import journal_messages
from streams.relays.journal import Relay
from streams.sequencing import stamp_of
from streams.topics import load_topics
from tests.fakes.outage import Outage
from tests.memstream.own_broker import own_broker
from tests.streams.relays.support import consume_from_start, relay_settings_on

PARTITIONS = 6  # journal.messages in topics.yaml


@pytest.fixture
def relay_settings(broker: str, topic_prefix: str, tmp_path: Path) -> Settings:
    return relay_settings_on(broker, topic_prefix, tmp_path)


async def append(journal: SlateJournal, count: int, threads: int = 5) -> list[Message]:
    out: list[Message] = []
    for i in range(count):
        ref = ThreadRef(environment="test", account_id="acme", thread_id=f"th-{i % threads}")
        out += await journal.append(ref, "bot", None, [NewMessage(role="user", content=f"m{i}")])
    return out


async def drain(relay: Relay) -> None:
    while await relay.run_once():
        pass


def stamps(records: list[KafkaMessage]) -> list[tuple[int, Stamp]]:
    """(partition, stamp) of each record, in topic order per partition."""
    out = []
    for record in records:
        stamp = stamp_of(record.headers())
        assert stamp is not None
        message = journal_messages.decode(record.value())
        assert stamp.seq == message.seq and stamp.partitions == PARTITIONS
        assert record.partition() == partition_for(message.thread_id.encode(), PARTITIONS)
        out.append((record.partition(), stamp))
    return out


def chains(records: list[KafkaMessage]) -> dict[int, list[tuple[int, int]]]:
    """partition -> [(prev, seq)] in topic order."""
    out: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for partition, stamp in stamps(records):
        out[partition].append((stamp.prev, stamp.seq))
    return dict(out)


async def test_each_partition_is_a_chain_of_stamps_and_the_bounds_are_stored_with_the_cursor(
    relay_settings: Settings, journal: SlateJournal, pool: asyncpg.Pool
) -> None:
    progress = PostgresProgress(pool)
    await append(journal, 40)
    relay = Relay(journal, relay_settings, batch_size=7, bounds_store=progress)
    await drain(relay)
    await relay.close()
    records = consume_from_start(relay_settings, "journal.messages", 40, quiet_s=0.7)
    by_partition = chains(records)
    for links in by_partition.values():
        assert links[0][0] == 0  # the pass started at cursor 0
        for (_, earlier), (prev, _) in itertools.pairwise(links):
            assert prev == earlier  # each record names its partition's previous seq
    stored = await progress.load_bounds(relay.topic, 0, PARTITIONS)
    assert stored == PartitionBounds(
        PARTITIONS, 40, tuple(by_partition[p][-1][1] if p in by_partition else 0 for p in range(PARTITIONS))
    )


async def test_a_restart_continues_the_pass_and_a_rewind_starts_a_new_one(
    relay_settings: Settings, journal: SlateJournal, pool: asyncpg.Pool
) -> None:
    progress = PostgresProgress(pool)
    await append(journal, 20)
    first = Relay(journal, relay_settings, bounds_store=progress)
    await drain(first)
    await first.close()
    await append(journal, 10)
    second = Relay(journal, relay_settings, bounds_store=progress)  # a node restart
    await drain(second)
    records = consume_from_start(relay_settings, "journal.messages", 30, quiet_s=0.7)
    for links in chains(records).values():
        for (_, earlier), (prev, _) in itertools.pairwise(links):
            assert prev == earlier  # the stored bounds continued the chain across the restart
    await second.rewind(25)
    await drain(second)
    await second.close()
    records = consume_from_start(relay_settings, "journal.messages", 35, quiet_s=0.7)
    republished = 0
    for links in chains(records).values():
        seqs = [seq for _, seq in links]
        drop = next((i for i in range(1, len(seqs)) if seqs[i] <= seqs[i - 1]), None)
        if drop is None:
            assert all(seq <= 25 for seq in seqs)  # no seq of 26..30 on this partition
            continue
        again = links[drop:]
        assert again[0][0] == 25  # a new pass starts at the rewind point
        for (_, earlier), (prev, _) in itertools.pairwise(again):
            assert prev == earlier
        republished += len(again)
    assert republished == 5
    stored = await progress.load_bounds(second.topic, 0, PARTITIONS)
    assert stored is not None and stored.cursor == 30 and min(stored.bounds) == 25


async def test_a_batch_published_again_carries_the_same_stamps(
    relay_settings: Settings, journal: SlateJournal, pool: asyncpg.Pool
) -> None:
    """A cursor that could not be stored: the batch is published again with the same prevs (a
    retried batch stamped past itself would stall every consumer's chain)."""
    await append(journal, 12)
    flaky = Outage(journal, methods={"set_cursor"}, error=lambda: OSError("disk full"), times=1)
    relay = Relay(flaky.proxy, relay_settings, batch_size=12, bounds_store=PostgresProgress(pool))
    with pytest.raises(OSError):
        await relay.run_once()
    await drain(relay)
    await relay.close()
    records = consume_from_start(relay_settings, "journal.messages", 24, quiet_s=0.7)
    copies: dict[int, list[Stamp]] = defaultdict(list)
    for _, stamp in stamps(records):
        copies[stamp.seq].append(stamp)
    assert sorted(copies) == list(range(1, 13))
    assert all(len(both) == 2 and both[0] == both[1] for both in copies.values())


@pytest.mark.engine
async def test_interrupt_frees_a_round_stuck_on_a_recreated_topic(
    tmp_path: Path, topic_prefix: str, journal: SlateJournal
) -> None:
    """After the broker recreated the topic, the idempotent producer can wait forever for a
    partition it wrote to before (seen on Tansu): `interrupt` aborts that round and the next one
    publishes with a new producer."""
    with own_broker(tmp_path / "broker") as broker:
        settings = Settings(
            data_dir=tmp_path / "data", broker_url=f"kafka://{broker.bootstrap}", topic_prefix=topic_prefix
        )
        apply_topics(settings, load_topics())
        await append(journal, 12)
        relay = Relay(journal, settings, idle_sleep=0.01, max_backoff=0.2)
        await drain(relay)
        broker.restart()
        apply_topics(settings, load_topics())  # recreated (as faust's consumers do on Tansu)
        await append(journal, 12)
        stop = asyncio.Event()
        task = asyncio.create_task(relay.run(stop))
        try:
            await asyncio.sleep(4)
            stuck = await relay.cursor() == 12
            relay.interrupt()
            deadline = time.monotonic() + 20
            while await relay.cursor() < 24:
                assert time.monotonic() < deadline, f"cursor {await relay.cursor()}"
                await asyncio.sleep(0.1)
        finally:
            stop.set()
            await asyncio.wait_for(task, 10)
            await relay.close()
        assert stuck  # without the interrupt, nothing moved
        assert sorted(
            journal_messages.decode(r.value()).seq
            for r in consume_from_start(settings, "journal.messages", 12, quiet_s=0.7)
        ) == list(range(13, 25))


async def test_a_relay_per_shard_publishes_to_the_same_topic_with_chains_of_its_own(
    relay_settings: Settings, tmp_path: Path, pool: asyncpg.Pool
) -> None:
    """Two journal shards, each numbering seqs from 1, each with its relay: every record names its
    shard (header and value), each shard's records chain per partition among themselves, and each
    relay's bounds are stored under its shard."""
    progress = PostgresProgress(pool)
    journals = [
        await SlateJournal.open(
            f"file://{tmp_path}/journal{'' if k == 0 else f'-shard-{k}'}", shard=k, shards=2
        )
        for k in range(2)
    ]
    try:
        for k, journal in enumerate(journals):
            await append(journal, 15 + 5 * k)
        relays = [
            Relay(journal, relay_settings, batch_size=6, bounds_store=progress, shard=k)
            for k, journal in enumerate(journals)
        ]
        for relay in relays:
            await drain(relay)
            await relay.close()
    finally:
        for journal in journals:
            await journal.close()
    records = consume_from_start(relay_settings, "journal.messages", 35, quiet_s=0.7)
    by_shard: dict[int, list[KafkaMessage]] = defaultdict(list)
    for record in records:
        stamp = stamp_of(record.headers())
        message = journal_messages.decode(record.value())
        assert stamp is not None and stamp.shard == message.shard
        by_shard[stamp.shard].append(record)
    assert {k: sorted(journal_messages.decode(r.value()).seq for r in rs) for k, rs in by_shard.items()} == {
        0: list(range(1, 16)),
        1: list(range(1, 21)),
    }
    for k, shard_records in by_shard.items():
        links = chains(shard_records)
        for partition_links in links.values():
            assert partition_links[0][0] == 0
            for (_, earlier), (prev, _) in itertools.pairwise(partition_links):
                assert prev == earlier  # within its shard, whatever the other shard put between
        stored = await progress.load_bounds(relays[k].topic, k, PARTITIONS)
        assert stored is not None and stored.shard == k and stored.cursor == 15 + 5 * k
