"""`MembershipLoop` over a real lease store: the in-memory fake for the rules of one loop (claims,
handovers, failing callbacks, orphans), and two or three loops on one real Postgres for what the
membership promises: every shard served by exactly one node, a dead node's shards taken over
within the lease's TTL and two heartbeats, a node cut off from the store closing its shards before
its leases may run out, and a node that joins getting its share.

`Shards` (`loops.py`) stands for the nodes' journals: it records which loop serves which shard and
every time two serve one at once (a crashed loop's shards are closed by the test: its process is
gone)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from typing import Any

import asyncpg
import pytest

from core.stores.shard_leases import ShardLease, ShardLeaseStore
from memstream.sharding.membership_loop import MembershipConfig, new_node_id
from sinks.postgres.pool import create_pool
from sinks.postgres.shard_leases import PostgresShardLeases
from tests.fakes.shard_leases import InMemoryShardLeases, ShardLeaseTables
from tests.memstream.sharding.loops import FAST, Node, Shards, eventually

# ---- one loop, on the fake ---------------------------------------------------------------------------


def test_timings_that_would_fence_a_healthy_node_are_refused() -> None:
    with pytest.raises(ValueError, match="ttl_s"):
        MembershipConfig(node_id="a", url="http://a", shards=2, heartbeat_s=1, ttl_s=3, fence_margin_s=2)
    with pytest.raises(ValueError, match="positive"):
        MembershipConfig(node_id="a", url="http://a", shards=2, heartbeat_s=0)
    with pytest.raises(ValueError, match="at least 1"):
        MembershipConfig(node_id="a", url="http://a", shards=0)
    assert new_node_id("host") != new_node_id("host")


async def test_a_lone_node_serves_every_shard_and_hands_them_back_when_it_stops(nodes: list[Node]) -> None:
    store, shards = InMemoryShardLeases(), Shards()
    nodes.append(node := Node(store, shards, 4, "a"))
    await eventually(lambda: shards.of(node.id) == {0, 1, 2, 3}, 5, "the node serves every shard")
    assert sorted(epoch for _, _, epoch in shards.opened) == [1, 1, 1, 1]
    assert node.loop.open_shards == {0, 1, 2, 3} and node.loop.view is not None
    await node.stopped()
    assert sorted(k for _, k in shards.closed) == [0, 1, 2, 3] and not shards.serving
    assert await store.owners() == [] and await store.live_nodes(60) == []


async def test_a_shard_that_does_not_open_is_released_and_retried_later(nodes: list[Node]) -> None:
    store, shards = InMemoryShardLeases(), Shards()
    shards.fail_open.add(1)
    nodes.append(node := Node(store, shards, 2, "a", timing={**FAST, "retry_s": 0.5}))
    await eventually(lambda: shards.of(node.id) == {0}, 5, "shard 0 opens")
    await eventually(lambda: [lease.shard for lease in store.tables.leases.values()] == [0], 5, "1 released")
    shards.fail_open.clear()
    await eventually(lambda: shards.of(node.id) == {0, 1}, 5, "shard 1 is claimed again")
    assert [(k, epoch) for _, k, epoch in shards.opened] == [(0, 1), (1, 2)]  # the failed open held epoch 1


async def test_a_lost_lease_closes_its_shard_and_an_orphan_lease_is_released(nodes: list[Node]) -> None:
    tables = ShardLeaseTables()
    store, shards = InMemoryShardLeases(tables=tables), Shards()
    nodes.append(node := Node(store, shards, 2, "a"))
    await eventually(lambda: shards.of(node.id) == {0, 1}, 5, "the node serves both shards")
    lease = tables.leases[("test", 1)]
    tables.leases[("test", 1)] = ShardLease(1, "intruder", "http://x", lease.epoch + 1, lease.expires_at)
    await eventually(lambda: shards.of(node.id) == {0}, 5, "shard 1 closed once its lease is lost")
    assert (node.id, 1) in shards.closed

    del tables.leases[("test", 1)]  # the node takes it again; then a lease it does not know of:
    await eventually(lambda: shards.of(node.id) == {0, 1}, 5, "shard 1 served again")
    await node.stopped()
    await store.heartbeat(node.id, "http://a:8080")
    orphan = await store.claim(0, node.id, ttl_s=30)  # a claim whose answer the node never got
    assert orphan is not None
    nodes.append(Node(store, shards, 2, "a", node_id=node.id))  # the same id, for the test's sake
    await eventually(lambda: shards.of(node.id) == {0, 1}, 5, "the orphan is released, then claimed")
    assert tables.leases[("test", 0)].epoch == orphan.epoch + 1


async def test_a_shard_that_does_not_close_keeps_its_lease_until_it_runs_out(nodes: list[Node]) -> None:
    tables = ShardLeaseTables()
    shards = Shards()
    nodes.append(a := Node(InMemoryShardLeases(tables=tables), shards, 2, "a"))
    await eventually(lambda: shards.of(a.id) == {0, 1}, 5, "a serves both shards")
    shards.fail_close.add(1)
    nodes.append(b := Node(InMemoryShardLeases(tables=tables), shards, 2, "b"))
    await eventually(
        lambda: (a.id, 1) in shards.closed or 1 not in a.loop.open_shards, 5, "a gives shard 1 up"
    )
    assert tables.leases[("test", 1)].node_id == a.id  # not released: it runs out
    await eventually(lambda: shards.of(b.id) == {1}, 5, "b takes it once the lease ran out")
    assert shards.overlaps == [(1, a.id, b.id)]  # a's close failed, so it "served" it still: the fence's job


# ---- two or three loops, on Postgres -----------------------------------------------------------------


@pytest.fixture
async def postgres_stores(
    pg_dsn: str, pool: asyncpg.Pool
) -> AsyncIterator[Callable[[], Awaitable[ShardLeaseStore]]]:
    """A store per node, each on a connection pool of its own (as separate processes would have)."""
    pools: list[asyncpg.Pool] = []

    async def store() -> ShardLeaseStore:
        pools.append(own := await create_pool(pg_dsn, min_size=1, max_size=4))
        return PostgresShardLeases(own, "test")

    try:
        yield store
    finally:
        for own in pools:
            await own.close()


async def test_three_nodes_serve_every_shard_once(postgres_stores: Any, nodes: list[Node]) -> None:
    shards = Shards()
    for name in "abc":
        nodes.append(Node(await postgres_stores(), shards, 6, name))
    await eventually(lambda: all(len(shards.of(n.id)) == 2 for n in nodes), 10, "two shards each")
    assert sorted(shards.serving) == list(range(6)) and not shards.overlaps
    leases = await nodes[0].store.owners()
    assert {(lease.shard, lease.node_id) for lease in leases} == set(
        (k, n) for k, n in shards.serving.items()
    )


async def test_a_dead_nodes_shards_are_taken_over_within_the_ttl_and_two_heartbeats(
    postgres_stores: Any, pool: asyncpg.Pool, nodes: list[Node]
) -> None:
    shards = Shards()
    for name in "abc":
        nodes.append(Node(await postgres_stores(), shards, 6, name))
    await eventually(lambda: all(len(shards.of(n.id)) == 2 for n in nodes), 10, "two shards each")
    dead = nodes[2]
    orphaned = shards.of(dead.id)
    await dead.crash()  # its heartbeats and renewals end; nothing is closed or released
    shards.crashed(dead.id)
    before = {lease.shard: lease for lease in await nodes[0].store.owners() if lease.node_id == dead.id}
    expiry = max(lease.expires_at for lease in before.values())
    limit = FAST["ttl_s"] + 2 * FAST["heartbeat_s"] + 1.0  # 1 s for this busy machine's scheduling
    await eventually(lambda: sorted(shards.serving) == list(range(6)), limit, "the others took over")
    assert sorted(len(shards.of(n.id)) for n in nodes[:2]) == [3, 3] and not shards.overlaps
    taken = [lease for lease in await nodes[0].store.owners() if lease.shard in orphaned]
    assert len(taken) == 2 and all(lease.epoch == before[lease.shard].epoch + 1 for lease in taken)
    claimed_at = await pool.fetchval("SELECT now()")
    assert (claimed_at - expiry).total_seconds() < limit


@pytest.mark.parametrize("hang", [False, True], ids=["refused", "hanging"])
async def test_a_node_cut_off_from_the_store_closes_its_shards_before_its_leases_run_out(
    postgres_stores: Any, pool: asyncpg.Pool, nodes: list[Node], hang: bool
) -> None:
    shards = Shards()
    for name in "ab":
        nodes.append(Node(await postgres_stores(), shards, 4, name))
    await eventually(lambda: all(len(shards.of(n.id)) == 2 for n in nodes), 10, "two shards each")
    cut = nodes[1]
    closed_at: dict[int, tuple[datetime, datetime]] = {}

    async def record(node: str, shard: int) -> None:
        if node == cut.id:
            expires = await pool.fetchval("SELECT expires_at FROM shard_leases WHERE shard = $1", shard)
            closed_at[shard] = (await pool.fetchval("SELECT now()"), expires)

    shards.on_close = record
    held = shards.of(cut.id)
    cut.store.cut, cut.store.hang = True, hang
    await eventually(lambda: set(closed_at) == held, FAST["ttl_s"] + 2, "the cut-off node closed its shards")
    assert all(now < expires for now, expires in closed_at.values()), closed_at  # before they ran out
    await eventually(lambda: shards.of(nodes[0].id) == {0, 1, 2, 3}, FAST["ttl_s"] + 3, "a took them over")
    assert not shards.overlaps

    cut.store.cut = False  # the network is back: the node rejoins and gets its share again
    await eventually(lambda: len(shards.of(cut.id)) == 2, 10, "b serves two shards again")
    assert not shards.overlaps


async def test_a_node_that_joins_gets_its_share_gracefully(postgres_stores: Any, nodes: list[Node]) -> None:
    shards = Shards()
    for name in "ab":
        nodes.append(Node(await postgres_stores(), shards, 6, name))
    await eventually(lambda: all(len(shards.of(n.id)) == 3 for n in nodes), 10, "three shards each")
    closes = len(shards.closed)  # a may have started alone and handed three to b
    nodes.append(Node(await postgres_stores(), shards, 6, "c"))
    await eventually(lambda: all(len(shards.of(n.id)) == 2 for n in nodes), 10, "two shards each")
    assert not shards.overlaps
    handed = shards.closed[closes:]
    assert sorted(node for node, _ in handed) == sorted([nodes[0].id, nodes[1].id])  # one each, no churn
    for node in nodes:
        await node.stopped()
    assert not shards.serving and await nodes[0].store.store.owners() == []
