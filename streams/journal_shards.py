"""The journal shards open in this process (`LocalShard`): each shard's journal with its relay and
the guard of its topic progress (`core.sharding.shards`: every shard has its own writer, relay,
cursor and seqs, and all of them publish to the same topic).

`LocalShards` is what the operator commands act on (`memstream verify`, `republish`, `rebuild
clickhouse`): one entry per local shard, in shard order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from core.stores.journal import Journal
from streams.relays.journal import Relay
from streams.topic_guards import JournalTopicGuard


@dataclass(frozen=True)
class LocalShard:
    """One journal shard open here: its `journal` (this process writes it), its `relay` and the
    `guard` of its progress on `journal.messages`."""

    shard: int
    journal: Journal
    relay: Relay
    guard: JournalTopicGuard


LocalShards = Sequence[LocalShard]
"""The local shards, ascending by shard."""


async def relay_lag(shards: LocalShards) -> int:
    """Durable messages of every local shard not yet confirmed on the topic."""
    return sum([(await local.relay.lag()).lag for local in shards])
