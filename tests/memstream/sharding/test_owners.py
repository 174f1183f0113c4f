"""`LeaseOwners` over two membership loops sharing one lease store (the fake): a thread's shard is
local where its loop serves it and the other node's elsewhere, a lease that ran out (by the
store's clock as of the view plus the time since) or a shard nobody holds is unknown, and the
agent surfaces are local unless the projections are embedded on another node."""

from __future__ import annotations

from core.stores.shard_leases import PROJECTIONS_ROLE
from memstream.api.forwarding import LOCAL, UNKNOWN, Remote
from memstream.sharding.owners import LeaseOwners
from tests.fakes.shard_leases import InMemoryShardLeases, ShardLeaseTables
from tests.memstream.sharding.loops import Node, Shards, eventually


def shard_of(environment: str, account_id: str, thread_id: str, shards: int) -> int:
    """Threads named `s<k>` live in shard k; the scope must be the caller's."""
    assert (environment, account_id) == ("test", "acme") and shards == 4
    return int(thread_id.removeprefix("s"))


async def test_threads_are_placed_where_their_shard_is_served(nodes: list[Node]) -> None:
    tables, shards = ShardLeaseTables(), Shards()
    nodes.append(
        a := Node(InMemoryShardLeases(tables=tables), shards, 4, "a", roles=frozenset({PROJECTIONS_ROLE}))
    )
    nodes.append(b := Node(InMemoryShardLeases(tables=tables), shards, 4, "b"))
    on_a = LeaseOwners(a.loop, shard_of, projections_embedded=True)
    on_b = LeaseOwners(b.loop, shard_of, projections_embedded=True)
    await eventually(lambda: len(shards.of(a.id)) == 2 and len(shards.of(b.id)) == 2, 10, "two shards each")
    await eventually(
        lambda: {le.node_id for le in (b.loop.view.leases if b.loop.view else ())} == {a.id, b.id},
        5,
        "b saw them",
    )
    await eventually(
        lambda: {le.node_id for le in (a.loop.view.leases if a.loop.view else ())} == {a.id, b.id},
        5,
        "a saw them",
    )
    for k in range(4):
        served_by_a = k in shards.of(a.id)
        assert on_a.thread("test", "acme", f"s{k}") == (LOCAL if served_by_a else Remote(b.id, b.url))
        assert on_b.thread("test", "acme", f"s{k}") == (Remote(a.id, a.url) if served_by_a else LOCAL)
        assert on_a.shard(k) == on_a.thread("test", "acme", f"s{k}")  # the placement by shard
        assert on_b.shard(k) == on_b.thread("test", "acme", f"s{k}")
    assert on_a.projections() == LOCAL and on_b.projections() == Remote(a.id, a.url)
    assert LeaseOwners(b.loop, shard_of, projections_embedded=False).projections() == LOCAL

    later = LeaseOwners(b.loop, shard_of, projections_embedded=True, clock=lambda: 10**9)
    k = min(shards.of(a.id))
    assert later.thread("test", "acme", f"s{k}") == UNKNOWN  # a's lease has run out by then
    assert later.shard(k) == UNKNOWN


async def test_nothing_is_known_before_the_first_view_and_without_a_projections_node(
    nodes: list[Node],
) -> None:
    shards = Shards()
    node = Node(InMemoryShardLeases(), shards, 4, "a")  # its task has not run yet
    owners = LeaseOwners(node.loop, shard_of, projections_embedded=True)
    assert node.loop.view is None
    assert owners.thread("test", "acme", "s1") == UNKNOWN and owners.projections() == UNKNOWN
    nodes.append(node)
    await eventually(lambda: shards.of(node.id) == {0, 1, 2, 3}, 5, "the node serves every shard")
    assert owners.thread("test", "acme", "s1") == LOCAL
    assert owners.projections() == UNKNOWN  # no live node has the role
