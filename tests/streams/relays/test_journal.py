"""The relay against a real SlateDB journal and real brokers (Tansu always, Apache Kafka with --kafka)."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import time
import uuid
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import pytest
from confluent_kafka import Message as KafkaMessage

from core.config import Settings
from core.journal.models import Message, NewMessage, ThreadRef
from memstream.embedded import services
from memstream.embedded.process import free_port
from sinks.slatedb.journal import SlateJournal
from streams.admin import apply_topics
from streams.codecs import journal_messages
from streams.codecs.records import header
from streams.relays.journal import Relay, RelayDeliveryError, RelayLag
from streams.topics import load_topics
from tests.fakes.outage import Outage
from tests.streams.relays.support import consume_from_start, relay_settings_on

REGISTRY = load_topics()


@pytest.fixture
def relay_settings(broker: str, topic_prefix: str, tmp_path: Path) -> Settings:
    return relay_settings_on(broker, topic_prefix, tmp_path)


async def append(journal: SlateJournal, threads: int, per_thread: int, *, tag: str = "") -> list[Message]:
    """Interleaved appends: one message per thread per round, so threads mix in seq order."""
    out: list[Message] = []
    for i in range(per_thread):
        for t in range(threads):
            ref = ThreadRef(environment="test", account_id="acme", thread_id=f"th-{t}")
            out += await journal.append(ref, "bot", "u1", [NewMessage(role="user", content=f"{tag}{t}:{i}")])
    return out


def consume(
    settings: Settings, expected: int, *, quiet_s: float = 1.0, timeout_s: float = 20.0
) -> list[KafkaMessage]:
    """Every record of journal.messages from the beginning: until `expected` arrived and then
    nothing more for `quiet_s` (so extra duplicates would be seen)."""
    return consume_from_start(settings, "journal.messages", expected, quiet_s=quiet_s, timeout_s=timeout_s)


def by_thread(records: Sequence[KafkaMessage]) -> dict[str, list[Message]]:
    threads: dict[str, list[Message]] = defaultdict(list)
    for record in records:
        message = journal_messages.decode(record.value())
        threads[message.thread_id].append(message)
    return threads


async def drain(relay: Relay) -> int:
    total = 0
    while count := await relay.run_once():
        total += count
    return total


async def wait_for(predicate_lag: Relay, *, lag: int, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while (await predicate_lag.lag()).lag != lag:
        assert time.monotonic() < deadline, f"relay lag is {(await predicate_lag.lag())}, wanted {lag}"
        await asyncio.sleep(0.05)


# ---------------------------------------------------------------- publishing


async def test_publishes_every_message_once_in_thread_order(
    relay_settings: Settings, journal: SlateJournal
) -> None:
    appended = await append(journal, threads=4, per_thread=15)
    relay = Relay(journal, relay_settings, batch_size=7)
    assert (await relay.lag()).lag == 60
    assert await drain(relay) == 60
    assert await relay.lag() == RelayLag(last_seq=60, cursor=60)
    assert await journal.get_cursor("relay.journal.messages") == 60
    assert relay.stats.published == 60 and relay.stats.batches == 9
    await relay.close()

    records = consume(relay_settings, 60)
    assert len(records) == 60
    for record in records:
        message = journal_messages.decode(record.value())
        assert record.key() == message.thread_id.encode()
        assert header(record.headers(), journal_messages.MESSAGE_ID_HEADER) == message.message_id.encode()
        REGISTRY.validate("journal.messages", json.loads(record.value()))
    threads = by_thread(records)
    assert sorted(threads) == ["th-0", "th-1", "th-2", "th-3"]
    for thread_id, messages in threads.items():
        assert [m.offset for m in messages] == list(range(15)), thread_id
        assert messages == [m for m in appended if m.thread_id == thread_id]


async def test_a_new_relay_resumes_from_the_durable_cursor(
    relay_settings: Settings, journal: SlateJournal
) -> None:
    await append(journal, threads=2, per_thread=10)
    first = Relay(journal, relay_settings, batch_size=8)
    assert await drain(first) == 20
    await first.close()

    await append(journal, threads=2, per_thread=5, tag="later-")
    second = Relay(journal, relay_settings, batch_size=8)
    assert await second.cursor() == 20
    assert await drain(second) == 10
    await second.close()

    records = consume(relay_settings, 30)
    assert sorted(journal_messages.decode(r.value()).seq for r in records) == list(range(1, 31))


async def test_crash_before_the_cursor_is_stored_republishes_the_batch(
    relay_settings: Settings, journal: SlateJournal
) -> None:
    await append(journal, threads=3, per_thread=10)
    first = Relay(journal, relay_settings, batch_size=12)
    assert await first.run_once() == 12  # seq 1..12 published and confirmed
    # the broker confirms the next batch, then the process "dies" before the cursor is durable
    crash = Outage(
        journal,
        methods={"set_cursor"},
        error=lambda: RuntimeError("process killed before the cursor was stored"),
        times=1,
    )
    crashing = Relay(crash.proxy, relay_settings, batch_size=12)
    with pytest.raises(RuntimeError, match="killed"):
        await crashing.run_once()  # seq 13..24 reached the broker, the cursor did not move
    assert await journal.get_cursor("relay.journal.messages") == 12

    restarted = Relay(journal, relay_settings, batch_size=12)
    assert await drain(restarted) == 18  # 13..30: the unconfirmed batch again, then the rest
    for relay in (first, crashing, restarted):
        await relay.close()

    records = consume(relay_settings, 30 + 12)
    seqs = sorted(journal_messages.decode(r.value()).seq for r in records)
    assert seqs == sorted([*range(1, 31), *range(13, 25)])  # nothing lost, only 13..24 twice
    for thread_id, messages in by_thread(records).items():
        first_arrivals = list(dict.fromkeys(m.offset for m in messages))
        assert first_arrivals == list(range(10)), thread_id


async def test_rewind_republishes_everything(relay_settings: Settings, journal: SlateJournal) -> None:
    await append(journal, threads=2, per_thread=6)
    relay = Relay(journal, relay_settings)
    assert await drain(relay) == 12
    with pytest.raises(ValueError, match="forward"):
        await relay.rewind(13)
    await relay.rewind(0)
    assert (await relay.lag()).lag == 12
    assert await journal.get_cursor("relay.journal.messages") == 0
    assert await Relay(journal, relay_settings).cursor() == 0
    assert await drain(relay) == 12
    await relay.close()

    records = consume(relay_settings, 24)
    seqs = sorted(journal_messages.decode(r.value()).seq for r in records)
    assert seqs == sorted([*range(1, 13), *range(1, 13)])
    for messages in by_thread(records).values():
        assert [m.offset for m in messages] == [*range(6), *range(6)]


async def test_run_publishes_appends_as_they_come_and_stops(
    relay_settings: Settings, journal: SlateJournal
) -> None:
    relay = Relay(journal, relay_settings, idle_sleep=0.01)
    stop = asyncio.Event()
    task = asyncio.create_task(relay.run(stop))
    for _ in range(5):
        await append(journal, threads=3, per_thread=4)
        relay.notify()
        await asyncio.sleep(0.05)
    await wait_for(relay, lag=0)
    stop.set()
    await asyncio.wait_for(task, 5)
    assert relay.stats.failures == 0
    records = await asyncio.to_thread(consume, relay_settings, 60)
    assert sorted(journal_messages.decode(r.value()).seq for r in records) == list(range(1, 61))


# ---------------------------------------------------------------- failures


async def test_missing_topic_fails_the_batch_without_moving_the_cursor(
    broker: str, tmp_path: Path, journal: SlateJournal
) -> None:
    settings = Settings(
        data_dir=tmp_path, broker_url=f"kafka://{broker}", topic_prefix=f"none{uuid.uuid4().hex[:8]}."
    )
    await append(journal, threads=1, per_thread=3)
    relay = Relay(journal, settings, producer_overrides={"topic.metadata.propagation.max.ms": 500})
    with pytest.raises(RelayDeliveryError, match="topic is missing") as info:
        await relay.run_once()
    assert info.value.topic_missing
    assert await relay.cursor() == 0
    await relay.close()
    topics = apply_topics(settings, REGISTRY)  # the producer did not auto-create the topic
    assert topics.was_created("journal.messages")


async def test_stop_while_the_broker_is_unreachable(
    tmp_path: Path, journal: SlateJournal, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(data_dir=tmp_path, broker_url=f"kafka://127.0.0.1:{free_port()}")
    await append(journal, threads=2, per_thread=3)
    relay = Relay(journal, settings)
    stop = asyncio.Event()
    with caplog.at_level(logging.WARNING, logger="memstream.relay"):
        task = asyncio.create_task(relay.run(stop))
        await asyncio.sleep(1.5)
        assert not task.done()
        stop.set()
        started = time.monotonic()
        await asyncio.wait_for(task, 5)
    assert time.monotonic() - started < 2
    assert await journal.get_cursor("relay.journal.messages") == 0
    assert relay.stats.published == 0
    assert any("unreachable" in r.getMessage() for r in caplog.records), caplog.text


@pytest.mark.engine
async def test_survives_an_embedded_broker_restart(
    tmp_path: Path, journal: SlateJournal, caplog: pytest.LogCaptureFixture
) -> None:
    """Broker down: the relay waits and keeps everything. Broker back, memory-only (topic gone):
    the hook re-applies topics.yaml and rewinds, and every message arrives."""
    port = free_port()
    broker = services.broker_process(tmp_path / "broker", port)
    broker.start()
    settings = Settings(data_dir=tmp_path, broker_url=f"kafka://127.0.0.1:{port}", topic_prefix="r.")
    apply_topics(settings, REGISTRY)
    relay: Relay

    async def topic_missing() -> None:
        report = await asyncio.to_thread(apply_topics, settings, REGISTRY)
        if report.was_created("journal.messages"):
            await relay.rewind(0)

    relay = Relay(
        journal,
        settings,
        idle_sleep=0.01,
        max_backoff=0.5,
        on_topic_missing=topic_missing,
        producer_overrides={"topic.metadata.propagation.max.ms": 1000},
    )
    stop = asyncio.Event()
    try:
        with caplog.at_level(logging.INFO, logger="memstream.relay"):
            task = asyncio.create_task(relay.run(stop))
            await append(journal, threads=3, per_thread=5)
            await wait_for(relay, lag=0)

            await asyncio.to_thread(broker.stop, sig=signal.SIGKILL)  # a crash; its topics are gone
            await append(journal, threads=3, per_thread=5, tag="during-outage-")
            await asyncio.sleep(1.0)
            assert (await relay.lag()).lag == 15  # waiting, not dropping

            broker = services.broker_process(tmp_path / "broker", port)
            broker.start()
            await wait_for(relay, lag=0, timeout_s=30)
            stop.set()
            await asyncio.wait_for(task, 5)
        assert any("rewound from seq 15 to 0" in r.getMessage() for r in caplog.records), caplog.text
        records = await asyncio.to_thread(consume, settings, 30)
        assert sorted(journal_messages.decode(r.value()).seq for r in records) == list(range(1, 31))
        for messages in by_thread(records).values():
            assert [m.offset for m in messages] == list(range(10))
    finally:
        stop.set()
        broker.stop(sig=signal.SIGKILL)
