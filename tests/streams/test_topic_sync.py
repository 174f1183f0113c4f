"""A broker topic that lost what was published to it is refilled from the consumer groups' lowest
checkpoint: a broker restart (memory-only Tansu), and a cursor moved by another node's relay; and
memory.entries records the projection had not applied when the broker lost them are published again.

Real Tansu (a broker of the test's own, to restart it), a real SlateDB journal, real Postgres and two
real clickhouse-projection groups (chdb): one ahead, one behind. After each scenario every
appended message is in both ClickHouse tables exactly once (dedup), the republish started at the
lowest checkpoint (not at seq 1), and the group that was ahead skipped what it had done.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import pytest

from core.config import Settings
from core.journal.models import NewMessage, ThreadRef
from core.memory.service import MemoryService
from core.stores.vectors import CollectionRef
from processors.clickhouse_projection import ClickHouseProjection
from processors.qdrant_projection import QdrantProjection
from sinks.clickhouse.store import ClickHouseTranscriptStore
from sinks.embeddings.bm25 import Bm25Sparse
from sinks.embeddings.minilm import OfflineMiniLM
from sinks.postgres.memory import PostgresMemoryStore
from sinks.postgres.outbox import PostgresAppliedOutbox, PostgresEntriesOutbox
from sinks.postgres.progress import PostgresProgress
from sinks.qdrant.edge import QdrantEdgeIndex
from sinks.slatedb.journal import SlateJournal
from streams.admin import apply_topics
from streams.identity import fingerprint
from streams.relays.journal import Relay
from streams.relays.memory_entries import EntriesOutboxRelay
from streams.runtime import RuntimeOptions
from streams.runtime.app import ProcessorRuntime
from streams.runtime.processor import group_id
from streams.sequencing import stamp_of
from streams.topic_guards import EntriesTopicGuard, JournalTopicGuard, compaction_guards
from streams.topic_sync import TopicSync
from streams.topics import load_topics
from tests.core.memory.helpers import FakeClock, scope
from tests.memstream.own_broker import OwnBroker, own_broker
from tests.streams.relays.support import consume_from_start

OPTIONS = RuntimeOptions(
    session_timeout_s=2.0,
    heartbeat_interval_s=0.5,
    commit_interval_s=0.5,
    drain_timeout_s=2.0,
    batch_wait_s=0.05,
)
AHEAD, BEHIND = "clickhouse-projection", "clickhouse-behind"
REGISTRY = load_topics().with_dead_letter(BEHIND)


@pytest.fixture
def broker_of_test(tmp_path: Path) -> Iterator[OwnBroker]:
    with own_broker(tmp_path / "broker") as broker:
        yield broker


@pytest.fixture
async def behind_store(
    clickhouse_dsn: str, clickhouse_database: str
) -> AsyncIterator[ClickHouseTranscriptStore]:
    store = ClickHouseTranscriptStore(clickhouse_dsn, database=f"{clickhouse_database}_behind")
    await store.ensure_schema()
    try:
        yield store
    finally:
        await store.close()


async def append(journal: SlateJournal, count: int, *, start: int = 0) -> None:
    for i in range(start, start + count):
        ref = ThreadRef(environment="test", account_id="acme", thread_id=f"th-{i % 23}")
        await journal.append(
            ref, "bot", None, [NewMessage(message_id=f"m-{i}", role="user", content=f"m {i}")]
        )


async def drain(relay: Relay) -> None:
    while await relay.run_once():
        pass


async def project_until(
    settings: Settings,
    progress: PostgresProgress,
    stores: dict[str, ClickHouseTranscriptStore],
    seq: int,
    timeout_s: float = 90,
) -> dict[str, ProcessorRuntime]:
    """Run a clickhouse-projection per store (named as the key) until every group's stored
    watermark reached `seq`; returns the (stopped) runtimes."""
    runtimes = {
        name: ProcessorRuntime(
            ClickHouseProjection(store, name=name, close_store=False, batch_wait_s=0.05),
            settings,
            OPTIONS,
            registry=REGISTRY,
            progress=progress,
        )
        for name, store in stores.items()
    }
    topic = settings.topic("journal.messages")
    try:
        for runtime in runtimes.values():
            await runtime.start()
        deadline = time.monotonic() + timeout_s
        while True:
            marks = [await progress.watermark(group_id(name, settings), topic) for name in runtimes]
            if min(marks) >= seq:
                break
            for name, runtime in runtimes.items():
                assert not runtime.crashed.is_set(), f"{name} crashed: {runtime.error}"
            assert time.monotonic() < deadline, f"watermarks {marks}, wanted {seq}"
            await asyncio.sleep(0.2)
    finally:
        for runtime in runtimes.values():
            await runtime.stop()
    return runtimes


def settings_of(broker: OwnBroker, tmp_path: Path, topic_prefix: str) -> Settings:
    """Settings on the test's own broker, where every topic of `REGISTRY` is created."""
    settings = Settings(
        data_dir=tmp_path / "data",
        environment="test",
        topic_prefix=topic_prefix,
        broker_url=f"kafka://{broker.bootstrap}",
    )
    apply_topics(settings, REGISTRY)
    return settings


