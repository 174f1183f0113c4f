"""The entries outbox relay against real Postgres and real brokers (Tansu; Apache Kafka with --kafka),
and its own logic on the in-memory outbox (`tests.fakes.outbox`)."""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncpg
import pytest
from confluent_kafka import Message as KafkaMessage

from core.config import Settings
from core.memory.models import EntryEvent, entry_key
from core.memory.service import MemoryService
from sinks.postgres.memory import PostgresMemoryStore
from sinks.postgres.migrations import migrate
from sinks.postgres.outbox import PostgresAppliedOutbox, PostgresEntriesOutbox
from sinks.postgres.pool import create_pool
from streams.admin import apply_topics
from streams.relays.memory_entries import EntriesOutboxRelay, outbox_seqs
from streams.topics import load_topics
from tests.core.memory.helpers import FakeClock, outbox, scope
from tests.fakes.outbox import InMemoryAppliedOutbox, InMemoryEntriesOutbox
from tests.memstream.own_broker import own_broker
from tests.private_postgres import private_postgres
from tests.streams.relays.support import consume_from_start, relay_settings_on

REGISTRY = load_topics()
SPEC = REGISTRY.get("memory.entries")


@pytest.fixture
def relay_settings(broker: str, topic_prefix: str, tmp_path: Path) -> Settings:
    return relay_settings_on(broker, topic_prefix, tmp_path)


def consume(
    settings: Settings, expected: int, *, quiet_s: float = 0.7, timeout_s: float = 20.0
) -> list[KafkaMessage]:
    """Every record of memory.entries from the beginning, until `expected` arrived and then nothing
    more for `quiet_s` (so unexpected extra records would be seen)."""
    return consume_from_start(settings, "memory.entries", expected, quiet_s=quiet_s, timeout_s=timeout_s)


def by_key(records: list[KafkaMessage]) -> dict[str, list[int | None]]:
    """key -> the versions of its records in topic order (None = tombstone); payloads are checked
    against the topics.yaml schema and the EntryEvent model."""
    out: dict[str, list[int | None]] = defaultdict(list)
    for record in records:
        key = record.key()
        assert key is not None
        value = record.value()
        if value is None:
            out[key.decode()].append(None)
            continue
        SPEC.validate(json.loads(value))
        event = EntryEvent.model_validate_json(value)
        assert (
            entry_key(event.entry.environment, event.entry.account_id, event.entry.entry_id) == key.decode()
        )
        out[key.decode()].append(event.version)
    return dict(out)


