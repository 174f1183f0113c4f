"""What `memstream verify` and `memstream rebuild clickhouse|qdrant` act on in a node (`build_node`).

- Every shard local (no shard membership): the node's `LocalShards` and its `ShardedJournal`; the
  rebuild of ClickHouse first has each shard's guard make sure the topic holds its seqs from 1
  (`JournalTopicGuard.ensure_full_history`: it reads all of them).
- Shards across nodes (`MEMSTREAM_MEMBERSHIP`): the node's own shards through its writers, the
  others through read-only views (`views`, the engines' own: `memstream.sharding.shard_sources`),
  taken when the command starts (a shard that moves meanwhile stays read where it was: a writer
  closed under the command fails it, and running it again reads the shard where it went); the
  guards of the others' shards are asked through their owners (`full_history`,
  `memstream.sharding.full_history`). One code path either way: verify and the rebuild get every
  shard as a `ShardSource`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from core.sharding.journal import ShardedJournal, ShardedThreadJournal
from memstream.api.routes.admin import Rebuilder
from memstream.engines import Engines
from memstream.ops.progress import ProgressCallback
from memstream.ops.rebuild import rebuild_clickhouse, rebuild_qdrant
from memstream.sharding.full_history import FullHistory
from memstream.sharding.journal_views import LazyJournalViews
from memstream.sharding.shard_sources import EveryShardJournal, every_shard
from sinks.slatedb.journal import SlateJournal
from streams.journal_shards import LocalShards, ShardSources


@dataclass(frozen=True)
class ProjectionOps:
    every_shard: Callable[[], ShardSources]
    """Every journal shard, ascending (each call: the node's shards as they are now)."""
    journal: ShardedThreadJournal
    """Every thread's messages."""
    rebuilders: dict[str, Rebuilder]


def projection_ops(
    engines: Engines,
    journals: ShardedJournal[SlateJournal],
    shards: LocalShards,
    views: LazyJournalViews | None = None,
    full_history: FullHistory | None = None,
) -> ProjectionOps:
    """See the module doc: `shards` is the node's list of local shards (it changes as shards move);
    `views` and `full_history` with shards across nodes."""
    if (views is None) != (full_history is None):
        raise ValueError("views and full_history go together (shards across nodes)")
    journal: ShardedThreadJournal = journals if views is None else EveryShardJournal(journals, views)

    def sources_of(local: LocalShards) -> ShardSources:
        return list(local) if views is None else every_shard(local, views)

    async def clickhouse(progress: ProgressCallback) -> object:
        local = list(shards)
        if full_history is None:
            for source in local:
                await source.guard.ensure_full_history()
        else:
            await full_history.ensure(local, journals.shards)
        return await rebuild_clickhouse(engines, sources_of(local), progress=progress)

    async def qdrant(progress: ProgressCallback) -> object:
        return await rebuild_qdrant(engines, progress=progress)

    return ProjectionOps(lambda: sources_of(shards), journal, {"clickhouse": clickhouse, "qdrant": qdrant})