@dataclass
class JournalSide:
    """What a node runs for journal.messages: its relay, the topic's guard, and the check."""

    relay: Relay
    guard: JournalTopicGuard
    sync: TopicSync


def journal_side(
    settings: Settings,
    journal: SlateJournal,
    progress: PostgresProgress,
    groups: Sequence[str] = (AHEAD, BEHIND),
    *,
    interval_s: float = 10.0,
) -> JournalSide:
    """A node's relay on `journal`, the guard of its topic for the consumer groups of `groups`
    (processor names), and a `TopicSync` checking it (as the node builds them)."""
    relay = Relay(journal, settings, bounds_store=progress)
    guard = JournalTopicGuard(journal, relay, progress, [group_id(name, settings) for name in groups])
    return JournalSide(relay, guard, TopicSync(settings, [guard], registry=REGISTRY, interval_s=interval_s))


def seqs_on_topic(settings: Settings, expected: int) -> list[int]:
    records = consume_from_start(settings, "journal.messages", expected, quiet_s=1.0)
    out = []
    for record in records:
        stamp = stamp_of(record.headers())
        assert stamp is not None
        out.append(stamp.seq)
    return sorted(out)


async def assert_exactly_once(stores: Sequence[ClickHouseTranscriptStore], total: int) -> None:
    for store in stores:
        counts = {c.thread_id: c.messages for c in await store.thread_counts("test")}
        assert sum(counts.values()) == total
        assert await store.row_count() == total


@dataclass
class Rig:
    """A node's journal side on the test's own broker, with both projection groups' stores."""

    settings: Settings
    journal: SlateJournal
    progress: PostgresProgress
    stores: dict[str, ClickHouseTranscriptStore]

    async def first_pass(self, count: int) -> tuple[JournalSide, list[str]]:
        """Append `count` messages, check the topic (just created), publish them and project them
        into both stores; returns the node's journal side (its relay left open) and what that
        first check refilled."""
        await append(self.journal, count)
        node = journal_side(self.settings, self.journal, self.progress)
        refilled = await node.sync.check(created=["journal.messages"])
        await drain(node.relay)
        await project_until(self.settings, self.progress, self.stores, count)
        return node, refilled


@pytest.fixture
def rig(
    broker_of_test: OwnBroker,
    tmp_path: Path,
    topic_prefix: str,
    journal: SlateJournal,
    pool: asyncpg.Pool,
    transcript_store: ClickHouseTranscriptStore,
    behind_store: ClickHouseTranscriptStore,
) -> Rig:
    return Rig(
        settings_of(broker_of_test, tmp_path, topic_prefix),
        journal,
        PostgresProgress(pool),
        {AHEAD: transcript_store, BEHIND: behind_store},
    )


async def test_a_broker_that_lost_the_topic_is_refilled_from_the_lowest_checkpoint(
    broker_of_test: OwnBroker, rig: Rig
) -> None:
    settings, journal, progress, stores = rig.settings, rig.journal, rig.progress, rig.stores
    transcript_store, behind_store = stores[AHEAD], stores[BEHIND]
    node, refilled = await rig.first_pass(300)
    assert refilled == []  # nothing published yet: nothing lost
    await append(journal, 200, start=300)
    await drain(node.relay)
    await project_until(settings, progress, {AHEAD: transcript_store}, 500)  # BEHIND stays at 300
    await node.relay.close()

    broker_of_test.restart()  # the memory-only broker forgets journal.messages and every group
    node = journal_side(settings, journal, progress)  # the node starts again
    relay, guard, sync = node.relay, node.guard, node.sync
    assert await sync.check() == ["journal.messages"]
    assert guard.last_refill_from == 301  # BEHIND's checkpoint, not seq 1
    assert await sync.check() == []  # the topic is the one the progress belongs to now
    await drain(relay)
    assert seqs_on_topic(settings, 200) == list(range(301, 501))

    runtimes = await project_until(settings, progress, stores, 500)
    ahead = runtimes[AHEAD].progress
    behind = runtimes[BEHIND].progress
    assert ahead is not None and behind is not None
    assert ahead.skipped == 200  # everything republished was done already: not inserted again
    assert behind.skipped == 0
    await assert_exactly_once([transcript_store, behind_store], 500)
    # `rebuild clickhouse` reads every seq from the topic: it first has the rest published again
    assert await guard.ensure_full_history()
    assert await relay.cursor() == 0
    assert not await guard.ensure_full_history()  # the topic gets everything now


