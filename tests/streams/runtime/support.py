"""Test processors with real durable effects (Postgres), and Kafka helpers for runtime tests."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import asyncpg
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from core.config import Settings
from streams.runtime.processor import InvalidMessage, Processor, Record, group_id

TOPIC = "journal.messages"
"""Tests consume the declared journal topic; the random `topic_prefix` makes it their own."""

Hook = Callable[[Sequence[Record]], Awaitable[None]]


class PgWriter(Processor):
    """Writes each record's `id` into `effects` idempotently (a real durable effect).

    A record whose value has `"poison": true` is rejected with InvalidMessage. `before_write`
    (optional) runs before the transaction and may raise to simulate a failure before effects.
    `seen` lists every delivered (partition, offset), duplicates included.
    """

    def __init__(self, name: str, dsn: str, *, before_write: Hook | None = None) -> None:
        self.name = name
        self.source_topics = (TOPIC,)
        self.dsn = dsn
        self.before_write = before_write
        self.seen: list[tuple[int, int]] = []
        self.calls = 0
        self._pool: asyncpg.Pool | None = None

    async def start(self) -> None:
        self._pool = await asyncpg.create_pool(self.dsn, min_size=1, max_size=2)

    async def stop(self) -> None:
        if self._pool is not None:
            await self._pool.close()

    async def process(self, batch: Sequence[Record]) -> None:
        self.calls += 1
        self.seen.extend((r.partition, r.offset) for r in batch)
        ids = []
        for r in batch:
            try:
                data: dict[str, Any] = json.loads(r.value or b"")
            except ValueError as exc:
                raise InvalidMessage(r, "value is not JSON") from exc
            if data.get("poison"):
                raise InvalidMessage(r, f"poison record {data['id']}") from ValueError("poison")
            ids.append(int(data["id"]))
        if self.before_write is not None:
            await self.before_write(batch)
        assert self._pool is not None
        async with self._pool.acquire() as conn, conn.transaction():
            await conn.executemany(
                "INSERT INTO effects (processor, id) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                [(self.name, i) for i in ids],
            )


async def create_effects_table(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("CREATE TABLE effects (processor text, id int, PRIMARY KEY (processor, id))")
    finally:
        await conn.close()


async def effect_ids(dsn: str, processor: str) -> list[int]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch("SELECT id FROM effects WHERE processor = $1 ORDER BY id", processor)
    finally:
        await conn.close()
    return [row["id"] for row in rows]


async def wait_for_effects(dsn: str, processor: str, count: int, within_s: float = 30.0) -> list[int]:
    deadline = time.monotonic() + within_s
    while True:
        ids = await effect_ids(dsn, processor)
        if len(ids) >= count or time.monotonic() > deadline:
            return ids
        await asyncio.sleep(0.1)


def produce(settings: Settings, values: Sequence[dict[str, Any]]) -> dict[int, tuple[int, int]]:
    """Produce JSON values (key `k<id % 5>`); returns id -> (partition, offset)."""
    producer = Producer({"bootstrap.servers": settings.broker_bootstrap, "enable.idempotence": True})
    positions: dict[int, tuple[int, int]] = {}

    def delivered(err: Any, msg: Any) -> None:
        assert err is None, err
        positions[json.loads(msg.value())["id"]] = (msg.partition(), msg.offset())

    for value in values:
        producer.produce(
            settings.topic(TOPIC),
            key=f"k{value['id'] % 5}".encode(),
            value=json.dumps(value).encode(),
            headers=[("message_id", f"m{value['id']}".encode())],
            on_delivery=delivered,
        )
    assert producer.flush(30) == 0
    assert len(positions) == len(values)
    return positions


def committed(settings: Settings, processor: str, partitions: int = 6) -> dict[int, int]:
    """The group's committed offset per partition (absent: nothing committed)."""
    consumer = Consumer(
        {"bootstrap.servers": settings.broker_bootstrap, "group.id": group_id(processor, settings)}
    )
    try:
        tps = consumer.committed(
            [TopicPartition(settings.topic(TOPIC), p) for p in range(partitions)], timeout=15
        )
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in tps if tp.offset >= 0}


def consume_all(
    settings: Settings, topic: str, count: int, *, partitions: int = 1, timeout: float = 20.0
) -> list[Any]:
    """Read `count` records of broker topic `topic` from the start (assigned: no group join)."""
    consumer = Consumer(
        {
            "bootstrap.servers": settings.broker_bootstrap,
            "group.id": f"{settings.topic_prefix}reader",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out: list[Any] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                out.append(msg)
        # anything beyond `count` would be a bug: give it a moment to show up
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                out.append(msg)
    finally:
        consumer.close()
    return out
