"""Where progress through the journal is kept outside the broker (`core.sequencing` says what the
values mean): the relay's partition bounds (`BoundsStore`) and each consumer group's done values and
watermarks (`ProgressStore`, kept by `streams.runtime.progress.ProgressTracker`). The adapter is
`sinks.postgres.progress.PostgresProgress`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from core.sequencing import PartitionBounds

PartitionKey = tuple[str, int, int]
"""(broker-side topic, partition count of the mapping, partition)."""


@dataclass(frozen=True)
class TopicProgress:
    """A group's progress on one topic under one partition count, as stored."""

    watermark: int
    done: Mapping[int, int]


@dataclass
class GroupProgress:
    """Everything stored for a group: watermarks per topic, done values per partition."""

    watermarks: dict[str, int] = field(default_factory=dict)
    done: dict[PartitionKey, int] = field(default_factory=dict)


class ProgressStore(Protocol):
    """Where groups keep their progress (`sinks.postgres.progress.PostgresProgress`)."""

    async def load(self, group_id: str) -> GroupProgress:
        """The group's stored progress (empty when none)."""
        ...

    async def checkpoint(
        self, group_id: str, topic: str, partitions: int, done: Mapping[int, int]
    ) -> TopicProgress:
        """Raise the stored done values to at least `done`, lift them with the relay's bounds and
        raise the watermark (`core.sequencing.lift`); returns what is stored afterwards."""
        ...

    async def claim_scope(self, group_id: str, scope: str) -> bool:
        """Make `scope` the store the group's progress belongs to; True when progress stored for
        another scope was dropped."""
        ...


class BoundsStore(Protocol):
    """Where the relay keeps its `PartitionBounds` (`sinks.postgres.progress.PostgresProgress`)."""

    async def save_bounds(self, topic: str, bounds: PartitionBounds) -> None: ...

    async def load_bounds(self, topic: str, partitions: int) -> PartitionBounds | None: ...
