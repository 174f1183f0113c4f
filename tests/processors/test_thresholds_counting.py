"""The thresholds' counting (`Thresholds.outcome`: the Redis script, the rebuild from the journal and
the summary reset) against the pure rule (`fold`, `crossing`), on the real Redis, a real SlateJournal
and real summary objects, under redelivery, replay, republish, lost records, Redis wipes and
summaries."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import hypothesis
import pytest
from hypothesis import strategies as st
from pydantic import SecretStr

from core.config import Settings
from core.journal.models import Message, NewMessage, ThreadRef
from core.stores.thresholds import Outcome, ThreadScope
from core.summaries.models import Summary
from processors.thresholds import Counters, Thresholds, crossing, fold
from sinks.objectstore.summaries import ObjectStoreSummaryWriter
from sinks.redis.thresholds import RedisThresholdStore
from sinks.slatedb.journal import SlateJournal
from tests.processors.threshold_support import threshold_store, wipe

REF = ThreadRef(environment="test", account_id="acme", thread_id="th-1")
SCOPE = ThreadScope("test", "acme", "bot", "th-1")


@dataclass
class Rig:
    journal: SlateJournal
    summaries: ObjectStoreSummaryWriter
    store: RedisThresholdStore
    processor: Thresholds

    async def append(self, n: int, *, ref: ThreadRef = REF, agent: str = "bot") -> list[Message]:
        return await self.journal.append(
            ref, agent, "u1", [NewMessage(role="user", content=f"hello {i}") for i in range(n)]
        )

    async def summarize(self, scope: ThreadScope, last: Message) -> None:
        """What the summarizer does once its summary covering up to `last` is durable: write it,
        reset the counters after it and release the guard."""
        current = await self.summaries.current(last.thread, scope.agent_id)
        version = 1 if current is None else current.version + 1
        summary = Summary(
            version=version,
            timestamp=datetime.now(UTC),
            last_message_offset=last.offset,
            last_message_id=last.message_id,
            content="earlier",
            token_count=1,
            message_count=last.offset + 1,
        )
        await self.summaries.write(
            last.thread,
            scope.agent_id,
            summary,
            expected_version=None if current is None else current.version,
        )
        await self.store.reset_counters(scope, last.offset + 1)
        await self.store.release_guard(scope, up_to=last.offset)


@asynccontextmanager
async def opened_rig(redis_url: str, journal: SlateJournal, data: Path, **limits: int) -> AsyncIterator[Rig]:
    """A rig on the session's Redis (a namespace of its own; `threshold_store` limits)."""
    settings = Settings(data_dir=data, environment="test", redis_url=SecretStr(redis_url))
    summaries = ObjectStoreSummaryWriter.from_settings(settings)
    async with threshold_store(redis_url, **limits) as store:
        processor = Thresholds(settings, store, journal, summaries, ledger=None, close_store=False)
        yield Rig(journal, summaries, store, processor)


@pytest.fixture
async def rig(redis_url: str, journal: SlateJournal, tmp_path: Path) -> AsyncIterator[Rig]:
    """The real limits: 2,000 tokens / 50 messages."""
    async with opened_rig(redis_url, journal, tmp_path / "data") as rig:
        yield rig


async def outcomes(rig: Rig, messages: Sequence[Message]) -> list[Outcome]:
    return [await rig.processor.outcome(m) for m in messages]


async def test_an_old_message_first_after_a_summary_does_not_hide_the_messages_counted_before(
    rig: Rig,
) -> None:
    """The fault suite's case: the journal is republished after a restart, so the first message
    the thresholds see after the summary's counter reset is an old one (offset 10). The message
    counted while the compaction was in flight (50) must still count: message 99 is the 50th
    since the summary and requests the next compaction (today: 49 counted, the request comes at
    offset 100 or never)."""
    messages = await rig.append(100)
    assert sum(m.token_count for m in messages[50:]) < 2_000  # the message limit is what crosses
    first = await outcomes(rig, messages[:50])
    assert [o.kind for o in first[-2:]] == ["counted", "request"]
    await rig.store.mark_sent(SCOPE, 49)
    assert (await rig.processor.outcome(messages[50])).kind == "guarded"  # compaction in flight
    await rig.summarize(SCOPE, messages[49])

    assert (await rig.processor.outcome(messages[10])).kind == "old"  # the republished journal
    again = await outcomes(rig, messages[50:])
    assert [o.kind for o in again[:-1]] == ["duplicate"] + ["counted"] * 48
    crossing = again[-1]
    assert (crossing.kind, crossing.base, crossing.messages, crossing.reason) == (
        "request",
        50,
        50,
        "messages",
    )
    assert crossing.tokens == sum(m.token_count for m in messages[50:])


# ---------------------------------------------------------------- random interleavings

TOKEN_LIMIT = 40
MESSAGE_LIMIT = 6
AGENTS = ("bot", "aide")  # the journal allows two agents in a thread (the API does not): gaps

