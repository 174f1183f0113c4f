"""The membership planner (`core.sharding.membership`): examples, then properties over random
states with hypothesis: plans only claim free shards and release the node's own, a balanced state
plans nothing, and nodes applying their plans round after round (one after the other, or all from
one snapshot with racing claims) reach a balanced state and stay in it."""

from __future__ import annotations

import random
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.sharding.membership import Plan, balanced, holders, plan, share
from core.stores.shard_leases import ShardLease

NOW = datetime(2026, 11, 2, 10, 0, tzinfo=UTC)


def lease(shard: int, node: str, *, expires_in_s: float = 5.0, epoch: int = 1) -> ShardLease:
    return ShardLease(shard, node, f"http://{node}", epoch, NOW + timedelta(seconds=expires_in_s))


def test_share_is_floor_and_ceiling() -> None:
    assert share(8, 3) == (2, 3)
    assert share(9, 3) == (3, 3)
    assert share(2, 3) == (0, 1)
    with pytest.raises(ValueError, match="at least one"):
        share(4, 0)


def test_a_lone_node_claims_every_shard() -> None:
    assert plan(4, [], ["a"], "a", NOW) == Plan(claim=(0, 1, 2, 3))


def test_nodes_starting_together_ask_for_different_shards() -> None:
    plans = {node: plan(6, [], ["a", "b", "c"], node, NOW) for node in "abc"}
    assert plans == {"a": Plan(claim=(0, 1)), "b": Plan(claim=(2, 3)), "c": Plan(claim=(4, 5))}


def test_a_node_that_is_not_live_plans_nothing() -> None:
    assert plan(4, [], ["a", "b"], "c", NOW).empty


def test_expired_leases_are_free_and_live_holders_keep_theirs() -> None:
    leases = [lease(0, "a"), lease(1, "b", expires_in_s=-1), lease(2, "gone", expires_in_s=3)]
    # shard 1 ran out; shard 2's holder stopped heartbeating but its lease still holds it
    assert holders(4, leases, NOW) == {0: "a", 2: "gone"}
    assert plan(4, leases, ["a", "b"], "b", NOW) == Plan(claim=(3, 1))  # from its offset, 2
    assert plan(4, leases, ["a", "b"], "a", NOW) == Plan(claim=(1,))  # both below the floor: a race


def test_a_joining_node_gets_shards_released_for_it() -> None:
    leases = [lease(k, "a") for k in range(3)] + [lease(k, "b") for k in range(3, 6)]
    assert plan(6, leases, ["a", "b"], "a", NOW).empty  # balanced between a and b
    live = ["a", "b", "c"]
    assert plan(6, leases, live, "a", NOW) == Plan(release=(2,))  # 3 > ceiling 2
    assert plan(6, leases, live, "b", NOW) == Plan(release=(5,))  # the farthest from its offset
    assert plan(6, leases, live, "c", NOW).empty  # nothing free yet


def test_only_one_donor_gives_for_one_need() -> None:
    leases = [lease(0, "a"), lease(1, "a"), lease(2, "b"), lease(3, "b")]
    live = ["a", "b", "c"]  # 4 shards over 3 nodes: 1 or 2 each; c needs one
    assert plan(4, leases, live, "a", NOW) == Plan(release=(1,))
    assert plan(4, leases, live, "b", NOW).empty
    after = [lease(0, "a"), lease(2, "b"), lease(3, "b")]
    assert plan(4, after, live, "a", NOW).empty  # a does not take it back: c is below the floor
    assert plan(4, after, live, "c", NOW) == Plan(claim=(1,))


def test_a_dead_nodes_shards_cover_a_need_before_anyone_gives_one_up() -> None:
    leases = [lease(0, "a"), lease(1, "a"), lease(2, "b"), lease(3, "gone", expires_in_s=2)]
    live = ["a", "b", "c"]  # c needs one; shard 3 is free once its lease runs out
    assert all(plan(4, leases, live, me, NOW).empty for me in ("a", "b"))
    later = NOW + timedelta(seconds=3)
    assert plan(4, leases, live, "c", later) == Plan(claim=(3,))
    assert plan(4, leases, live, "a", later).empty  # a took nothing and gives nothing


def test_ceiling_nodes_keep_their_shards_when_the_free_ones_cover_the_need() -> None:
    leases = [lease(0, "a"), lease(1, "a"), lease(2, "b")]
    live = ["a", "b", "c"]  # 5 shards: 1 or 2 each; c needs 1, shards 3 and 4 are free
    assert plan(5, leases, live, "a", NOW).empty
    assert plan(5, leases, live, "c", NOW).claim[0] in (3, 4)


# ---- properties ----------------------------------------------------------------------------------

NODES = [f"n{i}" for i in range(5)]


@st.composite
def states(draw: st.DrawFn) -> tuple[int, list[ShardLease], list[str]]:
    """(shards, leases, live nodes): any holder (live or gone) for any shard, valid or run out."""
    shards = draw(st.integers(min_value=1, max_value=12))
    live = draw(st.lists(st.sampled_from(NODES), min_size=1, max_size=5, unique=True))
    leases = []
    for shard in range(shards):
        holder = draw(st.sampled_from([None, "gone", *NODES]))
        if holder is not None:
            leases.append(lease(shard, holder, expires_in_s=draw(st.sampled_from([-1.0, 2.0, 5.0]))))
    return shards, leases, live


