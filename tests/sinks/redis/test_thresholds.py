"""RedisThresholdStore against the real embedded Redis: counting by offset, guard, rebuild and gap installs,
reset."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from core.stores.thresholds import ThreadScope
from sinks.redis.thresholds import RedisThresholdStore

T = ThreadScope("test", "acme", "bot", "th-1")


@pytest.fixture
async def store(client: Redis, namespace: str) -> AsyncIterator[RedisThresholdStore]:
    yield RedisThresholdStore(client, token_limit=100, message_limit=3, namespace=namespace)
    keys = [k async for k in client.scan_iter(match=f"{namespace}/*")]
    if keys:
        await client.delete(*keys)


async def counted(
    store: RedisThresholdStore, offsets: range, tokens: int = 1, scope: ThreadScope = T
) -> list[str]:
    """Count messages at `offsets` (what the processor does when they arrive in order), the first
    one through the install of a new thread's rebuild (nothing before it, no summary)."""
    kinds = []
    for offset in offsets:
        outcome = await store.count(scope, offset, tokens)
        if outcome.kind == "rebuild":
            assert offset == 0 and outcome.state == "::"
            outcome = await store.install(scope, outcome, base=0, upto=0, tokens=tokens, messages=1, offset=0)
        kinds.append(outcome.kind)
    return kinds


async def test_a_thread_without_state_asks_for_a_rebuild(store: RedisThresholdStore) -> None:
    seen = await store.count(T, 0, 5)
    assert (seen.kind, seen.offset, seen.state) == ("rebuild", None, "::")
    assert await store.counters(T) is None  # nothing counted
    outcome = await store.install(T, seen, base=0, upto=0, tokens=5, messages=1, offset=0)
    assert (outcome.kind, outcome.base, outcome.tokens, outcome.messages, outcome.offset) == (
        "counted",
        0,
        5,
        1,
        0,
    )
    assert await store.counters(T) == {"base": 0, "upto": 0, "tokens": 5, "messages": 1}


async def test_redelivery_and_replay_count_once(store: RedisThresholdStore) -> None:
    assert await counted(store, range(2), tokens=5) == ["counted", "counted"]
    again = [await store.count(T, offset, 5) for offset in (1, 0, 1)]
    assert [(o.kind, o.messages, o.offset) for o in again] == [("duplicate", 2, 1)] * 3
    assert await store.counters(T) == {"base": 0, "upto": 1, "tokens": 10, "messages": 2}


async def test_a_message_past_the_next_offset_is_a_gap_filled_by_the_install(
    store: RedisThresholdStore,
) -> None:
    await counted(store, range(2), tokens=5)
    gap = await store.count(T, 4, 5)  # 2 and 3 never arrived (lost on the way, or another agent's)
    assert (gap.kind, gap.base, gap.tokens, gap.messages, gap.offset) == ("gap", 0, 10, 2, 1)
    assert await store.counters(T) == {"base": 0, "upto": 1, "tokens": 10, "messages": 2}
    filled = await store.install(T, gap, base=0, upto=4, tokens=10 + 15, messages=2 + 3, offset=4)
    assert (filled.kind, filled.tokens, filled.messages, filled.offset) == ("request", 25, 5, 4)
    assert (await store.install(T, gap, base=0, upto=4, tokens=25, messages=5, offset=4)).kind == "exists"
    assert [(await store.count(T, o, 5)).kind for o in (2, 3)] == ["duplicate", "duplicate"]
    assert (await store.count(T, 5, 5)).kind == "guarded"


async def test_crossing_takes_the_guard_once_until_it_is_released(store: RedisThresholdStore) -> None:
    assert await counted(store, range(5)) == ["counted", "counted", "request", "guarded", "guarded"]
    assert await store.release_guard(T)
    again = await store.count(T, 5, 1)
    assert (again.kind, again.messages, again.reason, again.offset) == ("request", 6, "messages", 5)
    assert await store.release_guard(T)
    assert not await store.release_guard(T)  # nothing held any more


async def test_tokens_cross_first_and_name_the_reason(store: RedisThresholdStore) -> None:
    await counted(store, range(1))
    outcome = await store.count(T, 1, 150)
    assert (outcome.kind, outcome.reason, outcome.tokens) == ("request", "tokens", 151)


async def test_an_unconfirmed_request_is_resent_until_marked_sent(store: RedisThresholdStore) -> None:
    assert await counted(store, range(3)) == ["counted", "counted", "request"]
    resend = await store.count(T, 2, 1)
    assert (resend.kind, resend.base, resend.tokens, resend.messages, resend.offset, resend.reason) == (
        "resend",
        0,
        3,
        3,
        2,
        "messages",
    )
    assert (await store.count(T, 1, 1)).kind == "duplicate"  # only the message it was decided at
    await store.mark_sent(T, 2)
    assert (await store.count(T, 2, 1)).kind == "duplicate"
    assert await store.counters(T) == {"base": 0, "upto": 2, "tokens": 3, "messages": 3}


