"""Running a processor on the real broker in tests: settings on the parametrised broker tier, short
runtime timings, producing to a source topic, waiting for a consumer group to commit, reading a
dead-letter topic, timing a stop while the processor waits on an unreachable broker."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from pydantic import SecretStr

from core.config import Settings
from memstream.embedded.process import free_port
from streams.producer import BatchPublisher, make_producer
from streams.runtime import RuntimeOptions, run_processors
from streams.runtime.processor import Processor, group_id
from streams.topics import TopicRegistry, topic_name

Headers = Sequence[tuple[str, str | bytes | None]]
Outgoing = tuple[bytes | None, bytes | None] | tuple[bytes | None, bytes | None, Headers]
"""A record to produce: key and value, optionally headers."""


def broker_settings(
    broker: str, topic_prefix: str, tmp_path: Path, *, redis_url: str | None = None
) -> Settings:
    """Settings on the parametrised broker tier with the test's own topic prefix and data dir
    (and `redis_url`, when given)."""
    extra: dict[str, Any] = {} if redis_url is None else {"redis_url": SecretStr(redis_url)}
    return Settings(
        data_dir=tmp_path / "data",
        environment="test",
        topic_prefix=topic_prefix,
        broker_url=f"kafka://{broker}",
        **extra,
    )


def short_options(request: pytest.FixtureRequest, **changes: Any) -> RuntimeOptions:
    """Short runtime timings for the broker tier of `request` (Tansu joins a group in about half the
    session; Apache Kafka refuses sessions under 6 s): 3 attempts with 0.05-0.1 s backoff unless
    `changes` say otherwise."""
    session = 2.0 if request.node.callspec.params.get("broker", "tansu") == "tansu" else 6.0
    fields: dict[str, Any] = {
        "max_attempts": 3,
        "backoff_initial_s": 0.05,
        "backoff_max_s": 0.1,
        "session_timeout_s": session,
        "heartbeat_interval_s": 0.5,
        "commit_interval_s": 0.5,
        "drain_timeout_s": 2.0,
    }
    fields.update(changes)
    return RuntimeOptions(**fields)


def produce(settings: Settings, topic: str, records: Iterable[Outgoing]) -> dict[int, int]:
    """Produce `records` to `topic` (a topics.yaml name) with an idempotent producer and wait for
    every delivery; returns the end offset (last + 1) of each partition written to."""
    producer = Producer({"bootstrap.servers": settings.broker_bootstrap, "enable.idempotence": True})
    errors: list[Any] = []
    ends: dict[int, int] = {}

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            ends[msg.partition()] = max(ends.get(msg.partition(), 0), msg.offset() + 1)

    for key, value, *headers in records:
        producer.produce(
            topic_name(settings, topic),
            key=key,
            value=value,
            headers=list(headers[0]) if headers else None,
            on_delivery=delivered,
        )
    assert producer.flush(30) == 0 and errors == []
    return ends


def caught_up(settings: Settings, processor: str, topic: str, ends: dict[int, int]) -> bool:
    """Whether the group of `processor` committed every record of `topic` up to `ends` (per partition)."""
    consumer = Consumer(
        {"bootstrap.servers": settings.broker_bootstrap, "group.id": group_id(processor, settings)}
    )
    try:
        committed = consumer.committed(
            [TopicPartition(topic_name(settings, topic), p) for p in ends], timeout=10
        )
        return all(tp.offset >= ends[tp.partition] for tp in committed)
    finally:
        consumer.close()


def committed_total(settings: Settings, processor: str, topic: str) -> int:
    """Records committed by the group of `processor`, over every partition of `topic`."""
    name = topic_name(settings, topic)
    consumer = Consumer(
        {"bootstrap.servers": settings.broker_bootstrap, "group.id": group_id(processor, settings)}
    )
    try:
        partitions = consumer.list_topics(name, timeout=10).topics[name].partitions
        done = consumer.committed([TopicPartition(name, p) for p in partitions], timeout=10)
        return sum(max(tp.offset, 0) for tp in done)
    finally:
        consumer.close()


async def run_until(
    settings: Settings,
    options: RuntimeOptions,
    registry: TopicRegistry,
    processor: Processor,
    done: Callable[[], bool],
    timeout_s: float = 60,
) -> None:
    """Run `processor` alone on the runtime until `done()` (called in a thread, every 0.2 s) holds,
    then stop it; fails if the processor stops first or `timeout_s` passes."""
    stop = asyncio.Event()
    task = asyncio.create_task(
        run_processors([processor], settings, stop, options=options, registry=registry)
    )
    try:
        deadline = time.monotonic() + timeout_s
        while not await asyncio.to_thread(done):
            assert not task.done(), f"the processor stopped: {task.exception() if task.done() else ''}"
            assert time.monotonic() < deadline, "timed out"
            await asyncio.sleep(0.2)
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


async def run_until_caught_up(
    settings: Settings,
    options: RuntimeOptions,
    registry: TopicRegistry,
    processor: Processor,
    topic: str,
    ends: dict[int, int],
) -> None:
    """Run `processor` until its group committed `topic` up to `ends` (see `run_until`)."""
    await run_until(
        settings, options, registry, processor, lambda: caught_up(settings, processor.name, topic, ends)
    )


def dead_letters(settings: Settings, processor: str, wait_s: float = 1.5) -> list[dict[str, Any]]:
    """Every record on the dead-letter topic of `processor`, read by assignment from the beginning
    until nothing more arrived for `wait_s`."""
    topic = topic_name(settings, f"dlq.{processor}")
    consumer = Consumer(
        {"bootstrap.servers": settings.broker_bootstrap, "group.id": f"check-{uuid.uuid4().hex[:8]}"}
    )
    found: list[dict[str, Any]] = []
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        idle_until = time.monotonic() + wait_s
        while time.monotonic() < idle_until:
            msg = consumer.poll(0.2)
            if msg is None or msg.error() is not None:
                continue
            value = msg.value()
            assert value is not None
            found.append(json.loads(value))
            idle_until = time.monotonic() + wait_s
    finally:
        consumer.close()
    return found


def unreachable_publisher(settings: Settings, topic: str, tmp_path: Path) -> BatchPublisher:
    """A publisher to `topic` (a topics.yaml name) whose producer talks to a port nothing listens on:
    every publish waits for the broker until aborted."""
    dead = Settings(data_dir=tmp_path / "dead", broker_url=f"kafka://127.0.0.1:{free_port()}")
    logger = logging.getLogger("tests.unreachable")  # librdkafka's refused connects
    return BatchPublisher(
        settings,
        topic_name(settings, topic),
        client_id="test-unreachable",
        logger=logger,
        factory=lambda: make_producer(dead, client_id="test-unreachable", logger=logger),
    )


def seconds_to_stop(
    settings: Settings,
    options: RuntimeOptions,
    registry: TopicRegistry,
    scenario: Callable[[], AbstractAsyncContextManager[tuple[Processor, Callable[[], Awaitable[bool]]]]],
) -> float:
    """In a fresh event loop, open `scenario` (the processor and a `blocked()` probe), run the
    processor alone on the runtime until `blocked()` holds, then stop it. Returns the seconds from
    setting the stop to the end of the event loop, its worker threads joined (as a process exit
    would wait for them)."""
    stopped_at = 0.0

    async def main() -> None:
        nonlocal stopped_at
        async with scenario() as (processor, blocked):
            stop = asyncio.Event()
            task = asyncio.create_task(
                run_processors([processor], settings, stop, options=options, registry=registry)
            )
            deadline = time.monotonic() + 60
            while not await blocked():
                assert not task.done(), f"the processor stopped: {task.exception()}"
                assert time.monotonic() < deadline, "the processor never got blocked"
                await asyncio.sleep(0.1)
            await asyncio.sleep(0.5)  # well inside its wait on the broker
            stopped_at = time.monotonic()
            stop.set()
            await task

    asyncio.run(main())
    return time.monotonic() - stopped_at
