"""`every_shard`, `ViewedShard` and `EveryShardJournal` over real SlateDB journals in the test's
directory: the node's own shards through its writers, the others through read-only views; a shard
nobody created yet is empty (and read once it exists), one that cannot be read is an error, never
empty."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from core.config import Settings
from core.errors import JournalReadOnly, JournalShardsMismatch
from core.journal.models import NewMessage, ThreadRef
from core.sharding.journal import ShardedJournal
from core.sharding.shards import shard_of
from memstream.sharding.journal_views import LazyJournalViews
from memstream.sharding.shard_sources import EveryShardJournal, ViewedShard, every_shard
from sinks.slatedb.journal import SlateJournal
from streams.relays.journal import DEFAULT_CURSOR, Relay
from tests.memstream.ops.local_shards import local_shards

SHARDS = 3


@pytest.fixture
def sharded_settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path, journal_shards=SHARDS, journal_reader_poll_ms=10)


@pytest.fixture
async def views(sharded_settings: Settings) -> AsyncIterator[LazyJournalViews]:
    opened = LazyJournalViews(sharded_settings)
    yield opened
    await opened.close()


async def writer_of(settings: Settings, shard: int) -> SlateJournal:
    return await SlateJournal.open(
        settings.shard_journal(shard), shard=shard, shards=SHARDS, flush_interval_ms=1
    )


def thread_in(settings: Settings, shard: int) -> ThreadRef:
    i = 0
    while shard_of(settings.environment, "acme", f"t-{i}", SHARDS) != shard:
        i += 1
    return ThreadRef(environment=settings.environment, account_id="acme", thread_id=f"t-{i}")


async def eventually(check: Callable[[], Awaitable[bool]], timeout_s: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, "not visible in time"
        await asyncio.sleep(0.02)


async def test_a_shard_nobody_created_is_empty_until_it_exists(
    sharded_settings: Settings, views: LazyJournalViews
) -> None:
    source = ViewedShard(views, 1)
    assert source.shard == 1
    assert (await source.read_from_seq(0, 10), await source.last_seq(), await source.published()) == (
        [],
        0,
        0,
    )
    writer = await writer_of(sharded_settings, 1)  # another node opens it and appends
    try:
        stored = await writer.append(
            thread_in(sharded_settings, 1), "bot", None, [NewMessage(role="user", content=c) for c in "abc"]
        )
        await writer.set_cursor(DEFAULT_CURSOR, 2)

        async def visible() -> bool:
            return await source.last_seq() == 3 and await source.published() == 2

        await eventually(visible)
        assert [m.seq for m in await source.read_from_seq(1, 10)] == [2, 3]
        assert [m.message_id for m in await source.read_from_seq(0, 10)] == [m.message_id for m in stored]
    finally:
        await writer.close()


async def test_a_shard_that_cannot_be_read_is_an_error_not_empty(
    sharded_settings: Settings, views: LazyJournalViews
) -> None:
    # shard 2's place holds a journal that records another layout (shard 0 of 3)
    wrong = await SlateJournal.open(sharded_settings.shard_journal(2), shard=0, shards=SHARDS)
    await wrong.close()
    source = ViewedShard(views, 2)
    for read in (source.last_seq(), source.published(), source.read_from_seq(0, 10)):
        with pytest.raises(JournalShardsMismatch):
            await read


async def test_every_shard_is_the_local_ones_and_views_of_the_others(
    sharded_settings: Settings, views: LazyJournalViews
) -> None:
    writer = await writer_of(sharded_settings, 1)
    try:
        [local] = local_shards((writer, Relay(writer, sharded_settings)))
        sources = every_shard([local], views)
        assert [source.shard for source in sources] == [0, 1, 2]
        assert sources[1] is local
        assert all(isinstance(sources[k], ViewedShard) for k in (0, 2))
        assert every_shard([], views)[1] is not local
    finally:
        await writer.close()


async def test_every_shard_journal_reads_writers_here_and_views_of_the_rest(
    sharded_settings: Settings, views: LazyJournalViews
) -> None:
    here, there = await writer_of(sharded_settings, 0), await writer_of(sharded_settings, 1)
    try:
        journal = EveryShardJournal(ShardedJournal(SHARDS, {0: here}), views)
        assert journal.shards == SHARDS
        on_0, on_1, on_2 = (thread_in(sharded_settings, k) for k in range(SHARDS))
        assert journal.shard_of(on_1) == 1
        await here.append(on_0, "bot", None, [NewMessage(role="user", content="local")])
        await there.append(on_1, "bot", None, [NewMessage(role="user", content="remote")])
        assert [m.content for m in await journal.after(on_0, -1)] == ["local"]  # the writer: at once
        assert views.local().keys() == set()

        async def viewed() -> bool:
            return [m.content for m in await journal.last(on_1, 5)] == ["remote"]

        await eventually(viewed)
        assert list(views.local()) == [1]
        assert await journal.after(on_2, -1) == [] and await journal.last(on_2, 5) == []  # never created
        with pytest.raises(JournalReadOnly):
            await journal.append(on_1, "bot", None, [NewMessage(role="user", content="no")])
        with pytest.raises(JournalReadOnly):
            await journal.delete_thread(on_0)
        with pytest.raises(ValueError, match="2 writer shards"):
            EveryShardJournal(ShardedJournal(2, {}), views)
    finally:
        await here.close()
        await there.close()
