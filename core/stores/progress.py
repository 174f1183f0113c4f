"""Where progress through the journal is kept outside the broker (`core.sequencing` says what the
values mean): the relays' partition bounds (`BoundsStore`) and each consumer group's done values and
watermarks (`ProgressStore`, kept by `streams.runtime.progress.ProgressTracker`). The adapter is
`sinks.postgres.progress.PostgresProgress`.

Every value belongs to one journal shard (`core.sharding.shards`): seqs count within a shard, so a
topic's progress is kept per (topic, shard); with one shard everything is shard 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from core.sequencing import PartitionBounds

PartitionKey = tuple[str, int, int, int]
"""(broker-side topic, journal shard, partition count of the mapping, partition)."""

ShardKey = tuple[str, int]
"""(broker-side topic, journal shard): what a watermark belongs to."""


@dataclass(frozen=True)
class TopicProgress:
    """A group's progress on one topic and shard under one partition count, as stored."""

    watermark: int
    done: Mapping[int, int]


@dataclass
class GroupProgress:
    """Everything stored for a group: watermarks per (topic, shard), done values per partition."""

    watermarks: dict[ShardKey, int] = field(default_factory=dict)
    done: dict[PartitionKey, int] = field(default_factory=dict)


class ProgressStore(Protocol):
    """Where groups keep their progress (`sinks.postgres.progress.PostgresProgress`)."""

    async def load(self, group_id: str) -> GroupProgress:
        """The group's stored progress (empty when none)."""
        ...

    async def checkpoint(
        self, group_id: str, topic: str, shard: int, partitions: int, done: Mapping[int, int]
    ) -> TopicProgress:
        """Raise the stored done values of `shard` to at least `done`, lift them with the bounds of
        the shard's relay and raise the shard's watermark (`core.sequencing.lift`); returns what is
        stored afterwards."""
        ...

    async def claim_scope(self, group_id: str, scope: str) -> bool:
        """Make `scope` the store the group's progress belongs to; True when progress stored for
        another scope was dropped."""
        ...


class BoundsStore(Protocol):
    """Where each shard's relay keeps its `PartitionBounds` (`sinks.postgres.progress.PostgresProgress`)."""

    async def save_bounds(self, topic: str, bounds: PartitionBounds) -> None:
        """Store `bounds` as the facts of the relay of `bounds.shard` on `topic`."""
        ...

    async def load_bounds(self, topic: str, shard: int, partitions: int) -> PartitionBounds | None:
        """The stored bounds of `shard`'s relay on `topic` under `partitions`, or None."""
        ...