async def test_a_reset_keeps_how_far_the_counting_got_and_makes_the_next_message_rebuild(
    store: RedisThresholdStore,
) -> None:
    await counted(store, range(5))  # the request at 2, messages 3 and 4 while it was in flight
    await store.reset_counters(T, 3)  # its summary covers 0..2
    assert await store.counters(T) == {"base": 3, "upto": 4, "tokens": 0, "messages": 0, "stale": 1}
    assert await store.release_guard(T, up_to=2)
    seen = await store.count(T, 1, 1)  # an old message first (the journal republished)
    assert (seen.kind, seen.offset, seen.state) == ("rebuild", 4, "3:4:1")
    # the rebuild reaches 4 (what was counted), not only the message: 3 and 4 stay counted
    rebuilt = await store.install(T, seen, base=3, upto=4, tokens=2, messages=2, offset=1)
    assert (rebuilt.kind, rebuilt.base, rebuilt.messages, rebuilt.offset) == ("old", 3, 2, 4)
    assert [(await store.count(T, o, 1)).kind for o in (3, 4, 2)] == ["duplicate", "duplicate", "old"]
    assert (await store.count(T, 5, 1)).kind == "request"  # the 3rd message since the summary
    assert await store.counters(T) == {
        "base": 3,
        "upto": 5,
        "tokens": 3,
        "messages": 3,
        "req_offset": 5,
        "req_tokens": 3,
        "req_messages": 3,
    }


async def test_a_rebuild_that_finds_a_crossing_among_earlier_messages_requests_it_at_once(
    store: RedisThresholdStore,
) -> None:
    await counted(store, range(8))  # the request at 2, messages 3..7 while it was in flight
    await store.reset_counters(T, 3)
    await store.release_guard(T, up_to=2)
    seen = await store.count(T, 0, 1)
    rebuilt = await store.install(T, seen, base=3, upto=7, tokens=5, messages=5, offset=0)
    assert (rebuilt.kind, rebuilt.base, rebuilt.messages, rebuilt.offset) == ("request", 3, 5, 7)
    assert (await store.count(T, 7, 1)).kind == "resend"  # the request's own message, redelivered


async def test_an_install_applies_only_to_the_state_count_saw(store: RedisThresholdStore) -> None:
    await counted(store, range(2), tokens=7)
    await store.reset_counters(T, 1)
    seen = await store.count(T, 2, 7)
    assert seen.kind == "rebuild"
    await store.reset_counters(T, 2)  # a newer summary meanwhile
    late = await store.install(T, seen, base=1, upto=2, tokens=14, messages=2, offset=2)
    assert late.kind == "exists"
    assert await store.counters(T) == {"base": 2, "upto": 1, "tokens": 0, "messages": 0, "stale": 1}
    again = await store.count(T, 2, 7)
    assert (await store.install(T, again, base=2, upto=2, tokens=7, messages=1, offset=2)).kind == "counted"
    assert (await store.install(T, again, base=2, upto=2, tokens=7, messages=1, offset=2)).kind == "exists"
    with pytest.raises(ValueError, match="rebuild or gap"):
        await store.install(T, late, base=2, upto=2, tokens=7, messages=1, offset=2)
    with pytest.raises(ValueError, match="below the message"):
        await store.install(T, again, base=2, upto=1, tokens=0, messages=0, offset=2)


async def test_a_state_from_before_offsets_were_kept_is_rebuilt(
    store: RedisThresholdStore, client: Redis
) -> None:
    await client.hset(store.state_key(T), mapping={"base": 0, "tokens": 7, "messages": 1})
    seen = await store.count(T, 1, 1)
    assert (seen.kind, seen.offset, seen.state) == ("rebuild", None, "0::")


async def test_tenants_never_share_state(store: RedisThresholdStore) -> None:
    others = [
        ThreadScope("test", "globex", "bot", "th-1"),
        ThreadScope("prod", "acme", "bot", "th-1"),
        ThreadScope("test", "acme", "other-bot", "th-1"),
    ]
    await counted(store, range(2))
    for scope in others:
        assert (await store.count(scope, 0, 1)).kind == "rebuild"
        assert await counted(store, range(1), scope=scope) == ["counted"]
    assert (await store.count(T, 2, 1)).kind == "request"
    for scope in others:
        assert await store.counters(scope) == {"base": 0, "upto": 0, "tokens": 1, "messages": 1}


async def test_keys_are_namespaced_by_tenant(store: RedisThresholdStore) -> None:
    assert store.state_key(T) == f"{store.namespace}/test/acme/bot/th-1/state"
    assert store.guard_key(T) == f"{store.namespace}/test/acme/bot/th-1/guard"
    with pytest.raises(ValueError):
        await store.reset_counters(T, -1)
