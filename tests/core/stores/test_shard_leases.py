"""The shard leases' contract (`core.stores.shard_leases.ShardLeaseStore`), on every store: the
in-memory fake and Postgres. Heartbeats and live nodes, a claim only of a free shard (epochs rising),
racing claimers (one winner, also from separate connection pools), renewals and releases only by the
holder at the same epoch, leases running out, environments kept apart."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from core.stores.shard_leases import PROJECTIONS_ROLE, ShardLease, ShardLeaseStore, UnknownNode
from sinks.postgres.migrations import migrate
from sinks.postgres.pool import create_pool
from sinks.postgres.shard_leases import PostgresShardLeases
from tests.fakes.shard_leases import InMemoryShardLeases, ShardLeaseTables

Stores = Callable[[str], Awaitable[ShardLeaseStore]]
"""A store of the given environment over the test's one backend; each call a new client (Postgres:
its own connection pool, as another node would have)."""


@pytest.fixture(params=["memory", pytest.param("postgres", marks=pytest.mark.engine)])
async def stores(request: pytest.FixtureRequest) -> AsyncIterator[Stores]:
    if request.param == "memory":
        tables = ShardLeaseTables()

        async def in_memory(environment: str) -> ShardLeaseStore:
            return InMemoryShardLeases(environment, tables)

        yield in_memory
        return
    dsn = request.getfixturevalue("pg_dsn")
    pools = [await create_pool(dsn, min_size=1, max_size=4)]
    await migrate(pools[0])

    async def postgres(environment: str) -> ShardLeaseStore:
        pool = await create_pool(dsn, min_size=1, max_size=4)
        pools.append(pool)
        return PostgresShardLeases(pool, environment)

    try:
        yield postgres
    finally:
        for pool in pools:
            await pool.close()


@pytest.fixture
async def store(stores: Stores) -> ShardLeaseStore:
    return await stores("test")


async def test_heartbeats_make_nodes_live_until_they_stop(store: ShardLeaseStore) -> None:
    first = await store.heartbeat("node-a", "http://a:8080")
    await store.heartbeat("node-b", "http://b:8080", frozenset({PROJECTIONS_ROLE}))
    nodes = await store.live_nodes(within_s=5)
    assert [(n.node_id, n.url, n.roles) for n in nodes] == [
        ("node-a", "http://a:8080", frozenset()),
        ("node-b", "http://b:8080", frozenset({PROJECTIONS_ROLE})),
    ]
    assert nodes[0].seen_at == first

    await store.heartbeat("node-a", "http://a2:8080")  # a new URL and roles replace the old ones
    await asyncio.sleep(0.3)
    await store.heartbeat("node-a", "http://a2:8080")
    assert [(n.node_id, n.url) for n in await store.live_nodes(within_s=0.2)] == [
        ("node-a", "http://a2:8080")
    ]
    await store.leave("node-a")
    assert [n.node_id for n in await store.live_nodes(within_s=5)] == ["node-b"]


async def test_a_claim_takes_a_free_shard_only(store: ShardLeaseStore) -> None:
    await store.heartbeat("node-a", "http://a:8080")
    await store.heartbeat("node-b", "http://b:8080")
    now = await store.heartbeat("node-a", "http://a:8080")
    lease = await store.claim(0, "node-a", ttl_s=30)
    assert lease is not None
    assert (lease.shard, lease.node_id, lease.node_url, lease.epoch) == (0, "node-a", "http://a:8080", 1)
    assert lease.valid_at(now) and 29 < (lease.expires_at - now).total_seconds() < 60
    assert await store.claim(0, "node-b", ttl_s=30) is None
    assert await store.claim(0, "node-a", ttl_s=30) is None  # the holder renews instead
    assert await store.owners() == [lease]

    other = await store.claim(3, "node-b", ttl_s=30)
    assert other is not None and other.epoch == 1  # each shard has its own epochs
    assert await store.owners() == [lease, other]


async def test_racing_claimers_one_wins(stores: Stores) -> None:
    nodes = [await stores("test") for _ in range(4)]
    for i, node in enumerate(nodes):
        await node.heartbeat(f"node-{i}", f"http://n{i}:8080")
    for shard in range(3):
        leases = await asyncio.gather(
            *(n.claim(shard, f"node-{i}", ttl_s=30) for i, n in enumerate(nodes) for _ in range(3))
        )
        won = [lease for lease in leases if lease is not None]
        assert len(won) == 1 and won[0].epoch == 1
    assert [lease.shard for lease in await nodes[0].owners()] == [0, 1, 2]


async def test_racing_claimers_of_a_lease_that_ran_out_one_wins(stores: Stores) -> None:
    nodes = [await stores("test") for _ in range(4)]
    for i, node in enumerate(nodes):
        await node.heartbeat(f"node-{i}", f"http://n{i}:8080")
    assert await nodes[0].claim(0, "node-0", ttl_s=0.1) is not None
    await asyncio.sleep(0.2)
    leases = await asyncio.gather(*(n.claim(0, f"node-{i}", ttl_s=30) for i, n in enumerate(nodes)))
    won = [lease for lease in leases if lease is not None]
    assert len(won) == 1 and won[0].epoch == 2
    assert await nodes[0].owners() == won


async def test_a_lease_runs_out_and_the_next_claim_raises_the_epoch(store: ShardLeaseStore) -> None:
    await store.heartbeat("node-a", "http://a:8080")
    await store.heartbeat("node-b", "http://b:8080")
    old = await store.claim(1, "node-a", ttl_s=0.1)
    assert old is not None
    await asyncio.sleep(0.2)  # node-a stalled past its lease
    now = await store.heartbeat("node-b", "http://b:8080")
    assert [lease.valid_at(now) for lease in await store.owners()] == [False]  # listed until taken
    new = await store.claim(1, "node-b", ttl_s=30)
    assert new is not None and (new.node_id, new.epoch) == ("node-b", 2)
    assert await store.renew(old, ttl_s=30) is None
    assert await store.release(old) is False
    assert await store.owners() == [new]


async def test_renew_only_by_the_holder_before_the_lease_runs_out(store: ShardLeaseStore) -> None:
    await store.heartbeat("node-a", "http://a:8080")
    lease = await store.claim(0, "node-a", ttl_s=0.3)
    assert lease is not None
    renewed = await store.renew(lease, ttl_s=30)
    assert renewed is not None and renewed.epoch == lease.epoch and renewed.expires_at > lease.expires_at
    await asyncio.sleep(0.4)  # the first lease's time has passed: the renewed one holds
    assert (await store.owners())[0].node_id == "node-a"
    assert await store.claim(0, "node-a", ttl_s=30) is None

    impostor = ShardLease(0, "node-b", "http://b:8080", lease.epoch, lease.expires_at)
    assert await store.renew(impostor, ttl_s=30) is None
    stale = ShardLease(0, "node-a", "http://a:8080", lease.epoch - 1, lease.expires_at)
    assert await store.renew(stale, ttl_s=30) is None

    short = await store.renew(renewed, ttl_s=0.1)
    assert short is not None
    await asyncio.sleep(0.2)
    assert await store.renew(short, ttl_s=30) is None  # ran out: claim it again (a new epoch)
    again = await store.claim(0, "node-a", ttl_s=30)
    assert again is not None and again.epoch == lease.epoch + 1


async def test_release_frees_the_shard_and_keeps_its_epoch(store: ShardLeaseStore) -> None:
    await store.heartbeat("node-a", "http://a:8080")
    await store.heartbeat("node-b", "http://b:8080")
    lease = await store.claim(2, "node-a", ttl_s=30)
    assert lease is not None
    impostor = ShardLease(2, "node-b", "http://b:8080", lease.epoch, lease.expires_at)
    assert await store.release(impostor) is False
    assert await store.release(lease) is True
    assert await store.release(lease) is False  # already released
    assert await store.renew(lease, ttl_s=30) is None
    assert await store.owners() == []
    taken = await store.claim(2, "node-b", ttl_s=30)
    assert taken is not None and taken.epoch == 2


async def test_a_node_without_a_heartbeat_cannot_claim(store: ShardLeaseStore) -> None:
    with pytest.raises(UnknownNode, match="heartbeat"):
        await store.claim(0, "ghost", ttl_s=30)
    assert await store.owners() == []


async def test_bad_arguments_are_refused(store: ShardLeaseStore) -> None:
    await store.heartbeat("node-a", "http://a:8080")
    with pytest.raises(ValueError, match="at least 1 ms"):
        await store.claim(0, "node-a", ttl_s=0)
    with pytest.raises(ValueError, match="start at 0"):
        await store.claim(-1, "node-a", ttl_s=30)
    assert await store.owners() == []


async def test_environments_are_apart(stores: Stores) -> None:
    test, prod = await stores("test"), await stores("prod")
    await test.heartbeat("node-a", "http://a:8080")
    await prod.heartbeat("node-b", "http://b:8080")
    assert [n.node_id for n in await test.live_nodes(within_s=5)] == ["node-a"]
    with pytest.raises(UnknownNode):
        await prod.claim(0, "node-a", ttl_s=30)  # node-a is a node of "test" only
    in_test = await test.claim(0, "node-a", ttl_s=30)
    in_prod = await prod.claim(0, "node-b", ttl_s=30)
    assert in_test is not None and in_prod is not None and in_prod.epoch == 1
    assert await prod.release(in_test) is False
    assert await prod.renew(in_test, ttl_s=30) is None
    assert await test.owners() == [in_test] and await prod.owners() == [in_prod]
    await prod.leave("node-a")
    assert [n.node_id for n in await test.live_nodes(within_s=5)] == ["node-a"]