async def test_a_cursor_moved_by_another_nodes_relay_is_detected_and_the_gap_republished(
    rig: Rig,
) -> None:
    settings, journal, progress, stores = rig.settings, rig.journal, rig.progress, rig.stores
    transcript_store, behind_store = stores[AHEAD], stores[BEHIND]
    node, _ = await rig.first_pass(120)

    # another node opened the journal, appended and published 121..180 to ITS broker: the shared
    # cursor moved past messages this broker never got, and carries that broker's topic identity
    await append(journal, 60, start=120)
    await journal.set_cursor(node.relay.cursor_name, 180)
    await journal.set_cursor(node.guard.identity_cursor, fingerprint("AAAAAAAAAAAAAAAAAAAAAA-other-broker"))

    node = journal_side(settings, journal, progress)  # this node takes the journal back
    relay, guard, sync = node.relay, node.guard, node.sync
    assert await sync.check() == ["journal.messages"]
    assert guard.last_refill_from == 121
    await drain(relay)
    await project_until(settings, progress, stores, 180)
    await assert_exactly_once([transcript_store, behind_store], 180)
    assert seqs_on_topic(settings, 180) == list(range(1, 181))  # 121..180 exactly once here too


async def test_agent_memory_not_yet_projected_when_the_broker_lost_it_reaches_the_index(
    broker_of_test: OwnBroker,
    tmp_path: Path,
    topic_prefix: str,
    pool: asyncpg.Pool,
    embedder: OfflineMiniLM,
    sparse: Bm25Sparse,
) -> None:
    """memory.entries: the outbox relay published the changes (their outbox rows are gone) and the
    broker died before the projection consumed them. After the restart the node finds the new topic
    and publishes what the projection had not applied; the index catches up by itself."""
    settings = settings_of(broker_of_test, tmp_path, topic_prefix)
    service = MemoryService(PostgresMemoryStore(pool), FakeClock())
    relay = EntriesOutboxRelay(PostgresEntriesOutbox(pool), settings)
    sync = TopicSync(settings, [EntriesTopicGuard(pool, relay)], registry=REGISTRY)
    assert await sync.check(created=["memory.entries"]) == []
    for i in range(5):
        await service.store(
            scope(), f"fact.{i}", f"fact number {i}", "project_fact", scope_visibility="shared"
        )
    await relay.drain()
    index = QdrantEdgeIndex(tmp_path / "qdrant")
    ref = CollectionRef(environment="test", account_id="acme", model_id=embedder.model_id)
    projection = QdrantProjection(
        index, embedder, sparse, close_index=False, applied=PostgresAppliedOutbox(pool)
    )

    async def project_until(count: int) -> None:
        runtime = ProcessorRuntime(projection, settings, OPTIONS, registry=REGISTRY)
        await runtime.start()
        try:
            deadline = time.monotonic() + 60
            while await index.count(ref) < count:
                assert not runtime.crashed.is_set(), runtime.error
                assert time.monotonic() < deadline, f"{await index.count(ref)} points, wanted {count}"
                await asyncio.sleep(0.2)
        finally:
            await runtime.stop()

    try:
        broker_of_test.restart()  # before the projection ran: the 5 records are gone with the topic
        await relay.close()
        assert await sync.check() == ["memory.entries"]
        assert await relay.drain() == 5
        await project_until(5)
        await service.store(scope(), "fact.5", "fact number 5", "project_fact", scope_visibility="shared")
        await relay.drain()
        await project_until(6)
        await relay.run_once()  # forgets what the projection applied
        assert await pool.fetchval("SELECT count(*) FROM memory_outbox_published") == 0
        assert await sync.check() == []
    finally:
        await relay.close()
        await index.close()


async def test_the_periodic_check_refills_by_itself_and_a_stop_never_waits_for_the_broker(
    broker_of_test: OwnBroker, tmp_path: Path, topic_prefix: str, journal: SlateJournal, pool: asyncpg.Pool
) -> None:
    settings = settings_of(broker_of_test, tmp_path, topic_prefix)
    progress = PostgresProgress(pool)
    await append(journal, 30)
    node = journal_side(settings, journal, progress, interval_s=0.2)
    relay, guard, sync = node.relay, node.guard, node.sync
    await sync.check(created=["journal.messages"])
    await drain(relay)
    stop = asyncio.Event()
    task = asyncio.create_task(sync.run(stop))
    try:
        broker_of_test.restart()  # nobody produces: only the periodic check can notice
        deadline = time.monotonic() + 20
        while sync.refills == 0:
            assert time.monotonic() < deadline and not task.done()
            await asyncio.sleep(0.1)
        assert guard.last_refill_from == 1  # no consumer group ever checkpointed here
        broker_of_test.stop()  # now every check waits for an unreachable broker
        await asyncio.sleep(1.0)
        stopped_at = time.monotonic()
        stop.set()
        await asyncio.wait_for(task, 5)
        assert time.monotonic() - stopped_at < 1.0
    finally:
        stop.set()
        await relay.close()


