"""Journal progress in Postgres: the relay's partition bounds and each consumer group's progress.

Tables (migration 0005; a `shard` column since 0017): `relay_bounds`, `consumer_progress`,
`consumer_watermarks`. What the values mean, and why they stay true on any broker, is in
`core.sequencing`; every value belongs to one journal shard (seqs count within a shard). Postgres is where
every deployment keeps them: processors may run in `memstream worker` processes that have no
journal, and the node that republishes after a broker loss reads them all.

`PostgresProgress(pool)` is
- each shard's relay's `BoundsStore`: `save_bounds` (one statement per confirmed batch, all
  partitions at once) and `load_bounds`;
- the runtime's `ProgressStore` (`core.stores.progress`): `load` and `checkpoint` (one
  transaction per batch: raise the done values, lift them with the stored bounds, raise the
  watermark; values only ever rise, so concurrent members of one group cannot lower them);
- the node's `low_watermark(groups, topic, shard)`: the lowest watermark of `shard` over
  `groups`, computed afresh from the stored values and bounds (a group with nothing stored counts
  0), i.e. the seq after which the shard's journal must be published again so that every group
  gets everything it lacks;
- `forget(group)`: a replay of the group starts over (nothing of it is skipped afterwards);
- `claim_scope(group, scope)` (migration 0007, `consumer_scopes`): the group's progress belongs to
  the store `scope` names; progress made on another store is dropped (forgotten) first, so a
  projection into a store created anew is not told that its records were already processed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import asyncpg

from core.sequencing import Mark, PartitionBounds, lift
from core.stores.progress import GroupProgress, TopicProgress


class PostgresProgress:
    """See the module doc. Uses the caller's pool (does not close it)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    # ---- the relay -----------------------------------------------------------------------------

    async def save_bounds(self, topic: str, bounds: PartitionBounds) -> None:
        """Store `bounds` as the facts of the relay of `bounds.shard` for `topic` (every partition
        in one statement)."""
        await self.pool.execute(
            """
            INSERT INTO relay_bounds (topic, shard, partitions, partition, bound, cursor_seq)
            SELECT $1, $2, $3, p, b, $4 FROM unnest($5::int[], $6::bigint[]) AS t(p, b)
            ON CONFLICT (topic, shard, partitions, partition)
            DO UPDATE SET bound = EXCLUDED.bound, cursor_seq = EXCLUDED.cursor_seq, updated_at = now()
            """,
            topic,
            bounds.shard,
            bounds.partitions,
            bounds.cursor,
            list(range(bounds.partitions)),
            list(bounds.bounds),
        )

    async def load_bounds(self, topic: str, shard: int, partitions: int) -> PartitionBounds | None:
        """The stored bounds of `shard`'s relay on `topic` under `partitions` (None unless every
        partition has a row from the same save)."""
        rows = await self.pool.fetch(
            "SELECT partition, bound, cursor_seq FROM relay_bounds "
            "WHERE topic = $1 AND shard = $2 AND partitions = $3",
            topic,
            shard,
            partitions,
        )
        cursors = {row["cursor_seq"] for row in rows}
        if len(rows) != partitions or len(cursors) != 1:
            return None
        by_partition = {row["partition"]: row["bound"] for row in rows}
        bounds = tuple(by_partition[p] for p in range(partitions))
        return PartitionBounds(partitions, cursors.pop(), bounds, shard)

    # ---- consumer groups -----------------------------------------------------------------------

    async def load(self, group_id: str) -> GroupProgress:
        progress = GroupProgress()
        async with self.pool.acquire() as conn:
            for row in await conn.fetch(
                "SELECT topic, shard, watermark FROM consumer_watermarks WHERE group_id = $1", group_id
            ):
                progress.watermarks[(row["topic"], row["shard"])] = row["watermark"]
            for row in await conn.fetch(
                "SELECT topic, shard, partitions, partition, done_seq FROM consumer_progress "
                "WHERE group_id = $1",
                group_id,
            ):
                key = (row["topic"], row["shard"], row["partitions"], row["partition"])
                progress.done[key] = row["done_seq"]
        return progress

    async def checkpoint(
        self, group_id: str, topic: str, shard: int, partitions: int, done: Mapping[int, int]
    ) -> TopicProgress:
        where = _Where(group_id, topic, shard, partitions)
        async with self.pool.acquire() as conn, conn.transaction():
            await _raise_done(conn, where, done)
            marks = await _marks(conn, topic, shard, partitions)
            stored, watermark = await _stored(conn, where)
            lifted, new_watermark = lift(partitions, marks, stored, watermark)
            raised = {p: v for p, v in lifted.items() if v > stored.get(p, -1)}
            if raised:
                await _raise_done(conn, where, raised)
            if new_watermark > watermark:
                new_watermark = await conn.fetchval(
                    """
                    INSERT INTO consumer_watermarks (group_id, topic, shard, watermark)
                    VALUES ($1, $2, $3, $4)
                    ON CONFLICT (group_id, topic, shard) DO UPDATE
                    SET watermark = GREATEST(consumer_watermarks.watermark, EXCLUDED.watermark),
                        updated_at = now()
                    RETURNING watermark
                    """,
                    group_id,
                    topic,
                    shard,
                    new_watermark,
                )
        return TopicProgress(watermark=new_watermark, done=lifted)

    async def watermark(self, group_id: str, topic: str, shard: int = 0) -> int:
        """The group's watermark of `shard` on `topic` computed afresh (stored values lifted by the
        stored bounds of every partition count); 0 when nothing is stored."""
        async with self.pool.acquire() as conn:
            best = int(
                await conn.fetchval(
                    "SELECT coalesce(max(watermark), 0) FROM consumer_watermarks "
                    "WHERE group_id = $1 AND topic = $2 AND shard = $3",
                    group_id,
                    topic,
                    shard,
                )
            )
            counts = await conn.fetch(
                "SELECT DISTINCT partitions FROM relay_bounds WHERE topic = $1 AND shard = $2", topic, shard
            )
            for row in counts:
                partitions = row["partitions"]
                marks = await _marks(conn, topic, shard, partitions)
                stored, watermark = await _stored(conn, _Where(group_id, topic, shard, partitions))
                _, computed = lift(partitions, marks, stored, watermark)
                best = max(best, computed)
        return best

    async def low_watermark(self, group_ids: Sequence[str], topic: str, shard: int = 0) -> int:
        """min over `group_ids` of `watermark(group, topic, shard)` (module doc); 0 without groups."""
        if not group_ids:
            return 0
        return min([await self.watermark(group_id, topic, shard) for group_id in group_ids])

    async def forget(self, group_id: str) -> None:
        """Delete everything stored for `group_id` (its replay starts over)."""
        async with self.pool.acquire() as conn, conn.transaction():
            await _forget(conn, group_id)

    async def claim_scope(self, group_id: str, scope: str) -> bool:
        """Make `scope` the store the group's progress belongs to (module doc); True when progress
        stored for another scope was dropped. A group that has progress but no scope yet (stored
        before scopes existed) keeps it."""
        async with self.pool.acquire() as conn, conn.transaction():
            stored = await conn.fetchval(
                "SELECT scope FROM consumer_scopes WHERE group_id = $1 FOR UPDATE", group_id
            )
            if stored == scope:
                return False
            await conn.execute(
                """
                INSERT INTO consumer_scopes (group_id, scope) VALUES ($1, $2)
                ON CONFLICT (group_id) DO UPDATE SET scope = EXCLUDED.scope, updated_at = now()
                """,
                group_id,
                scope,
            )
            if stored is None:
                return False
            await _forget(conn, group_id)
            return True


