"""Which shards a node should claim and release (`plan`): pure, deterministic, no I/O.

Given the shard count N, the stored leases (`core.stores.shard_leases.ShardLease`), the live nodes
(those whose heartbeat is recent), this node and the store's now, `plan` says what this node does
next. Every live node runs it on the same facts and reaches a consistent answer:

- **Fair share.** With n live nodes each should hold floor(N / n) or ceil(N / n) shards (`share`).
- **Free shards are claimed.** A shard is free when no lease holds it at `now` (never claimed,
  released, or its lease ran out). A lease of a node that is no longer live still holds its shard
  until it runs out: its holder may still be writing. A node below the floor claims up to the
  floor; a node at the floor claims up to the ceiling only the free shards that the nodes below the
  floor do not need. Each node starts looking at its own offset among the shards (its rank among
  the live nodes times N / n), so that nodes claiming at once mostly ask for different shards; the
  store gives a contested shard to one of them, and the others see it taken in their next round.
- **Extras are released gracefully.** A node holds more than the ceiling only after nodes joined:
  it releases the excess (whoever is below the ceiling takes it). A node at the ceiling releases a
  shard only when a live node is below the floor and neither the free shards nor those of nodes
  that are no longer live (free once their leases run out) can cover the need; the donors are
  taken in a fixed order (most shards first, then node id), so that two nodes never both give up
  a shard for one need, and a donor never takes back what it gave. A node that is not live (its
  own heartbeat missing) plans nothing.
- **No flapping.** When every live node holds between floor and ceiling and no shard is free, the
  plan of every node is empty, and nothing a plan does makes a node leave that range again.

The membership loop (`memstream.sharding.membership_loop`) applies a plan: for each release it
closes the shard first, then releases the lease; for each claim it claims, then opens the shard.
Leases of shards outside 0..N-1 are ignored.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from core.stores.shard_leases import ShardLease


@dataclass(frozen=True)
class Plan:
    """The shards to claim (in the order to try them) and to release."""

    claim: tuple[int, ...] = ()
    release: tuple[int, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.claim and not self.release


def share(shards: int, nodes: int) -> tuple[int, int]:
    """(floor, ceiling) of the shards each of `nodes` live nodes should hold."""
    if shards < 1 or nodes < 1:
        raise ValueError(f"a share needs at least one shard and one node, not {shards} and {nodes}")
    floor = shards // nodes
    return floor, floor + (1 if shards % nodes else 0)


def holders(shards: int, leases: Iterable[ShardLease], now: datetime) -> dict[int, str]:
    """The node holding each shard of 0..shards-1 at `now` (shards without a valid lease absent)."""
    return {
        lease.shard: lease.node_id for lease in leases if 0 <= lease.shard < shards and lease.valid_at(now)
    }


def balanced(shards: int, leases: Iterable[ShardLease], live: Iterable[str], now: datetime) -> bool:
    """Whether every shard is held and every live node holds its fair share (the state in which
    every plan is empty)."""
    nodes = sorted(set(live))
    if not nodes:
        return False
    held = holders(shards, leases, now)
    floor, ceil = share(shards, len(nodes))
    counts = _counts(held, nodes)
    return len(held) == shards and all(floor <= c <= ceil for c in counts.values())


def plan(shards: int, leases: Sequence[ShardLease], live: Iterable[str], me: str, now: datetime) -> Plan:
    """What node `me` should claim and release (module doc)."""
    nodes = sorted(set(live))
    if me not in nodes:
        return Plan()
    held = holders(shards, leases, now)
    floor, ceil = share(shards, len(nodes))
    counts = _counts(held, nodes)
    free = [k for k in range(shards) if k not in held]
    mine = sorted(k for k, node in held.items() if node == me)
    need = {node: max(0, floor - count) for node, count in counts.items()}
    excess = {node: max(0, count - ceil) for node, count in counts.items()}

    count = counts[me]
    others_need = sum(n for node, n in need.items() if node != me)
    wanted = max(floor - count, min(ceil - count, len(free) - others_need))
    offset = nodes.index(me) * shards // len(nodes)
    claim = sorted(free, key=lambda k: (k - offset) % shards)[: max(0, wanted)]

    departing = sum(1 for node in held.values() if node not in counts)  # free once their leases run out
    deficit = sum(need.values()) - len(free) - sum(excess.values()) - departing
    releases = excess[me] + _given(me, counts, ceil, floor, deficit)
    release = sorted(mine, key=lambda k: (k - offset) % shards)[len(mine) - releases :] if releases else []
    return Plan(claim=tuple(claim), release=tuple(sorted(release)))


def _counts(held: dict[int, str], nodes: Sequence[str]) -> dict[str, int]:
    counts = dict.fromkeys(nodes, 0)
    for node in held.values():
        if node in counts:
            counts[node] += 1
    return counts


def _given(me: str, counts: dict[str, int], ceil: int, floor: int, deficit: int) -> int:
    """How many shards `me` gives up for the nodes below the floor when the free shards (and the
    excess others release) leave them `deficit` short: donors with more than the floor (counting at
    most the ceiling), most shards first, then by node id, each until the deficit is covered."""
    if deficit <= 0:
        return 0
    donors = sorted(
        ((min(count, ceil) - floor, node) for node, count in counts.items() if min(count, ceil) > floor),
        key=lambda donor: (-donor[0], donor[1]),
    )
    for spare, node in donors:
        given = min(spare, deficit)
        if node == me:
            return given
        deficit -= given
        if deficit <= 0:
            return 0
    return 0
