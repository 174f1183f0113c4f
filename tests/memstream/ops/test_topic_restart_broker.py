"""ConsumerRestart on a real Tansu of the test's own and real runtimes: after the broker lost a topic,
offsets committed on the old topic must not make a group skip the new topic's lower offsets.

The broker-kill fault (issue 9) left the ClickHouse projection short for good: after the broker
restarted, a consumer committed offsets acked on the lost topic onto the new broker's empty group,
and the group then started the refilled topic at those offsets. Here the stale commit is made by
hand (deterministic): the processor is paused, the broker restarts, and the group's old offsets are
committed on the new topic before anything is republished to it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient
from pydantic import SecretStr

from core.config import Settings
from memstream.ops.topic_restart import ConsumerRestart
from streams.admin import apply_topics
from streams.runtime.options import RuntimeOptions
from streams.runtime.processor import group_id
from streams.runtime.supervisor import ProcessorSupervisor
from streams.topic_guards import TopicGuard
from streams.topic_sync import TopicSync
from streams.topics import TopicRegistry, default_registry
from tests.memstream.own_broker import OwnBroker, own_broker
from tests.streams.runtime.support import (
    TOPIC,
    PgWriter,
    committed,
    create_effects_table,
    effect_ids,
    produce,
    wait_for_effects,
)

OPTIONS = RuntimeOptions(
    batch_size=50,
    batch_wait_s=0.05,
    session_timeout_s=2.0,
    heartbeat_interval_s=0.5,
    commit_interval_s=0.5,
    drain_timeout_s=2.0,
)
NAME = "alpha"


class RepublishingGuard(TopicGuard):
    """The topic's identity kept in memory; its refill produces `ids` again (as the journal's refill
    republishes what the consumers may lack)."""

    name = TOPIC

    def __init__(self, settings: Settings, ids: Sequence[int]) -> None:
        self.settings = settings
        self.ids = list(ids)
        self.fingerprint = 0
        self.refills = 0

    async def stored(self) -> int:
        return self.fingerprint

    async def store(self, fingerprint: int) -> None:
        self.fingerprint = fingerprint

    async def refill(self) -> str | None:
        self.refills += 1
        await asyncio.to_thread(produce, self.settings, [{"id": i} for i in self.ids])
        return f"{len(self.ids)} records produced again"


@pytest.fixture
def broker_of_test(tmp_path: Path) -> Iterator[OwnBroker]:
    with own_broker(tmp_path / "broker") as broker:
        yield broker


@pytest.fixture
async def settings(broker_of_test: OwnBroker, pg_dsn: str, topic_prefix: str, tmp_path: Path) -> Settings:
    await create_effects_table(pg_dsn)
    return Settings(
        data_dir=tmp_path / "data",
        environment="test",
        topic_prefix=topic_prefix,
        broker_url=f"kafka://{broker_of_test.bootstrap}",
        postgres_dsn=SecretStr(pg_dsn),
    )


def registry_on(settings: Settings) -> TopicRegistry:
    registry = default_registry().with_dead_letter(NAME)
    apply_topics(settings, registry, topics=[registry.get(TOPIC), registry.dlq_topic(NAME)])
    return registry


def commit(settings: Settings, offsets: dict[int, int]) -> None:
    """Commit `offsets` (partition -> offset) for the processor's group, as a consumer rejoining
    with offsets acked on the old topic does (the group has no member)."""
    admin = AdminClient({"bootstrap.servers": settings.broker_bootstrap})
    request = ConsumerGroupTopicPartitions(
        group_id(NAME, settings),
        [TopicPartition(settings.topic(TOPIC), p, offset) for p, offset in offsets.items()],
    )
    admin.alter_consumer_group_offsets([request])[request.group_id].result(timeout=30)


@contextlib.asynccontextmanager
async def running_alpha(
    settings: Settings, pg_dsn: str
) -> AsyncIterator[tuple[ProcessorSupervisor, list[PgWriter]]]:
    """A supervisor running processor `alpha` (a `PgWriter`); yields it and every `alpha` it built."""
    registry = registry_on(settings)
    processors: list[PgWriter] = []

    def alpha() -> PgWriter:
        processors.append(PgWriter(NAME, pg_dsn))
        return processors[-1]

    supervisor = ProcessorSupervisor({NAME: alpha}, settings, options=OPTIONS, registry=registry)
    stop, started = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(supervisor.run(stop, started=started))
    try:
        await asyncio.wait_for(started.wait(), 30)
        yield supervisor, processors
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


@pytest.mark.parametrize("restart", [True, False], ids=["restarted", "not-restarted"])
async def test_offsets_committed_on_the_lost_topic_do_not_skip_the_refilled_one(
    settings: Settings, broker_of_test: OwnBroker, pg_dsn: str, restart: bool
) -> None:
    """`not-restarted` shows the failure the restart prevents (the group skips records for good)."""
    async with running_alpha(settings, pg_dsn) as (supervisor, _):
        produce(settings, [{"id": i} for i in range(60)])
        assert len(await wait_for_effects(pg_dsn, NAME, 60, within_s=60)) == 60
        old = committed(settings, NAME)
        assert sum(old.values()) == 60
        await supervisor.pause(NAME)

        broker_of_test.restart()  # the memory-only broker forgets the topic and the group
        registry_on(settings)  # the topic is back, empty, with offsets from 0
        await asyncio.to_thread(commit, settings, old)  # the stale commit
        guard = RepublishingGuard(settings, range(100, 160))
        sync = TopicSync(settings, [guard], registry=registry_on(settings))
        if restart:
            sync.restart_consumers = ConsumerRestart(settings, supervisor, lambda topic: [NAME])
        assert await sync.check(created=[TOPIC]) == [TOPIC]
        assert guard.refills == 1
        assert supervisor.status(NAME).state == "paused"  # paused by the operator: it stays paused
        await supervisor.resume(NAME)

        ids = await wait_for_effects(pg_dsn, NAME, 120, within_s=20)
        if restart:
            assert ids == [*range(60), *range(100, 160)]
        else:
            assert len(ids) < 120  # records below the stale offsets were never read


async def test_a_running_consumer_is_paused_reset_to_the_start_and_resumed(
    settings: Settings, pg_dsn: str
) -> None:
    async with running_alpha(settings, pg_dsn) as (supervisor, processors):
        positions = produce(settings, [{"id": i} for i in range(40)])
        assert len(await wait_for_effects(pg_dsn, NAME, 40, within_s=60)) == 40
        restart = ConsumerRestart(settings, supervisor, lambda topic: [NAME] if topic == TOPIC else [])
        await restart("memory.entries")  # not a topic it reads: nothing happens
        assert len(processors) == 1
        await restart(TOPIC)
        assert restart.restarts == 1
        assert len(processors) == 2 and supervisor.status(NAME).state == "running"
        first = {(partition, 0) for partition, offset in positions.values() if offset == 0}
        deadline = asyncio.get_running_loop().time() + 30
        while not first <= set(processors[1].seen):  # the fresh runtime reads from offset 0 again
            assert asyncio.get_running_loop().time() < deadline, processors[1].seen
            await asyncio.sleep(0.1)
        assert await effect_ids(pg_dsn, NAME) == list(range(40))  # idempotent effects


async def test_the_restart_comes_before_the_refill_and_a_failed_one_fails_the_check(
    settings: Settings, broker_of_test: OwnBroker
) -> None:
    registry = registry_on(settings)
    guard = RepublishingGuard(settings, [])
    sync = TopicSync(settings, [guard], registry=registry)
    calls: list[str] = []
    failing = True

    async def restart(topic: str) -> None:
        calls.append(f"restart {topic} after {guard.refills} refill(s)")
        if failing:
            raise RuntimeError("the broker refused the reset")

    sync.restart_consumers = restart
    assert await sync.check() == []  # the first identity is recorded: nothing was replaced
    assert calls == []
    broker_of_test.restart()
    registry_on(settings)
    with pytest.raises(RuntimeError, match="refused the reset"):
        await sync.check()
    assert guard.refills == 0  # nothing republished, and the identity is not stored:
    failing = False
    assert await sync.check() == [TOPIC]  # the next check restarts and refills again
    assert calls == [f"restart {TOPIC} after 0 refill(s)"] * 2
    assert guard.refills == 1
    assert await sync.check() == []
