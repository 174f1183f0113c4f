"""`InMemoryShardLeases`: the `ShardLeaseStore` (`core.stores.shard_leases`) in memory.

What the contract suite (`tests/core/stores/test_shard_leases.py`) asserts of every store holds
here: one clock for every node (`clock`, UTC; the wall clock unless a test gives one), a claim only
of a free shard (never claimed, released or run out) raising its epoch, renewals only by the holder
at the same epoch before the lease runs out, releases only by the holder, environments apart.
Calls are atomic (nothing awaits inside one), so racing claimers get one lease. Several stores
share one `ShardLeaseTables` the way several nodes share one database; the state is public for
tests.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from core.stores.shard_leases import NodeInfo, ShardLease, UnknownNode, check_shard, check_ttl


def wall_clock() -> datetime:
    return datetime.now(UTC)


@dataclass
class ShardLeaseTables:
    """The rows of every environment: nodes by (environment, node id), leases by (environment,
    shard) with the last epoch of each shard (a released shard keeps its epoch)."""

    nodes: dict[tuple[str, str], NodeInfo] = field(default_factory=dict)
    leases: dict[tuple[str, int], ShardLease] = field(default_factory=dict)
    epochs: dict[tuple[str, int], int] = field(default_factory=dict)


class InMemoryShardLeases:
    """See the module doc."""

    def __init__(
        self,
        environment: str = "test",
        tables: ShardLeaseTables | None = None,
        clock: Callable[[], datetime] = wall_clock,
    ) -> None:
        self.environment = environment
        self.tables = tables if tables is not None else ShardLeaseTables()
        self.clock = clock

    async def heartbeat(self, node_id: str, url: str, roles: frozenset[str] = frozenset()) -> datetime:
        now = self.clock()
        self.tables.nodes[(self.environment, node_id)] = NodeInfo(node_id, url, now, frozenset(roles))
        return now

    async def leave(self, node_id: str) -> None:
        self.tables.nodes.pop((self.environment, node_id), None)

    async def live_nodes(self, within_s: float) -> list[NodeInfo]:
        since = self.clock() - timedelta(seconds=within_s)
        found = [
            n for (env, _), n in self.tables.nodes.items() if env == self.environment and n.seen_at >= since
        ]
        return sorted(found, key=lambda n: n.node_id)

    async def claim(self, shard: int, node_id: str, ttl_s: float) -> ShardLease | None:
        check_shard(shard)
        check_ttl(ttl_s)
        node = self.tables.nodes.get((self.environment, node_id))
        if node is None:
            raise UnknownNode(f"node {node_id!r} claimed shard {shard} before its first heartbeat")
        now = self.clock()
        key = (self.environment, shard)
        held = self.tables.leases.get(key)
        if held is not None and held.valid_at(now):
            return None
        epoch = self.tables.epochs.get(key, 0) + 1
        lease = ShardLease(shard, node_id, node.url, epoch, now + timedelta(seconds=ttl_s))
        self.tables.leases[key] = lease
        self.tables.epochs[key] = epoch
        return lease

    async def renew(self, lease: ShardLease, ttl_s: float) -> ShardLease | None:
        check_ttl(ttl_s)
        now = self.clock()
        key = (self.environment, lease.shard)
        if not self._holds(lease) or not self.tables.leases[key].valid_at(now):
            return None
        renewed = replace(self.tables.leases[key], expires_at=now + timedelta(seconds=ttl_s))
        self.tables.leases[key] = renewed
        return renewed

    async def release(self, lease: ShardLease) -> bool:
        if not self._holds(lease):
            return False
        del self.tables.leases[(self.environment, lease.shard)]
        return True

    async def owners(self) -> list[ShardLease]:
        found = [lease for (env, _), lease in self.tables.leases.items() if env == self.environment]
        return sorted(found, key=lambda lease: lease.shard)

    def _holds(self, lease: ShardLease) -> bool:
        held = self.tables.leases.get((self.environment, lease.shard))
        return held is not None and held.node_id == lease.node_id and held.epoch == lease.epoch
