"""ThresholdStore against the real embedded Redis: claims, counters, guard, rebuild install, reset."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from sinks.redis.thresholds import ThreadScope, ThresholdStore

T = ThreadScope("test", "acme", "bot", "th-1")


@pytest.fixture
async def store(client: Redis, namespace: str) -> AsyncIterator[ThresholdStore]:
    yield ThresholdStore(client, token_limit=100, message_limit=3, namespace=namespace)
    keys = [k async for k in client.scan_iter(match=f"{namespace}/*")]
    if keys:
        await client.delete(*keys)


async def fresh(store: ThresholdStore, scope: ThreadScope = T) -> None:
    """What the processor does for a thread without state and without a summary: base 0."""
    outcome = await store.install(
        scope, base=0, tokens=0, messages=0, message_ids=[], offset=0, counted=False
    )
    assert outcome.kind == "old"


async def test_a_thread_without_state_asks_for_a_rebuild(store: ThresholdStore) -> None:
    assert (await store.count(T, "m0", 0, 5)).kind == "rebuild"
    assert await store.counters(T) is None  # nothing claimed, nothing counted
    await fresh(store)
    outcome = await store.count(T, "m0", 0, 5)
    assert (outcome.kind, outcome.base, outcome.tokens, outcome.messages) == ("counted", 0, 5, 1)


async def test_redelivery_counts_once(store: ThresholdStore) -> None:
    await fresh(store)
    assert (await store.count(T, "m0", 0, 5)).kind == "counted"
    assert (await store.count(T, "m0", 0, 5)).kind == "duplicate"
    assert await store.counters(T) == {"base": 0, "tokens": 5, "messages": 1}


async def test_crossing_takes_the_guard_once_until_it_is_released(store: ThresholdStore) -> None:
    await fresh(store)
    kinds = [(await store.count(T, f"m{i}", i, 1)).kind for i in range(5)]
    assert kinds == ["counted", "counted", "request", "guarded", "guarded"]
    assert await store.release_guard(T)
    again = await store.count(T, "m5", 5, 1)
    assert (again.kind, again.messages, again.reason) == ("request", 6, "messages")
    assert await store.release_guard(T)
    assert not await store.release_guard(T)  # nothing held any more


async def test_tokens_cross_first_and_name_the_reason(store: ThresholdStore) -> None:
    await fresh(store)
    outcome = await store.count(T, "m0", 0, 150)
    assert (outcome.kind, outcome.reason, outcome.tokens) == ("request", "tokens", 150)


async def test_an_unconfirmed_request_is_resent_until_marked_sent(store: ThresholdStore) -> None:
    await fresh(store)
    for i in range(2):
        await store.count(T, f"m{i}", i, 1)
    first = await store.count(T, "m2", 2, 1)
    assert first.kind == "request"
    resend = await store.count(T, "m2", 2, 1)
    assert (resend.kind, resend.base, resend.tokens, resend.messages, resend.reason) == (
        "resend",
        0,
        3,
        3,
        "messages",
    )
    await store.mark_sent(T, 2)
    assert (await store.count(T, "m2", 2, 1)).kind == "duplicate"
    assert await store.counters(T) == {"base": 0, "tokens": 3, "messages": 3}


async def test_reset_makes_the_next_message_rebuild_and_older_ones_are_ignored(store: ThresholdStore) -> None:
    await fresh(store)
    for i in range(3):
        await store.count(T, f"m{i}", i, 1)
    await store.reset_counters(T, 3)
    assert (await store.count(T, "m3", 3, 1)).kind == "rebuild"
    installed = await store.install(
        T, base=3, tokens=1, messages=1, message_ids=["m3"], offset=3, counted=True
    )
    assert (installed.kind, installed.base, installed.messages) == ("counted", 3, 1)
    assert (await store.count(T, "m3", 3, 1)).kind == "duplicate"  # the install claimed it
    assert (await store.count(T, "m1", 1, 1)).kind == "old"
    assert await store.counters(T) == {"base": 3, "tokens": 1, "messages": 1}


async def test_install_never_overwrites_a_valid_state(store: ThresholdStore) -> None:
    await fresh(store)
    await store.count(T, "m0", 0, 7)
    again = await store.install(T, base=0, tokens=99, messages=9, message_ids=["m0"], offset=0, counted=True)
    assert again.kind == "exists"
    assert await store.counters(T) == {"base": 0, "tokens": 7, "messages": 1}


async def test_install_checks_the_threshold_of_the_current_message(store: ThresholdStore) -> None:
    outcome = await store.install(
        T, base=0, tokens=4, messages=4, message_ids=["m0", "m1", "m2", "m3"], offset=3, counted=True
    )
    assert (outcome.kind, outcome.reason) == ("request", "messages")
    assert (await store.count(T, "m3", 3, 1)).kind == "resend"
    assert (await store.count(T, "m1", 1, 1)).kind == "duplicate"


async def test_tenants_never_share_state(store: ThresholdStore) -> None:
    others = [
        ThreadScope("test", "globex", "bot", "th-1"),
        ThreadScope("prod", "acme", "bot", "th-1"),
        ThreadScope("test", "acme", "other-bot", "th-1"),
    ]
    await fresh(store)
    for i in range(2):
        await store.count(T, f"m{i}", i, 1)
    for scope in others:
        assert (await store.count(scope, "m0", 0, 1)).kind == "rebuild"
        await fresh(store, scope)
        assert (await store.count(scope, "m0", 0, 1)).kind == "counted"  # same message id, own claim
    assert (await store.count(T, "m2", 2, 1)).kind == "request"
    for scope in others:
        assert await store.counters(scope) == {"base": 0, "tokens": 1, "messages": 1}


async def test_keys_are_namespaced_by_tenant(store: ThresholdStore) -> None:
    assert store.state_key(T) == f"{store.namespace}/test/acme/bot/th-1/state"
    assert store.guard_key(T) == f"{store.namespace}/test/acme/bot/th-1/guard"
    assert store.claim_key(T, "m9") == f"{store.namespace}/test/acme/bot/th-1/claim/m9"
    with pytest.raises(ValueError):
        await store.reset_counters(T, -1)
