"""The journal shards open in this process (`LocalShard`): each shard's journal with its relay and
the guard of its topic progress (`core.sharding.shards`: every shard has its own writer, relay,
cursor and seqs, and all of them publish to the same topic).

`LocalShards` is what the operator commands act on (`memstream republish`): one entry per local
shard, in shard order. `memstream verify` and `rebuild clickhouse` need less of a shard (a
`ShardSource`: its seqs and its relay's durable cursor), which a read-only view of a shard another
node writes also gives (`memstream.sharding.shard_sources`); a `LocalShard` is one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from core.journal.models import Message
from core.stores.journal import Journal
from streams.relays.journal import Relay
from streams.topic_guards import JournalTopicGuard


class ShardSource(Protocol):
    """One journal shard as `memstream verify` and `rebuild clickhouse` read it (module doc)."""

    @property
    def shard(self) -> int: ...

    async def read_from_seq(self, after_seq: int, limit: int) -> list[Message]:
        """The shard's messages with seq > `after_seq`, in seq order, at most `limit`."""
        ...

    async def last_seq(self) -> int:
        """The shard's highest seq (0 when none)."""
        ...

    async def published(self) -> int:
        """The durable cursor of the shard's relay: its seqs up to it are on the topic."""
        ...


@dataclass(frozen=True)
class LocalShard:
    """One journal shard open here: its `journal` (this process writes it), its `relay` and the
    `guard` of its progress on `journal.messages`."""

    shard: int
    journal: Journal
    relay: Relay
    guard: JournalTopicGuard

    async def read_from_seq(self, after_seq: int, limit: int) -> list[Message]:
        return await self.journal.read_from_seq(after_seq, limit)

    async def last_seq(self) -> int:
        return await self.journal.last_seq()

    async def published(self) -> int:
        return await self.journal.get_cursor(self.relay.cursor_name)


LocalShards = Sequence[LocalShard]
"""The local shards, ascending by shard."""
ShardSources = Sequence[ShardSource]
"""Every shard of the deployment, ascending by shard."""


async def relay_lag(shards: LocalShards) -> int:
    """Durable messages of every local shard not yet confirmed on the topic."""
    return sum([(await local.relay.lag()).lag for local in shards])