async def _forget(conn: asyncpg.Connection, group_id: str) -> None:
    await conn.execute("DELETE FROM consumer_progress WHERE group_id = $1", group_id)
    await conn.execute("DELETE FROM consumer_watermarks WHERE group_id = $1", group_id)


@dataclass(frozen=True)
class _Where:
    """A group's progress on one topic and shard under one partition count."""

    group_id: str
    topic: str
    shard: int
    partitions: int


async def _raise_done(conn: asyncpg.Connection, where: _Where, done: Mapping[int, int]) -> None:
    if not done:
        return
    await conn.execute(
        """
        INSERT INTO consumer_progress (group_id, topic, shard, partitions, partition, done_seq)
        SELECT $1, $2, $3, $4, p, d FROM unnest($5::int[], $6::bigint[]) AS t(p, d)
        ON CONFLICT (group_id, topic, shard, partitions, partition) DO UPDATE
        SET done_seq = GREATEST(consumer_progress.done_seq, EXCLUDED.done_seq), updated_at = now()
        """,
        where.group_id,
        where.topic,
        where.shard,
        where.partitions,
        list(done),
        list(done.values()),
    )


async def _marks(conn: asyncpg.Connection, topic: str, shard: int, partitions: int) -> dict[int, Mark]:
    rows = await conn.fetch(
        "SELECT partition, bound, cursor_seq FROM relay_bounds "
        "WHERE topic = $1 AND shard = $2 AND partitions = $3",
        topic,
        shard,
        partitions,
    )
    return {row["partition"]: Mark(bound=row["bound"], cursor=row["cursor_seq"]) for row in rows}


async def _stored(conn: asyncpg.Connection, where: _Where) -> tuple[dict[int, int], int]:
    rows = await conn.fetch(
        "SELECT partition, done_seq FROM consumer_progress "
        "WHERE group_id = $1 AND topic = $2 AND shard = $3 AND partitions = $4",
        where.group_id,
        where.topic,
        where.shard,
        where.partitions,
    )
    watermark = await conn.fetchval(
        "SELECT watermark FROM consumer_watermarks WHERE group_id = $1 AND topic = $2 AND shard = $3",
        where.group_id,
        where.topic,
        where.shard,
    )
    return {row["partition"]: row["done_seq"] for row in rows}, int(watermark or 0)
