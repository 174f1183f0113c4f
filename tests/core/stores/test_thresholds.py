"""The threshold store's contract (`core.stores.thresholds.ThresholdStore`), on every store: the
in-memory fake (on the pure rule, `processors.thresholds.advance`/`crossing`) and Redis (its Lua
copy). Counting by offset, the guard, rebuild and gap installs, resets; and generated sequences of
deliveries, installs, summaries and wipes run on both at once with equal outcomes required. What
only Redis does (key layout, a hash from before offsets were kept) is in
`tests/sinks/redis/test_thresholds.py`."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import hypothesis
import pytest
from hypothesis import strategies as st

from core.stores.thresholds import Outcome, ThreadScope, ThresholdStore
from processors.thresholds import Counters, advance
from sinks.redis.client import redis_client
from sinks.redis.thresholds import RedisThresholdStore
from tests.fakes.thresholds import InMemoryThresholdStore
from tests.processors.threshold_support import threshold_store, wipe

T = ThreadScope("test", "acme", "bot", "th-1")

Store = ThresholdStore


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.engine)])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    """The store under test, empty, with limits of 100 tokens / 3 messages (redis: the session's,
    on a namespace of its own)."""
    if request.param == "memory":
        yield InMemoryThresholdStore(token_limit=100, message_limit=3)
        return
    async with threshold_store(
        request.getfixturevalue("redis_url"), token_limit=100, message_limit=3
    ) as redis:
        yield redis


async def counted(store: Store, offsets: range, tokens: int = 1, scope: ThreadScope = T) -> list[str]:
    """Count messages at `offsets` (what the processor does when they arrive in order), the first
    one through the install of a new thread's rebuild (nothing before it, no summary)."""
    kinds: list[str] = []
    for offset in offsets:
        outcome = await store.count(scope, offset, tokens)
        if outcome.kind == "rebuild":
            assert offset == 0 and outcome.state == "::"
            outcome = await store.install(scope, outcome, base=0, upto=0, tokens=tokens, messages=1, offset=0)
        kinds.append(outcome.kind)
    return kinds


async def test_a_thread_without_state_asks_for_a_rebuild(store: Store) -> None:
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


async def test_redelivery_and_replay_count_once(store: Store) -> None:
    assert await counted(store, range(2), tokens=5) == ["counted", "counted"]
    again = [await store.count(T, offset, 5) for offset in (1, 0, 1)]
    assert [(o.kind, o.messages, o.offset) for o in again] == [("duplicate", 2, 1)] * 3
    assert await store.counters(T) == {"base": 0, "upto": 1, "tokens": 10, "messages": 2}


async def test_a_message_past_the_next_offset_is_a_gap_filled_by_the_install(
    store: Store,
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


async def test_crossing_takes_the_guard_once_until_it_is_released(store: Store) -> None:
    assert await counted(store, range(5)) == ["counted", "counted", "request", "guarded", "guarded"]
    assert await store.release_guard(T)
    again = await store.count(T, 5, 1)
    assert (again.kind, again.messages, again.reason, again.offset) == ("request", 6, "messages", 5)
    assert await store.release_guard(T)
    assert not await store.release_guard(T)  # nothing held any more


async def test_tokens_cross_first_and_name_the_reason(store: Store) -> None:
    await counted(store, range(1))
    outcome = await store.count(T, 1, 150)
    assert (outcome.kind, outcome.reason, outcome.tokens) == ("request", "tokens", 151)


async def test_an_unconfirmed_request_is_resent_until_marked_sent(store: Store) -> None:
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
    store: Store,
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
    store: Store,
) -> None:
    await counted(store, range(8))  # the request at 2, messages 3..7 while it was in flight
    await store.reset_counters(T, 3)
    await store.release_guard(T, up_to=2)
    seen = await store.count(T, 0, 1)
    rebuilt = await store.install(T, seen, base=3, upto=7, tokens=5, messages=5, offset=0)
    assert (rebuilt.kind, rebuilt.base, rebuilt.messages, rebuilt.offset) == ("request", 3, 5, 7)
    assert (await store.count(T, 7, 1)).kind == "resend"  # the request's own message, redelivered


async def test_an_install_applies_only_to_the_state_count_saw(store: Store) -> None:
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


