"""`InMemoryProgress`: the `ProgressStore` and `BoundsStore` (`core.stores.progress`) in memory,
with the rest of `sinks.postgres.progress.PostgresProgress` (`watermark`, `low_watermark`,
`forget`).

It keeps what Postgres keeps and computes what Postgres computes (`core.sequencing.lift`), so the
contract suite (`tests/core/stores/test_progress.py`) asserts the same values of both: each shard's
relay's bounds per (topic, shard, partition count), each group's done values that only ever rise,
lifted by the bounds of their shard, and its watermark per (topic, shard); `claim_scope` drops a
group's progress when another store claims it. The state is public for tests: `bounds`, `groups`,
`scopes`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from core.sequencing import Mark, PartitionBounds, lift
from core.stores.progress import GroupProgress, TopicProgress


class InMemoryProgress:
    """See the module doc."""

    def __init__(self) -> None:
        self.bounds: dict[tuple[str, int, int], PartitionBounds] = {}
        self.groups: dict[str, GroupProgress] = {}
        self.scopes: dict[str, str] = {}

    # ---- the relays (BoundsStore) --------------------------------------------------------------

    async def save_bounds(self, topic: str, bounds: PartitionBounds) -> None:
        self.bounds[(topic, bounds.shard, bounds.partitions)] = bounds

    async def load_bounds(self, topic: str, shard: int, partitions: int) -> PartitionBounds | None:
        return self.bounds.get((topic, shard, partitions))

    # ---- consumer groups (ProgressStore) -------------------------------------------------------

    async def load(self, group_id: str) -> GroupProgress:
        stored = self.groups.get(group_id, GroupProgress())
        return GroupProgress(dict(stored.watermarks), dict(stored.done))

    async def checkpoint(
        self, group_id: str, topic: str, shard: int, partitions: int, done: Mapping[int, int]
    ) -> TopicProgress:
        group = self.groups.setdefault(group_id, GroupProgress())
        _raise(group, topic, shard, partitions, done)
        stored, watermark = _stored(group, topic, shard, partitions)
        lifted, new_watermark = lift(partitions, self._marks(topic, shard, partitions), stored, watermark)
        _raise(group, topic, shard, partitions, lifted)
        if new_watermark > watermark:
            group.watermarks[(topic, shard)] = new_watermark
        return TopicProgress(watermark=new_watermark, done=lifted)

    async def claim_scope(self, group_id: str, scope: str) -> bool:
        stored = self.scopes.get(group_id)
        if stored == scope:
            return False
        self.scopes[group_id] = scope
        if stored is None:
            return False
        await self.forget(group_id)
        return True

    # ---- the node ------------------------------------------------------------------------------

    async def watermark(self, group_id: str, topic: str, shard: int = 0) -> int:
        group = self.groups.get(group_id, GroupProgress())
        best = group.watermarks.get((topic, shard), 0)
        for known_topic, known_shard, partitions in self.bounds:
            if (known_topic, known_shard) == (topic, shard):
                stored, watermark = _stored(group, topic, shard, partitions)
                marks = self._marks(topic, shard, partitions)
                best = max(best, lift(partitions, marks, stored, watermark)[1])
        return best

    async def low_watermark(self, group_ids: Sequence[str], topic: str, shard: int = 0) -> int:
        return min([await self.watermark(group_id, topic, shard) for group_id in group_ids], default=0)

    async def forget(self, group_id: str) -> None:
        self.groups.pop(group_id, None)

    def _marks(self, topic: str, shard: int, partitions: int) -> dict[int, Mark]:
        bounds = self.bounds.get((topic, shard, partitions))
        if bounds is None:
            return {}
        return {p: Mark(bound=b, cursor=bounds.cursor) for p, b in enumerate(bounds.bounds)}


def _raise(group: GroupProgress, topic: str, shard: int, partitions: int, done: Mapping[int, int]) -> None:
    for partition, value in done.items():
        key = (topic, shard, partitions, partition)
        group.done[key] = max(group.done.get(key, value), value)


def _stored(group: GroupProgress, topic: str, shard: int, partitions: int) -> tuple[dict[int, int], int]:
    done = {p: v for (t, k, n, p), v in group.done.items() if (t, k, n) == (topic, shard, partitions)}
    return done, group.watermarks.get((topic, shard), 0)