async def test_compaction_topics_brought_back_by_someone_else_are_found_new(
    broker_of_test: OwnBroker, tmp_path: Path, topic_prefix: str, pool: asyncpg.Pool
) -> None:
    """The broker lost every topic and something other than the node's own `apply_topics` declared
    them again (e.g. an older node, an operator's `memstream topics apply`, or a client that lets the
    broker create topics): the node never saw them `created`, yet its topic check finds the
    compaction topics new and tells the compaction recovery - once."""
    settings = settings_of(broker_of_test, tmp_path, topic_prefix)
    lost: list[str] = []
    sync = TopicSync(
        settings, compaction_guards(settings, pool, lambda: lost.append("lost")), registry=REGISTRY
    )
    assert await sync.check() == []  # nothing stored yet: the topics as they are are recorded
    assert lost == []

    broker_of_test.restart()
    apply_topics(settings, REGISTRY)  # not the node: it learns of no `created` topic
    assert await sync.check() == ["compaction.requested", "compaction.flushed"]
    assert lost == ["lost", "lost"]  # the recovery's flag is set (twice: harmless)
    assert await sync.check() == []  # the identities are recorded: nothing more to tell
    assert lost == ["lost", "lost"]


async def test_a_check_is_not_queued_behind_threads_waiting_for_the_broker(
    broker_of_test: OwnBroker, tmp_path: Path, topic_prefix: str, pool: asyncpg.Pool
) -> None:
    """While the broker lacks its topics, producers waiting for them hold threads of asyncio's
    default executor (a handful fill it on a 2-core machine: 6 threads). The check that brings the
    topics back must not wait for one of those threads: it would wait forever."""
    settings = settings_of(broker_of_test, tmp_path, topic_prefix)
    lost: list[str] = []
    sync = TopicSync(
        settings, compaction_guards(settings, pool, lambda: lost.append("lost")), registry=REGISTRY
    )
    await sync.check()
    broker_of_test.restart()  # every topic gone: the producers below wait for them

    default_threads = ThreadPoolExecutor(max_workers=2)
    asyncio.get_running_loop().set_default_executor(default_threads)
    release = threading.Event()
    waiting = [asyncio.ensure_future(asyncio.to_thread(release.wait, 60)) for _ in range(2)]
    try:
        refilled = await asyncio.wait_for(sync.check(), 20)
    finally:
        release.set()
        await asyncio.gather(*waiting)
        default_threads.shutdown()
    assert refilled == ["compaction.requested", "compaction.flushed"]
    assert lost == ["lost", "lost"]


async def test_a_projection_into_a_store_created_anew_gets_the_whole_journal_again(
    broker_of_test: OwnBroker,
    tmp_path: Path,
    topic_prefix: str,
    journal: SlateJournal,
    pool: asyncpg.Pool,
    transcript_store: ClickHouseTranscriptStore,
    behind_store: ClickHouseTranscriptStore,
) -> None:
    """Regression (issue 9, second writer): a node with its own new ClickHouse took over a journal
    whose group progress (in the shared Postgres) was made on the other node's ClickHouse; the
    projection skipped what it never had and the refill started above it: 12 threads short."""
    settings = settings_of(broker_of_test, tmp_path, topic_prefix)
    progress = PostgresProgress(pool)

    await append(journal, 300)
    node = journal_side(settings, journal, progress, [AHEAD])
    await node.sync.check(created=["journal.messages"])
    await drain(node.relay)
    await project_until(settings, progress, {AHEAD: transcript_store}, 300)
    await node.relay.close()

    broker_of_test.restart()  # the topic now holds only what is published from here on
    node = journal_side(settings, journal, progress, [AHEAD])
    relay, guard, sync = node.relay, node.guard, node.sync
    assert await sync.check() == ["journal.messages"]
    assert guard.last_refill_from == 301  # the group had everything up to 300
    await append(journal, 100, start=300)
    await drain(relay)

    # the group now projects into another store: its progress on the old one is no longer true
    runtimes = await project_until(settings, progress, {AHEAD: behind_store}, 0)
    tracker = runtimes[AHEAD].progress
    assert tracker is not None and tracker.skipped == 0
    assert await progress.watermark(group_id(AHEAD, settings), settings.topic("journal.messages")) < 300
    assert await sync.check() == ["journal.messages"]  # the watermark fell below the topic's floor
    assert guard.last_refill_from == 1
    assert await sync.check() == []
    await drain(relay)
    await project_until(settings, progress, {AHEAD: behind_store}, 400)
    await assert_exactly_once([behind_store], 400)
    await assert_exactly_once([transcript_store], 300)