async def eventually(condition: Callable[[], Awaitable[bool]], timeout_s: float) -> bool:
    """True as soon as `condition()` is, False after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await condition():
            return True
        await asyncio.sleep(0.05)
    return await condition()


async def _empty(relay: EntriesOutboxRelay) -> bool:
    return await relay.pending() == 0


async def _failed(relay: EntriesOutboxRelay) -> bool:
    return relay.stats.failures > 0


async def _changes(service: MemoryService, clock: FakeClock) -> dict[str, list[int | None]]:
    """A mix of every kind of change; returns the expected versions per key, in order."""
    expected: dict[str, list[int | None]] = {}

    def key_of(entry_id: str, account: str = "acme") -> str:
        return entry_key("test", account, entry_id)

    a = (await service.store(scope(), "a", "v1", "project_fact", scope_visibility="shared")).entry
    b = (
        await service.store(scope("bob"), "b", "bob@example.com", "user_profile", scope_visibility="shared")
    ).entry
    o = (await service.store(scope(), "o", "seen", "observation", scope_visibility="shared")).entry
    g = (
        await service.store(scope(account="globex"), "a", "v1", "project_fact", scope_visibility="shared")
    ).entry
    await service.store(scope(), "a", "v1", "project_fact", scope_visibility="shared")  # no-op: no record
    await service.store(scope(), "a", "v2", "project_fact", scope_visibility="shared")  # replace
    await service.edit(scope(), a.entry_id, importance=0.9)
    await service.forget(scope("bob"), "b")
    await service.store(scope("bob"), "b", "bob@example.com", "user_profile", scope_visibility="private")
    clock.advance(days=30)
    assert await service.expire_due() == 1  # o
    clock.advance(days=61)
    assert await service.decay() == 2  # a, g
    b2 = (await service.list(scope("bob"), key_prefix="b")).entries[0]
    expected[key_of(a.entry_id)] = [1, 2, 3, 4]
    expected[key_of(b.entry_id)] = [1, None]
    expected[key_of(b2.entry_id)] = [1]
    expected[key_of(o.entry_id)] = [1, None]
    expected[key_of(g.entry_id, "globex")] = [1, 2]
    return expected


async def test_every_committed_change_reaches_the_topic_in_order(
    service: MemoryService, pool: asyncpg.Pool, clock: FakeClock, relay_settings: Settings
) -> None:
    expected = await _changes(service, clock)
    relay = EntriesOutboxRelay(PostgresEntriesOutbox(pool), relay_settings, batch_size=3)
    try:
        assert await relay.drain() == 11
    finally:
        await relay.close()
    assert await outbox(pool) == []
    records = consume(relay_settings, 11)
    assert by_key(records) == expected
    tombstones = [r for r in records if r.value() is None]
    assert len(tombstones) == 2


async def test_crash_before_delete_republishes(
    service: MemoryService, pool: asyncpg.Pool, relay_settings: Settings
) -> None:
    first = (await service.store(scope(), "a", "v1", "project_fact", scope_visibility="shared")).entry
    await service.store(scope(), "a", "v2", "project_fact", scope_visibility="shared")
    await service.forget(scope(), "a")
    # The broker confirms the batch, then the DELETE fails (as if the relay died before committing).
    await pool.execute(
        """CREATE FUNCTION no_delete() RETURNS trigger LANGUAGE plpgsql AS $$
           BEGIN RAISE EXCEPTION 'crash before delete'; END $$;
           CREATE TRIGGER no_delete BEFORE DELETE ON memory_outbox
               FOR EACH ROW EXECUTE FUNCTION no_delete();"""
    )
    relay = EntriesOutboxRelay(PostgresEntriesOutbox(pool), relay_settings)
    try:
        with pytest.raises(asyncpg.RaiseError):
            await relay.run_once()
        assert len(await outbox(pool)) == 3  # kept
        await pool.execute("DROP TRIGGER no_delete ON memory_outbox")
        assert await relay.drain() == 3
    finally:
        await relay.close()
    assert await outbox(pool) == []
    key = entry_key("test", "acme", first.entry_id)
    assert by_key(consume(relay_settings, 6)) == {key: [1, 2, None, 1, 2, None]}  # the last is the latest


async def test_a_round_does_nothing_while_another_relay_holds_the_claim(base_settings: Settings) -> None:
    """On the in-memory outbox (no broker is reached: nothing is produced); the claim across
    Postgres connections is `tests/sinks/postgres/test_outbox.py`."""
    outbox = InMemoryEntriesOutbox()
    await outbox.write([("k", {"v": 1})])
    relay = EntriesOutboxRelay(outbox, base_settings)
    try:
        async with outbox.claim(10) as other:
            assert other is not None
            assert await relay.run_once() == 0
            assert await relay.drain() == 0
        assert await relay.pending() == 1
    finally:
        await relay.close()


async def test_an_idle_round_forgets_the_applied_rows(base_settings: Settings) -> None:
    outbox = InMemoryEntriesOutbox()
    seqs = await outbox.write([("a", {"v": 1}), ("b", {"v": 1})])
    async with outbox.claim(10) as batch:  # as if a relay published them
        assert batch is not None
        await batch.published()
    await InMemoryAppliedOutbox(outbox).record(seqs[:1])
    relay = EntriesOutboxRelay(outbox, base_settings)
    try:
        assert await relay.run_once() == 0
        assert list(outbox.published) == seqs[1:] and outbox.applied == set()
        assert await relay.republish_unapplied() == 1
        assert await relay.pending() == 1
    finally:
        await relay.close()


async def test_run_listens_again_when_its_subscription_is_lost(base_settings: Settings) -> None:
    outbox = InMemoryEntriesOutbox()
    relay = EntriesOutboxRelay(outbox, base_settings, poll_interval=0.1)
    stop = asyncio.Event()
    task = asyncio.create_task(relay.run(stop))
    try:
        assert await eventually(lambda: _listening(outbox), 5)
        first = outbox.listeners[0]
        await first.close()  # as if its connection went away
        assert await eventually(lambda: _listening(outbox), 5)  # by the next poll
        assert outbox.listeners[-1] is not first
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
        await relay.close()
    assert not any(listener.usable() for listener in outbox.listeners)  # closed when it stops


async def _listening(outbox: InMemoryEntriesOutbox) -> bool:
    return any(listener.usable() for listener in outbox.listeners)


async def test_run_is_woken_by_notify(
    service: MemoryService, pool: asyncpg.Pool, relay_settings: Settings
) -> None:
    relay = EntriesOutboxRelay(PostgresEntriesOutbox(pool), relay_settings, poll_interval=30.0)
    stop = asyncio.Event()
    task = asyncio.create_task(relay.run(stop))
    try:
        await asyncio.sleep(0.3)  # the relay is idle, listening
        await service.store(scope(), "a", "v1", "project_fact", scope_visibility="shared")
        assert await eventually(lambda: _empty(relay), 10)  # well before the 30 s poll
        assert relay.stats.published == 1
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
    assert len(consume(relay_settings, 1)) == 1


async def test_run_retries_until_the_topic_exists(
    service: MemoryService, pool: asyncpg.Pool, broker: str, topic_prefix: str, tmp_path: Path
) -> None:
    settings = Settings(data_dir=tmp_path / "data", broker_url=f"kafka://{broker}", topic_prefix=topic_prefix)
    await service.store(scope(), "a", "v1", "project_fact", scope_visibility="shared")
    relay = EntriesOutboxRelay(
        PostgresEntriesOutbox(pool),
        settings,
        poll_interval=0.2,
        max_backoff=0.5,
        producer_overrides={"topic.metadata.propagation.max.ms": 1000},
    )
    stop = asyncio.Event()
    task = asyncio.create_task(relay.run(stop))
    try:
        assert await eventually(lambda: _failed(relay), 15)
        assert await relay.pending() == 1
        apply_topics(settings, REGISTRY)
        assert await eventually(lambda: _empty(relay), 20)
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
    assert len(consume(settings, 1)) == 1


async def test_run_rides_out_a_postgres_restart(relay_settings: Settings) -> None:
    """PostgreSQL killed -9 and started again under a running relay: it keeps running (its listening
    connection went back to the pool: asking it crashed the relay before) and publishes again."""
    with private_postgres() as postgres:
        pool = await create_pool(postgres.dsn, command_timeout=5)
        await migrate(pool)
        service = MemoryService(PostgresMemoryStore(pool), FakeClock())
        relay = EntriesOutboxRelay(
            PostgresEntriesOutbox(pool), relay_settings, poll_interval=0.2, max_backoff=0.5
        )
        stop = asyncio.Event()
        task = asyncio.create_task(relay.run(stop))
        try:
            await service.store(scope(), "a", "v1", "project_fact", scope_visibility="shared")
            assert await eventually(lambda: _empty(relay), 20)
            postgres.kill()
            await asyncio.sleep(1.5)  # rounds fail while the server is down
            assert not task.done(), f"the relay stopped: {task.exception()!r}"
            assert relay.stats.failures > 0
            await asyncio.to_thread(postgres.restart)
            for _ in range(50):  # the pool's first connections after the restart may still be dead ones
                try:
                    await service.store(scope(), "b", "v1", "project_fact", scope_visibility="shared")
                    break
                except (OSError, asyncpg.PostgresConnectionError, asyncpg.InterfaceError):
                    await asyncio.sleep(0.1)
            assert await eventually(lambda: _empty(relay), 20)
            assert not task.done(), task.exception()
        finally:
            stop.set()
            await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), 10)
            await relay.close()
            await pool.close()
    assert len(consume(relay_settings, 2)) == 2


def test_examples_and_schema() -> None:
    assert SPEC.config["cleanup.policy"] == "compact"
    assert SPEC.partitions == 6
    for example in SPEC.examples:
        EntryEvent.model_validate(example)


async def published(pool: asyncpg.Pool) -> list[int]:
    return [row["seq"] for row in await pool.fetch("SELECT seq FROM memory_outbox_published ORDER BY seq")]


async def test_confirmed_rows_wait_until_the_projection_applied_them(
    service: MemoryService, pool: asyncpg.Pool, relay_settings: Settings
) -> None:
    for key in ("a", "b", "c"):
        await service.store(scope(), key, f"{key} v1", "project_fact", scope_visibility="shared")
    relay = EntriesOutboxRelay(PostgresEntriesOutbox(pool), relay_settings)
    applied = PostgresAppliedOutbox(pool)
    await applied.start()
    try:
        assert await relay.drain() == 3
        assert await outbox(pool) == []
        seqs = await published(pool)
        assert len(seqs) == 3
        records = consume(relay_settings, 3)
        assert sorted(outbox_seqs([r.headers() or [] for r in records])) == seqs  # each record names its row
        await applied.record(seqs[:2])
        await applied.record([seqs[0], 999_999])  # a repeat, and a seq whose row is not moved yet
        assert await relay.run_once() == 0  # an idle round forgets what both sides hold
        assert await published(pool) == seqs[2:]
        left = [r["seq"] for r in await pool.fetch("SELECT seq FROM memory_outbox_applied")]
        assert left == [999_999]  # kept until its row arrives
    finally:
        await relay.close()


async def test_rows_not_applied_go_back_into_the_outbox_after_a_broker_loss(
    service: MemoryService, pool: asyncpg.Pool, relay_settings: Settings
) -> None:
    for key in ("a", "b", "c"):
        await service.store(scope(), key, f"{key} v1", "project_fact", scope_visibility="shared")
    relay = EntriesOutboxRelay(PostgresEntriesOutbox(pool), relay_settings)
    try:
        await relay.drain()
        seqs = await published(pool)
        await PostgresAppliedOutbox(pool).record(seqs[:1])
        await service.store(
            scope(), "d", "d v1", "project_fact", scope_visibility="shared"
        )  # not published yet
        assert await relay.republish_unapplied() == 2
        assert [row["seq"] for row in await outbox(pool)][:2] == seqs[1:]  # before the newer row
        assert await published(pool) == []
        assert await relay.drain() == 3
        assert await relay.republish_unapplied() == 3  # still not applied: they would go back again
    finally:
        await relay.close()


async def test_interrupt_frees_a_round_stuck_on_a_recreated_topic(
    service: MemoryService, pool: asyncpg.Pool, topic_prefix: str, tmp_path: Path
) -> None:
    """After the broker recreated memory.entries, the idempotent producer can wait forever for a
    partition it wrote to before (seen on Tansu), holding the relays' lock: `interrupt` aborts that
    round (its rows stay) and the next one publishes with a new producer."""
    with own_broker(tmp_path / "broker") as broker:
        settings = Settings(
            data_dir=tmp_path / "data", broker_url=f"kafka://{broker.bootstrap}", topic_prefix=topic_prefix
        )
        apply_topics(settings, REGISTRY)
        for i in range(12):
            await service.store(scope(), f"k.{i}", f"v {i}", "project_fact", scope_visibility="shared")
        relay = EntriesOutboxRelay(PostgresEntriesOutbox(pool), settings, poll_interval=0.1, max_backoff=0.2)
        try:
            await relay.drain()
            broker.restart()
            apply_topics(settings, REGISTRY)
            for i in range(12):
                await service.store(
                    scope(), f"k.{i}", f"v {i} again", "project_fact", scope_visibility="shared"
                )
            stop = asyncio.Event()
            task = asyncio.create_task(relay.run(stop))
            try:
                await asyncio.sleep(4)
                stuck = await relay.pending() > 0
                relay.interrupt()
                assert await eventually(lambda: _empty(relay), 20)
            finally:
                stop.set()
                await asyncio.wait_for(task, 10)
        finally:
            await relay.close()
        assert stuck  # without the interrupt, nothing moved
        assert len(consume(settings, 12)) == 12
