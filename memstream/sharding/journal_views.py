"""`LazyJournalViews`: read-only views of every journal shard, each opened on first use, for the
processors of a node taking part in the shard membership (`memstream.sharding.membership_loop`).

A consumer group spreads a topic's partitions over the nodes, so a node's thread-memory processors
(thresholds, flush, summarizer, the compaction recovery) read threads of every shard, most of them
written by other nodes. They read them as a worker does (`memstream.worker`): through a
`sinks.slatedb.reader.SlateJournalReader` of the thread's shard, which follows its writer wherever
that writer runs. A view is opened when a thread of its shard is first read (a shard nobody wrote
yet has no journal to open: its first message comes after its first writer made it); one that
cannot be opened yet raises `JournalUnavailable`, an outage the processors wait out
(`JournalNotFound` when no writer created it yet). `view_of_shard` gives a shard's view by its
number (`memstream verify` and `rebuild clickhouse` read every shard's seqs:
`memstream.sharding.shard_sources`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from core.config import Settings
from core.journal.models import Message, NewMessage, ThreadRef
from core.sharding.journal import ShardedFollower
from core.stores.deletions import JournalDeletion
from sinks.slatedb.reader import SlateJournalReader


class LazyJournalViews(ShardedFollower[SlateJournalReader]):
    """`ShardedFollower` over readers of `settings`' journal shards, opened on first use (module doc)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings.journal_shards)
        self._settings = settings
        self._opening = asyncio.Lock()

    async def view_of(self, thread: ThreadRef) -> SlateJournalReader:
        """The reader of `thread`'s shard, opened if it is not yet (JournalUnavailable when its
        journal cannot be opened)."""
        return await self.view_of_shard(self.shard_of(thread))

    async def view_of_shard(self, shard: int) -> SlateJournalReader:
        """The reader of journal shard `shard`, opened if it is not yet (JournalNotFound when no
        writer created its journal yet, JournalUnavailable when it cannot be opened now)."""
        view = self.local().get(shard)
        if view is not None:
            return view
        async with self._opening:
            view = self.local().get(shard)
            if view is None:
                view = await SlateJournalReader.open(
                    self._settings.shard_journal(shard),
                    s3=self._settings.s3,
                    poll_interval_ms=self._settings.journal_reader_poll_ms,
                    shard=shard,
                    shards=self.shards,
                )
                self.attach(shard, view)
            return view

    async def append(
        self, thread: ThreadRef, agent_id: str, user_id: str | None, messages: Sequence[NewMessage]
    ) -> list[Message]:
        return await (await self.view_of(thread)).append(thread, agent_id, user_id, messages)

    async def last(self, thread: ThreadRef, n: int) -> list[Message]:
        return await (await self.view_of(thread)).last(thread, n)

    async def after(self, thread: ThreadRef, offset: int, limit: int = 1000) -> list[Message]:
        return await (await self.view_of(thread)).after(thread, offset, limit)

    async def delete_thread(self, thread: ThreadRef) -> JournalDeletion:
        return await (await self.view_of(thread)).delete_thread(thread)

    async def wait_visible(self, thread: ThreadRef, offset: int) -> None:
        await (await self.view_of(thread)).wait_visible(thread, offset)
