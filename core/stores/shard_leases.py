"""Which node owns which journal shard: the nodes' heartbeats and the shards' leases
(`ShardLeaseStore`). The adapter is `sinks.postgres.shard_leases.PostgresShardLeases`; the
membership loop (`memstream.sharding.membership_loop`) drives it and `core.sharding.membership`
decides what to claim and release.

Contract (one store per environment: a store sees and changes only its environment's rows):
- Every instant is the store's own clock (Postgres: `now()`), so that nodes with skewed clocks
  agree on whether a lease has run out. `heartbeat` returns that clock's reading.
- `claim(shard, node_id, ttl_s)` takes a shard only when nobody holds it (never claimed, released,
  or its lease ran out) and raises its `epoch` by 1; it is atomic: of any number of racing
  claimers exactly one gets the lease, the others get None. The claimer must have sent a
  heartbeat (`UnknownNode` otherwise): the lease records the URL the node announced.
- `renew(lease, ttl_s)` prolongs a lease only for its holder at the same epoch and only while it
  has not run out; None otherwise (the lease is lost: stop using the shard).
- `release(lease)` frees the shard when `lease` still holds it (same node and epoch, run out or
  not); the epoch stays, so the next claim raises it again.
- A lease is not a fence by itself: a holder that stalls past its lease may still act while another
  holds it. The shard's journal has its own fence (SlateDB: opening a writer fences the previous
  one), and the membership loop closes a shard before its lease may have run out.
- Every call raises what the engine raises when the store cannot be reached (Postgres: the
  driver's connection errors, `sinks.postgres.errors.is_postgres_unavailable`): the state is then
  unknown, and a lease whose renewal failed counts as lost once its time may have passed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from core.errors import MemstreamError

PROJECTIONS_ROLE = "projections"
"""The role of the node that hosts the embedded projections (chdb, Qdrant Edge: one process each)
and therefore serves their queries for the other nodes."""


class UnknownNode(MemstreamError):
    """A node claimed a shard before it sent a heartbeat: send `heartbeat` first."""

    code = "unknown_node"


@dataclass(frozen=True)
class ShardLease:
    """A shard's lease as stored: `node_id` (at `node_url`) holds `shard` at `epoch` until
    `expires_at` (the store's clock). `epoch` rises by 1 with every claim of the shard."""

    shard: int
    node_id: str
    node_url: str
    epoch: int
    expires_at: datetime

    def valid_at(self, now: datetime) -> bool:
        """Whether the lease still holds the shard at `now` (the store's clock)."""
        return self.expires_at > now


@dataclass(frozen=True)
class NodeInfo:
    """A node as its last heartbeat announced it: its URL (where other nodes forward requests),
    when it was seen (the store's clock) and its roles (e.g. `PROJECTIONS_ROLE`)."""

    node_id: str
    url: str
    seen_at: datetime
    roles: frozenset[str] = field(default_factory=frozenset)


class ShardLeaseStore(Protocol):
    """The nodes and shard leases of one environment (module doc)."""

    async def heartbeat(self, node_id: str, url: str, roles: frozenset[str] = frozenset()) -> datetime:
        """Record that `node_id` is alive at `url` with `roles`, now; returns the store's now."""
        ...

    async def leave(self, node_id: str) -> None:
        """Forget the node (it stops; its leases are not touched: release them first)."""
        ...

    async def live_nodes(self, within_s: float) -> list[NodeInfo]:
        """The nodes whose last heartbeat is at most `within_s` old, by node id."""
        ...

    async def claim(self, shard: int, node_id: str, ttl_s: float) -> ShardLease | None:
        """The new lease (epoch + 1, expiring `ttl_s` from now) when the shard was free; None when
        another lease holds it. `UnknownNode` when `node_id` never sent a heartbeat."""
        ...

    async def renew(self, lease: ShardLease, ttl_s: float) -> ShardLease | None:
        """`lease` prolonged to `ttl_s` from now when it still holds the shard; None when it is lost
        (ran out, released, or another epoch)."""
        ...

    async def release(self, lease: ShardLease) -> bool:
        """Free the shard if `lease` still holds it (same node and epoch); False otherwise."""
        ...

    async def owners(self) -> Sequence[ShardLease]:
        """Every held lease by shard, including those that ran out and were not claimed again
        (compare `expires_at` with the store's now); released shards are absent."""
        ...


def check_ttl(ttl_s: float) -> None:
    """ValueError unless a lease of `ttl_s` lasts at least 1 ms (what every store can keep)."""
    if not ttl_s >= 0.001:
        raise ValueError(f"a lease lasts at least 1 ms, not {ttl_s} s")


def check_shard(shard: int) -> None:
    """ValueError for a negative shard number."""
    if shard < 0:
        raise ValueError(f"shard numbers start at 0, not {shard}")
