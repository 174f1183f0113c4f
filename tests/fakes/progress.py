"""`InMemoryProgress`: the `ProgressStore` and `BoundsStore` (`core.stores.progress`) in memory,
with the rest of `sinks.postgres.progress.PostgresProgress` (`watermark`, `low_watermark`,
`forget`).

It keeps what Postgres keeps and computes what Postgres computes (`core.sequencing.lift`), so the
contract suite (`tests/core/stores/test_progress.py`) asserts the same values of both: the relay's
bounds per (topic, partition count), each group's done values that only ever rise, lifted by the
bounds, and its watermark per topic; `claim_scope` drops a group's progress when another store
claims it. The state is public for tests: `bounds`, `groups`, `scopes`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from core.sequencing import Mark, PartitionBounds, lift
from core.stores.progress import GroupProgress, TopicProgress


class InMemoryProgress:
    """See the module doc."""

    def __init__(self) -> None:
        self.bounds: dict[tuple[str, int], PartitionBounds] = {}
        self.groups: dict[str, GroupProgress] = {}
        self.scopes: dict[str, str] = {}

    # ---- the relay (BoundsStore) ---------------------------------------------------------------

    async def save_bounds(self, topic: str, bounds: PartitionBounds) -> None:
        self.bounds[(topic, bounds.partitions)] = bounds

    async def load_bounds(self, topic: str, partitions: int) -> PartitionBounds | None:
        return self.bounds.get((topic, partitions))

    # ---- consumer groups (ProgressStore) -------------------------------------------------------

    async def load(self, group_id: str) -> GroupProgress:
        stored = self.groups.get(group_id, GroupProgress())
        return GroupProgress(dict(stored.watermarks), dict(stored.done))

    async def checkpoint(
        self, group_id: str, topic: str, partitions: int, done: Mapping[int, int]
    ) -> TopicProgress:
        group = self.groups.setdefault(group_id, GroupProgress())
        _raise(group, topic, partitions, done)
        stored, watermark = _stored(group, topic, partitions)
        lifted, new_watermark = lift(partitions, self._marks(topic, partitions), stored, watermark)
        _raise(group, topic, partitions, lifted)
        if new_watermark > watermark:
            group.watermarks[topic] = new_watermark
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

    async def watermark(self, group_id: str, topic: str) -> int:
        group = self.groups.get(group_id, GroupProgress())
        best = group.watermarks.get(topic, 0)
        for known_topic, partitions in self.bounds:
            if known_topic == topic:
                stored, watermark = _stored(group, topic, partitions)
                best = max(best, lift(partitions, self._marks(topic, partitions), stored, watermark)[1])
        return best

    async def low_watermark(self, group_ids: Sequence[str], topic: str) -> int:
        return min([await self.watermark(group_id, topic) for group_id in group_ids], default=0)

    async def forget(self, group_id: str) -> None:
        self.groups.pop(group_id, None)

    def _marks(self, topic: str, partitions: int) -> dict[int, Mark]:
        bounds = self.bounds.get((topic, partitions))
        if bounds is None:
            return {}
        return {p: Mark(bound=b, cursor=bounds.cursor) for p, b in enumerate(bounds.bounds)}


def _raise(group: GroupProgress, topic: str, partitions: int, done: Mapping[int, int]) -> None:
    for partition, value in done.items():
        key = (topic, partitions, partition)
        group.done[key] = max(group.done.get(key, value), value)


def _stored(group: GroupProgress, topic: str, partitions: int) -> tuple[dict[int, int], int]:
    done = {p: v for (t, n, p), v in group.done.items() if t == topic and n == partitions}
    return done, group.watermarks.get(topic, 0)
