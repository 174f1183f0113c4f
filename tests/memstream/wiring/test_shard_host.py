"""`ShardHost` on real engines (SlateDB journals in the test's directory, the test broker, Postgres
progress): opening a shard makes it local and publishes its appends; closing it stops routing to
it and closes its writer; a second host opening the same shard fences the first, which closes it
by itself; a shard that cannot be opened leaves nothing behind."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import asyncpg
import pytest

from core.config import Settings
from core.errors import JournalFenced, JournalUnavailable, ShardNotLocal
from core.journal.models import NewMessage, ThreadRef
from core.sharding.journal import ShardedJournal
from core.sharding.shards import shard_of
from memstream.wiring.shard_host import ShardHost
from sinks.postgres.progress import PostgresProgress
from sinks.slatedb.journal import SlateJournal
from streams.admin import apply_topics
from streams.journal_shards import LocalShard
from streams.relays.journal import Relay
from streams.topic_guards import JournalTopicGuard
from streams.topic_sync import TopicSync
from streams.topics import load_topics
from tests.streams.relays.support import journal_shard_seqs

SHARDS = 2


@dataclass
class Host:
    host: ShardHost
    journals: ShardedJournal[SlateJournal]
    shards: list[LocalShard]


@pytest.fixture
def member(settings: Settings) -> Settings:
    member = settings.model_copy(update={"journal_shards": SHARDS})
    apply_topics(member, load_topics())
    return member


@pytest.fixture
async def hosts(member: Settings, pool: asyncpg.Pool) -> AsyncIterator[Callable[[], Host]]:
    made: list[Host] = []

    def make() -> Host:
        journals = ShardedJournal[SlateJournal](SHARDS)
        shards: list[LocalShard] = []
        progress = PostgresProgress(pool)
        sync = TopicSync(member, [])

        def local_shard(shard: int, journal: SlateJournal) -> LocalShard:
            relay = Relay(journal, member, bounds_store=progress, shard=shard)
            journal.add_append_listener(relay.notify)
            return LocalShard(shard, journal, relay, JournalTopicGuard(journal, relay, progress, []))

        host = Host(ShardHost(member, journals, shards, sync, local_shard), journals, shards)
        made.append(host)
        return host

    try:
        yield make
    finally:
        for host in made:
            await host.host.close_all()


def thread_in(settings: Settings, shard: int) -> ThreadRef:
    i = 0
    while shard_of(settings.environment, "acme", f"t-{i}", SHARDS) != shard:
        i += 1
    return ThreadRef(environment=settings.environment, account_id="acme", thread_id=f"t-{i}")


async def eventually(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.1)


async def test_an_open_shard_serves_and_publishes_and_a_closed_one_is_gone(
    member: Settings, hosts: Callable[[], Host]
) -> None:
    a = hosts()
    thread = thread_in(member, 1)
    with pytest.raises(ShardNotLocal):
        await a.journals.append(thread, "bot", None, [NewMessage(role="user", content="before")])
    await a.host.open_shard(1, epoch=1)
    await a.host.open_shard(1, epoch=1)  # again: nothing more
    assert a.host.open_shards == {1} and [s.shard for s in a.shards] == [1]
    stored = await a.journals.append(thread, "bot", None, [NewMessage(role="user", content="hello")])
    assert (stored[0].shard, stored[0].seq) == (1, 1)
    await eventually(
        lambda: set(journal_shard_seqs(member)) == {(1, 1)}, 20, "the shard's relay published the append"
    )
    journal = a.shards[0].journal
    await a.host.close_shard(1)
    assert a.host.open_shards == frozenset() and a.shards == []
    with pytest.raises(ShardNotLocal):
        await a.journals.last(thread, 5)
    with pytest.raises(JournalUnavailable):
        await journal.last(thread, 5)  # its writer is closed
    await a.host.close_shard(1)  # again: nothing to do

    b = hosts()  # another node takes it: the append is there, the seqs go on
    await b.host.open_shard(1, epoch=2)
    assert [m.content for m in await b.journals.last(thread, 5)] == ["hello"]
    more = await b.journals.append(thread, "bot", None, [NewMessage(role="user", content="again")])
    assert (more[0].offset, more[0].seq) == (1, 2)


async def test_a_host_whose_shard_another_opened_closes_it_itself(
    member: Settings, hosts: Callable[[], Host]
) -> None:
    a, b = hosts(), hosts()
    thread = thread_in(member, 0)
    await a.host.open_shard(0, epoch=1)
    await a.journals.append(thread, "bot", None, [NewMessage(role="user", content="from a")])
    await b.host.open_shard(0, epoch=2)  # fences a's writer (a's lease ran out, say)
    with pytest.raises(JournalFenced):
        await a.journals.append(thread, "bot", None, [NewMessage(role="user", content="fails on a")])
    await eventually(lambda: a.host.open_shards == frozenset(), 10, "a closed the fenced shard")
    with pytest.raises(ShardNotLocal):
        await a.journals.append(thread, "bot", None, [NewMessage(role="user", content="refused")])
    assert [m.content for m in await b.journals.last(thread, 5)] == ["from a"]


async def test_a_shard_of_another_count_is_not_opened(member: Settings, hosts: Callable[[], Host]) -> None:
    other = member.model_copy(update={"journal_shards": 3})
    journal = await SlateJournal.open(other.shard_journal(1), shard=1, shards=3)
    await journal.close()
    a = hosts()
    with pytest.raises(Exception, match="shard"):
        await a.host.open_shard(1, epoch=1)
    assert a.host.open_shards == frozenset() and a.shards == [] and a.journals.local() == {}