async def test_a_batch_counts_in_order_and_stops_after_the_first_that_needs_the_journal(
    store: Store,
) -> None:
    other = ThreadScope("test", "acme", "bot", "th-2")
    await counted(store, range(1))
    first = await store.count_batch([(T, 1, 1), (T, 1, 1), (T, 2, 1), (T, 3, 1), (other, 0, 1), (T, 4, 1)])
    assert [(o.kind, o.messages, o.offset) for o in first] == [
        ("counted", 2, 1),
        ("duplicate", 2, 1),
        ("request", 3, 2),
        ("guarded", 4, 3),
        ("rebuild", None, None),  # a new thread: the batch stops here, nothing changed
    ]
    assert await store.counters(other) is None
    assert await store.counters(T) == {
        "base": 0,
        "upto": 3,
        "tokens": 4,
        "messages": 4,
        "req_offset": 2,
        "req_tokens": 3,
        "req_messages": 3,
    }
    gap = await store.count_batch([(T, 2, 1), (T, 6, 1), (T, 4, 1)])
    assert [o.kind for o in gap] == ["resend", "gap"]  # offset 4 is not counted
    assert await store.count_batch([]) == []
    assert [o.kind for o in await store.count_batch([(T, 4, 1)])] == ["guarded"]


async def test_tenants_never_share_state(store: Store) -> None:
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


async def test_a_reset_needs_an_offset(store: Store) -> None:
    with pytest.raises(ValueError):
        await store.reset_counters(T, -1)