Op = tuple[str, int, int]
APPEND = st.tuples(st.just("append"), st.integers(1, 8), st.integers(0, 1))  # n messages of an agent
DELIVER = st.tuples(st.just("deliver"), st.integers(1, 12), st.just(0))  # the consumer takes k records
SUMMARIZE = st.tuples(st.just("summarize"), st.integers(0, 1), st.just(0))  # a compaction in flight ends
OPS = st.one_of(
    APPEND,
    APPEND,
    DELIVER,
    DELIVER,
    DELIVER,
    SUMMARIZE,
    SUMMARIZE,
    st.tuples(st.just("rewind"), st.integers(1, 20), st.just(0)),  # redelivery from k records back
    st.tuples(st.just("republish"), st.integers(0, 100), st.just(0)),  # restart: the journal from x%
    st.tuples(st.just("lose"), st.integers(1, 5), st.just(0)),  # the broker lost the next k records
    st.tuples(st.just("any"), st.integers(0, 10_000), st.just(0)),  # one message out of order
    st.tuples(st.just("last"), st.integers(0, 1), st.just(0)),  # recovery re-evaluates an agent
    st.tuples(st.just("race"), st.integers(0, 10_000), st.integers(0, 1)),  # ...while a message arrives
    st.tuples(st.just("resummarize"), st.integers(0, 1), st.just(0)),  # a summarizer redelivery
    st.tuples(st.just("sent"), st.just(0), st.just(0)),  # the decided requests are confirmed
    st.tuples(st.just("wipe"), st.just(0), st.just(0)),  # Redis lost everything
)


