"""Every journal shard of a deployment for `memstream verify` and `rebuild clickhouse` on a node
taking part in the shard membership (`MEMSTREAM_MEMBERSHIP`): the node's own shards through its
writers (`streams.journal_shards.LocalShard`), every other shard through a read-only view
(`memstream.sharding.journal_views.LazyJournalViews`), which follows its writer wherever it runs.

- `ViewedShard`: a `ShardSource` over the view of a shard another node writes: its seqs
  (`read_from_seq`, `last_seq`) and its relay's durable cursor (`get_cursor` of the relay's cursor
  name: every node's relays use `DEFAULT_CURSOR`), as visible in the view (a poll interval behind
  its writer at most: verify re-counts and waits for what comes after its snapshot, and the
  rebuild's catch-up reads up to the last seq after its swap). A shard whose journal no writer
  created yet (`JournalNotFound`) is empty - nothing to read, last seq 0, cursor 0 - and is looked
  for again on each call (a shard made meanwhile is read from then on). A view that cannot be
  opened for any other reason raises `JournalUnavailable`: an unreadable shard is never counted
  as empty.
- `every_shard(local, views)`: the `ShardSource` of every shard, ascending: the local ones
  themselves, the others viewed.
- `EveryShardJournal`: every thread's messages (`last`, `after`), through the writer of its shard
  when the shard is local, else its view (a thread of a shard nobody created has none). Read-only:
  verify re-counts threads and checks deletions and erasures through it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from core.errors import JournalReadOnly
from core.journal.models import Message, NewMessage, ThreadRef
from core.sharding.journal import ShardedJournal
from core.stores.deletions import JournalDeletion
from core.stores.journal import ThreadJournal
from memstream.sharding.journal_views import LazyJournalViews
from sinks.slatedb.journal import SlateJournal
from sinks.slatedb.reader import JournalNotFound, SlateJournalReader
from streams.journal_shards import LocalShards, ShardSource
from streams.relays.journal import DEFAULT_CURSOR


class ViewedShard:
    """Journal shard `shard` read through `views` (module doc)."""

    def __init__(self, views: LazyJournalViews, shard: int, cursor_name: str = DEFAULT_CURSOR) -> None:
        self.views = views
        self._shard = shard
        self.cursor_name = cursor_name

    @property
    def shard(self) -> int:
        return self._shard

    async def _view(self) -> SlateJournalReader | None:
        try:
            return await self.views.view_of_shard(self._shard)
        except JournalNotFound:
            return None

    async def read_from_seq(self, after_seq: int, limit: int) -> list[Message]:
        view = await self._view()
        return [] if view is None else await view.read_from_seq(after_seq, limit)

    async def last_seq(self) -> int:
        view = await self._view()
        return 0 if view is None else await view.last_seq()

    async def published(self) -> int:
        view = await self._view()
        return 0 if view is None else await view.get_cursor(self.cursor_name)


def every_shard(local: LocalShards, views: LazyJournalViews) -> list[ShardSource]:
    """Every shard of `views.shards`, ascending: the local ones, else a `ViewedShard` (module doc)."""
    here = {source.shard: source for source in local}
    return [here[shard] if shard in here else ViewedShard(views, shard) for shard in range(views.shards)]


class EveryShardJournal:
    """Every thread's messages through its shard's writer here, else its view (module doc)."""

    def __init__(self, writers: ShardedJournal[SlateJournal], views: LazyJournalViews) -> None:
        if writers.shards != views.shards:
            raise ValueError(f"{writers.shards} writer shards and {views.shards} viewed shards")
        self.writers = writers
        self.views = views

    @property
    def shards(self) -> int:
        return self.writers.shards

    def shard_of(self, thread: ThreadRef) -> int:
        return self.writers.shard_of(thread)

    async def _journal(self, thread: ThreadRef) -> ThreadJournal | None:
        shard = self.shard_of(thread)
        writer = self.writers.local().get(shard)
        if writer is not None:
            return writer
        try:
            return await self.views.view_of_shard(shard)
        except JournalNotFound:
            return None

    async def last(self, thread: ThreadRef, n: int) -> list[Message]:
        journal = await self._journal(thread)
        return [] if journal is None else await journal.last(thread, n)

    async def after(self, thread: ThreadRef, offset: int, limit: int = 1000) -> list[Message]:
        journal = await self._journal(thread)
        return [] if journal is None else await journal.after(thread, offset, limit)

    async def append(
        self, thread: ThreadRef, agent_id: str, user_id: str | None, messages: Sequence[NewMessage]
    ) -> list[Message]:
        raise JournalReadOnly("this journal reads every shard for verify; appends go to the API")

    async def delete_thread(self, thread: ThreadRef) -> JournalDeletion:
        raise JournalReadOnly("this journal reads every shard for verify; deletions go to the API")

    def add_append_listener(self, listener: Callable[[], None]) -> None:
        raise JournalReadOnly("this journal reads every shard for verify: it has no appends to listen to")

    async def ready(self) -> None:
        await self.writers.ready()

    async def close(self) -> None:
        """Nothing: the writers belong to the node, the views to its engines."""