async def test_the_guard_is_held_for_a_crossing_and_released_up_to_it(store: Store) -> None:
    assert await store.hold_guard(T, 10)
    assert not await store.hold_guard(T, 20)  # one compaction at a time
    assert not await store.release_guard(T, up_to=9)  # a late redelivery of an older one
    assert await store.release_guard(T, up_to=10)
    assert await store.hold_guard(T, 20)
    assert await store.release_guard(T)
    assert not await store.release_guard(T, up_to=30)


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.engine)])
async def short_lease(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    """A store whose guard lease lasts 0.1 s (limits 100 tokens / 3 messages)."""
    if request.param == "memory":
        yield InMemoryThresholdStore(token_limit=100, message_limit=3, guard_ttl_s=0.1)
        return
    client = redis_client(request.getfixturevalue("redis_url"))
    redis = RedisThresholdStore(
        client, token_limit=100, message_limit=3, namespace=f"t{uuid.uuid4().hex[:12]}", guard_ttl_s=0.1
    )
    try:
        yield redis
    finally:
        await wipe(redis)
        await client.aclose()


async def test_a_guard_whose_summarizer_died_frees_the_thread_when_its_lease_runs_out(
    short_lease: Store,
) -> None:
    assert await counted(short_lease, range(3)) == ["counted", "counted", "request"]
    assert (await short_lease.count(T, 3, 1)).kind == "guarded"
    assert (await short_lease.count(T, 2, 1)).kind == "resend"  # undelivered, guard still held
    await asyncio.sleep(0.15)
    assert (await short_lease.count(T, 2, 1)).kind == "duplicate"  # the guard is gone: no resend
    again = await short_lease.count(T, 4, 1)
    assert (again.kind, again.messages, again.offset) == ("request", 5, 4)
    assert not await short_lease.release_guard(T, up_to=3)
    await asyncio.sleep(0.15)
    assert await short_lease.hold_guard(T, 9)


# ---------------------------------------------------------------- the pure rule and its Lua copy

TOKEN_LIMIT = 40
MESSAGE_LIMIT = 6
AGENTS = ("bot", "aide")  # another agent's messages in between are gaps for the first

Op = tuple[str, int, int]
OPS = st.one_of(
    st.tuples(st.just("append"), st.integers(1, 8), st.integers(0, 1)),  # n messages of an agent
    st.tuples(st.just("count"), st.integers(0, 10_000), st.just(0)),  # a message delivered, any order
    st.tuples(st.just("next"), st.integers(1, 8), st.just(0)),  # the next n messages in order
    st.tuples(st.just("batch"), st.integers(1, 8), st.just(0)),  # count_batch (`apply`)
    st.tuples(st.just("summarize"), st.integers(0, 1), st.integers(0, 10_000)),  # reset + release
    st.tuples(st.just("release"), st.integers(0, 1), st.integers(-1, 60)),  # -1: unconditional
    st.tuples(st.just("hold"), st.integers(0, 1), st.integers(0, 60)),
    st.tuples(st.just("sent"), st.integers(0, 1), st.integers(0, 60)),
    st.tuples(st.just("wipe"), st.just(0), st.just(0)),
)


@dataclass
class Lockstep:
    """The same thread on both stores: a journal of (agent, tokens) and what each step answered."""

    memory: InMemoryThresholdStore
    redis: RedisThresholdStore
    thread: str
    journal: list[tuple[str, int]] = field(default_factory=list)
    covered: dict[str, int] = field(default_factory=dict)  # agent -> last summarized offset
    cursor: int = 0

    def scope(self, agent: str) -> ThreadScope:
        return ThreadScope("test", "acme", agent, self.thread)

    def fold(self, agent: str, after: int, up_to: int) -> Counters:
        """The pure rule over the agent's messages with `after < offset <= up_to`."""
        counters = Counters()
        for offset, (author, tokens) in enumerate(self.journal):
            if after < offset <= up_to and author == agent:
                counters, _ = advance(counters, tokens)
        return counters

    async def both(self, step: str, *args: object, **kwargs: object) -> object:
        """Run one store method on both stores; they must answer the same."""
        answers = [await getattr(store, step)(*args, **kwargs) for store in (self.memory, self.redis)]
        assert answers[0] == answers[1], (step, args, kwargs, answers)
        return answers[0]

    async def deliver(self, offset: int, seen: Outcome | None = None) -> None:
        """What the processor does with one message: count it (unless `count_batch` answered it
        `seen`), rebuild or fill the gap."""
        agent, tokens = self.journal[offset]
        scope = self.scope(agent)
        if seen is None:
            seen = await self.both("count", scope, offset, tokens)  # type: ignore[assignment]
        assert isinstance(seen, Outcome)
        hypothesis.event(seen.kind)
        if seen.kind == "rebuild":
            last = self.covered.get(agent, -1)
            upto = max(offset, last, seen.offset if seen.offset is not None else -1)
            counters = self.fold(agent, last, upto)
            base, tokens_, messages = last + 1, counters.tokens, counters.messages
        elif seen.kind == "gap":
            assert seen.base is not None and seen.offset is not None
            assert seen.tokens is not None and seen.messages is not None
            added = self.fold(agent, seen.offset, offset)
            base, upto = seen.base, offset
            tokens_, messages = seen.tokens + added.tokens, seen.messages + added.messages
        else:
            return
        installed = await self.both(
            "install", scope, seen, base=base, upto=upto, tokens=tokens_, messages=messages, offset=offset
        )
        assert isinstance(installed, Outcome)
        hypothesis.event(f"install: {installed.kind}")

    async def apply(self, op: Op) -> None:
        name, n, x = op
        if name == "append":
            self.journal += [(AGENTS[x], (len(self.journal) * 7) % 13 + 1) for _ in range(n)]
        elif name == "count" and self.journal:
            await self.deliver(n % len(self.journal))
        elif name == "next":
            for offset in range(self.cursor, min(len(self.journal), self.cursor + n)):
                await self.deliver(offset)
            self.cursor = min(len(self.journal), self.cursor + n)
        elif name == "batch":  # the next n messages, then as many again in reverse, in batches
            end = min(len(self.journal), self.cursor + n)
            offsets = [*range(self.cursor, end), *reversed(range(self.cursor, end))]
            self.cursor = end
            while offsets:
                batch = [(self.scope(self.journal[o][0]), o, self.journal[o][1]) for o in offsets]
                answers = await self.both("count_batch", batch)
                assert isinstance(answers, list) and 0 < len(answers) <= len(offsets)
                hypothesis.event(f"batch: {len(answers)} of {len(offsets)}")
                if answers[-1].kind in ("rebuild", "gap"):
                    await self.deliver(offsets[len(answers) - 1], answers[-1])
                offsets = offsets[len(answers) :]
        elif name == "summarize" and self.journal:
            agent = AGENTS[n]
            last = max(self.covered.get(agent, -1), x % len(self.journal))
            self.covered[agent] = last
            await self.both("reset_counters", self.scope(agent), last + 1)
            await self.both("release_guard", self.scope(agent), up_to=last)
        elif name == "release":
            await self.both("release_guard", self.scope(AGENTS[n]), up_to=None if x < 0 else x)
        elif name == "hold":
            await self.both("hold_guard", self.scope(AGENTS[n]), x)
        elif name == "sent":
            await self.both("mark_sent", self.scope(AGENTS[n]), x)
        elif name == "wipe":
            self.memory.wipe()
            await wipe(self.redis)
        for agent in AGENTS:
            await self.both("counters", self.scope(agent))


@pytest.fixture
async def redis_store(redis_url: str) -> AsyncIterator[RedisThresholdStore]:
    async with threshold_store(redis_url, token_limit=TOKEN_LIMIT, message_limit=MESSAGE_LIMIT) as store:
        yield store


@hypothesis.settings(
    max_examples=300,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture, hypothesis.HealthCheck.too_slow],
)
@hypothesis.given(ops=st.lists(OPS, min_size=10, max_size=60))
async def test_the_pure_rule_and_the_lua_script_answer_alike(
    redis_store: RedisThresholdStore, ops: list[Op]
) -> None:
    """Whatever the deliveries (in order, out of order, again), installs, summaries, guard steps
    and wipes: the in-memory store (the pure rule) and Redis (its Lua copy) answer every call the
    same and keep the same state."""
    memory = InMemoryThresholdStore(token_limit=TOKEN_LIMIT, message_limit=MESSAGE_LIMIT)
    world = Lockstep(memory, redis_store, f"th-{uuid.uuid4().hex[:10]}")
    for op in ops:
        hypothesis.event(op[0])
        await world.apply(op)