@dataclass
class World:
    """One thread of the journal as the thresholds see it, and what the pure rule says of it."""

    rig: Rig
    ref: ThreadRef
    journal: list[Message] = field(default_factory=list)
    topic: list[int] = field(default_factory=list)  # offsets as published, in order
    cursor: int = 0
    summarized: dict[str, Message] = field(default_factory=dict)
    in_flight: dict[str, int] = field(default_factory=dict)  # agent -> request's to_offset
    decided: set[tuple[str, int]] = field(default_factory=set)
    unsent: set[tuple[str, int]] = field(default_factory=set)
    words: int = 0

    def scope(self, agent: str) -> ThreadScope:
        return ThreadScope(self.ref.environment, self.ref.account_id, agent, self.ref.thread_id)

    def covered(self, agent: str) -> int:
        summary = self.summarized.get(agent)
        return summary.offset if summary is not None else -1

    def expected(self, agent: str, up_to: int) -> Counters:
        """The pure rule: the agent's journal since its last summary, up to `up_to`."""
        return fold([m for m in self.journal if m.offset > self.covered(agent)], agent, up_to)

    async def append(self, n: int, agent: str) -> None:
        new = []
        for _ in range(n):
            self.words = self.words % 11 + 1  # 1..11 words: both limits get crossed
            new.append(NewMessage(role="user", content=" ".join(["word"] * self.words)))
        stored = await self.rig.journal.append(self.ref, agent, "u1", new)
        self.journal += stored
        self.topic += [m.offset for m in stored]

    async def process(self, message: Message) -> None:
        self.check(message, await self.rig.processor.outcome(message))

    async def process_batch(self, messages: Sequence[Message]) -> None:
        """A batch of the topic, counted as the processor's `process` does (`outcomes`)."""
        for message, outcome in zip(messages, await self.rig.processor.outcomes(messages), strict=True):
            self.check(message, outcome)

    def check(self, message: Message, outcome: Outcome) -> None:
        hypothesis.event(outcome.kind)
        agent, covered = message.agent_id, self.covered(message.agent_id)
        if outcome.kind == "old":
            assert message.offset <= covered, (message.offset, outcome)
            return
        assert outcome.base == covered + 1, (message.offset, outcome)
        assert outcome.offset is not None and outcome.offset >= message.offset, (message.offset, outcome)
        expected = self.expected(agent, outcome.offset)
        assert (outcome.tokens, outcome.messages) == (expected.tokens, expected.messages), (
            f"message {message.offset} of {agent}: {outcome} but the journal says {expected}"
        )
        reached = crossing(expected, token_limit=TOKEN_LIMIT, message_limit=MESSAGE_LIMIT)
        if outcome.kind in ("request", "resend", "guarded"):
            assert reached == outcome.reason, (message.offset, outcome)
        if outcome.kind == "request":
            self.decided.add((agent, outcome.offset))
            self.unsent.add((agent, outcome.offset))
            self.in_flight[agent] = max(self.in_flight.get(agent, -1), outcome.offset)
        elif outcome.kind == "resend":
            assert (agent, outcome.offset) in self.unsent and outcome.offset == message.offset

    async def summarize(self, agent: str) -> None:
        """The summarizer, for the agent's compaction in flight: summary, reset, guard released."""
        to_offset = self.in_flight.pop(agent, None)
        if to_offset is not None:
            (last,) = [m for m in self.journal if m.offset == to_offset]
            await self.rig.summarize(self.scope(agent), last)
            self.summarized[agent] = last

    async def resummarize(self, agent: str) -> None:
        """A redelivered request the current summary covers: reset and release again."""
        last = self.summarized.get(agent)
        if last is not None:
            await self.rig.store.reset_counters(self.scope(agent), last.offset + 1)
            await self.rig.store.release_guard(self.scope(agent), up_to=last.offset)

    async def apply(self, op: Op) -> None:
        name, n, choice = op
        if name == "append":
            await self.append(n, AGENTS[choice])
        elif name == "deliver":
            await self.process_batch([self.journal[o] for o in self.topic[self.cursor : self.cursor + n]])
            self.cursor = min(len(self.topic), self.cursor + n)
        elif name == "rewind":
            self.cursor = max(0, self.cursor - n)
        elif name == "republish":
            self.topic += [m.offset for m in self.journal[len(self.journal) * n // 100 :]]
        elif name == "lose":
            del self.topic[self.cursor : self.cursor + n]
        elif name == "any" and self.journal:
            await self.process(self.journal[n % len(self.journal)])
        elif name == "last":
            mine = [m for m in self.journal if m.agent_id == AGENTS[n]]
            if mine:
                await self.process(mine[-1])
        elif name == "race" and self.journal:  # two workers at once (the recovery and the consumer)
            mine = [m for m in self.journal if m.agent_id == AGENTS[choice]]
            await asyncio.gather(
                self.process(self.journal[n % len(self.journal)]),
                self.process(mine[-1]) if mine else asyncio.sleep(0),
            )
        elif name == "summarize":
            await self.summarize(AGENTS[n])
        elif name == "resummarize":
            await self.resummarize(AGENTS[n])
        elif name == "sent":
            for agent, offset in self.unsent:
                await self.rig.store.mark_sent(self.scope(agent), offset)
            self.unsent.clear()
        elif name == "wipe":
            await wipe(self.rig.store)

    async def check_state(self) -> None:
        """Whenever an agent's counters are valid they are the pure rule's, and a crossing among
        them is never left without its compaction (the guard held)."""
        for agent in AGENTS:
            scope = self.scope(agent)
            state = await self.rig.store.counters(scope)
            if state is None or "stale" in state or "upto" not in state:
                continue
            assert state["base"] == self.covered(agent) + 1, (agent, state)
            expected = self.expected(agent, state["upto"])
            assert (state["tokens"], state["messages"]) == (expected.tokens, expected.messages), (
                f"{agent}: {state} but the journal says {expected}"
            )
            if crossing(expected, token_limit=TOKEN_LIMIT, message_limit=MESSAGE_LIMIT) is not None:
                assert await self.rig.store.client.exists(self.rig.store.guard_key(scope)), (
                    f"{agent}: {state} crosses a threshold but no compaction is in flight"
                )

    async def settle(self) -> None:
        """Deliver everything, then compact until nothing is in flight: no crossing is left."""
        for _ in range(len(self.journal) + 2):
            await self.apply(("deliver", len(self.topic), 0))
            for agent in AGENTS:
                await self.apply(("last", AGENTS.index(agent), 0))
                await self.check_state()
                await self.summarize(agent)
            if not self.in_flight and all(
                crossing(
                    self.expected(a, len(self.journal)), token_limit=TOKEN_LIMIT, message_limit=MESSAGE_LIMIT
                )
                is None
                for a in AGENTS
            ):
                return
        raise AssertionError(f"compactions never settle: {self.in_flight}")


@pytest.fixture
async def small_rig(redis_url: str, journal: SlateJournal, tmp_path: Path) -> AsyncIterator[Rig]:
    """Thresholds of 40 tokens / 6 messages: crossings come every few messages."""
    async with opened_rig(
        redis_url, journal, tmp_path / "data", token_limit=TOKEN_LIMIT, message_limit=MESSAGE_LIMIT
    ) as rig:
        yield rig


@hypothesis.settings(
    max_examples=300,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture, hypothesis.HealthCheck.too_slow],
)
@hypothesis.given(ops=st.lists(OPS, min_size=10, max_size=60))
async def test_counts_are_the_journals_under_any_interleaving(small_rig: Rig, ops: list[Op]) -> None:
    """Whatever the order of deliveries, redeliveries, republishes, lost records, out-of-order
    messages, summaries, summarizer redeliveries and Redis wipes: every count is the pure rule's
    fold of the journal since the summary, every crossing gets its compaction, and once the thread
    settles none is left over a threshold."""
    world = World(
        small_rig, ThreadRef(environment="test", account_id="acme", thread_id=f"th-{uuid.uuid4().hex[:10]}")
    )
    for op in ops:
        await world.apply(op)
        await world.check_state()
    await world.settle()