@settings(max_examples=300, deadline=None)
@given(states())
def test_plans_claim_free_shards_and_release_own_ones(state: tuple[int, list[ShardLease], list[str]]) -> None:
    shards, leases, live = state
    held = holders(shards, leases, NOW)
    for me in live:
        planned = plan(shards, leases, live, me, NOW)
        assert planned == plan(shards, list(reversed(leases)), list(reversed(live)), me, NOW)  # deterministic
        assert all(k not in held and 0 <= k < shards for k in planned.claim)
        assert len(set(planned.claim)) == len(planned.claim)
        assert all(held.get(k) == me for k in planned.release)
        floor, ceil = share(shards, len(set(live)))
        mine = sum(1 for node in held.values() if node == me)
        assert mine + len(planned.claim) <= max(ceil, mine)  # never claims past the ceiling
        assert mine - len(planned.release) >= min(floor, mine)  # never releases below the floor


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=1, max_value=16), st.integers(min_value=1, max_value=5), st.randoms())
def test_a_balanced_state_plans_nothing(shards: int, nodes: int, rnd: random.Random) -> None:
    live = NODES[:nodes]
    floor, ceil = share(shards, nodes)
    at_ceiling = set(rnd.sample(live, shards - floor * nodes))
    owners = [node for node in live for _ in range(ceil if node in at_ceiling else floor)]
    rnd.shuffle(owners)
    leases = [lease(k, node) for k, node in enumerate(owners)]
    assert balanced(shards, leases, live, NOW)
    assert all(plan(shards, leases, live, me, NOW).empty for me in live)


TTL = timedelta(seconds=5)


def renew(leases: dict[int, ShardLease], me: str, now: datetime) -> None:
    """A live node's renewals: its leases that still hold run `TTL` from now."""
    for k, held in leases.items():
        if held.node_id == me and held.valid_at(now):
            leases[k] = ShardLease(k, me, held.node_url, held.epoch, now + TTL)


def apply(
    leases: dict[int, ShardLease], me: str, planned: Plan, now: datetime, released: set[tuple[str, int]]
) -> None:
    """What the store does with a node's plan: releases of its leases, claims of free shards only.
    A node never takes back a shard it gave up (that would be flapping): `released` remembers."""
    for k in planned.release:
        if k in leases and leases[k].node_id == me:
            del leases[k]
            released.add((me, k))
    for k in planned.claim:
        if k not in leases or not leases[k].valid_at(now):
            assert (me, k) not in released, f"{me} took back shard {k}"
            leases[k] = ShardLease(k, me, f"http://{me}", 1, now + TTL)


def run_rounds(
    shards: int, start: Sequence[ShardLease], live: list[str], rnd: random.Random, *, snapshot: bool
) -> tuple[dict[int, ShardLease], datetime, int]:
    """Rounds of every live node renewing its leases and applying its plan, in a random order, one
    second apart (leases of nodes that are not live run out within `TTL`); `snapshot`: every node
    plans from the state at the round's start (claims race). Returns the state, its time and the
    rounds it took to balance."""
    leases = {lease.shard: lease for lease in start}
    now = NOW
    released: set[tuple[str, int]] = set()
    for rounds in range(1, 3 * shards + 12):
        order = rnd.sample(live, len(live))
        seen = list(leases.values())
        for me in order:
            renew(leases, me, now)
            planned = plan(shards, seen if snapshot else list(leases.values()), live, me, now)
            apply(leases, me, planned, now, released)
        now += timedelta(seconds=1)
        if balanced(shards, list(leases.values()), live, now):
            return leases, now, rounds
    raise AssertionError(
        f"not balanced after {rounds} rounds: {sorted(holders(shards, leases.values(), now).items())}"
    )


@settings(max_examples=300, deadline=None)
@given(states(), st.randoms(), st.booleans())
def test_nodes_applying_their_plans_balance_and_stay_balanced(
    state: tuple[int, list[ShardLease], list[str]], rnd: random.Random, snapshot: bool
) -> None:
    shards, leases, live = state
    final, now, _ = run_rounds(shards, leases, live, rnd, snapshot=snapshot)
    for me in live:  # and then nothing moves: no flapping
        assert plan(shards, list(final.values()), live, me, now).empty


@settings(max_examples=200, deadline=None)
@given(
    st.integers(min_value=1, max_value=16),
    st.integers(min_value=1, max_value=4),
    st.integers(min_value=1, max_value=4),
    st.randoms(),
    st.booleans(),
)
def test_nodes_joining_or_leaving_a_balanced_group_rebalance(
    shards: int, before: int, change: int, rnd: random.Random, snapshot: bool
) -> None:
    """Joining: the old nodes give up what the new ones need. Leaving: the leases of the nodes that
    went run out, and the others take their shards."""
    start, _, _ = run_rounds(shards, [], NODES[:before], rnd, snapshot=snapshot)
    grown = NODES[: min(len(NODES), before + change)]
    final, now, _ = run_rounds(shards, list(start.values()), grown, rnd, snapshot=snapshot)
    assert all(plan(shards, list(final.values()), grown, me, now).empty for me in grown)
    if before > 1:
        shrunk = NODES[: max(1, before - change)]
        final, now, _ = run_rounds(shards, list(start.values()), shrunk, rnd, snapshot=snapshot)
        assert all(plan(shards, list(final.values()), shrunk, me, now).empty for me in shrunk)
