"""Fault test: a poison record on `journal.messages` never stops a real node.

Regression (issue 9, finding 1): a thread id ending in a newline got into the journal; the
`thresholds` processor could not build the summary path for it, failed its batch until it gave
up, crashed, and the node exited - then the supervisor restarted it, the record came back, and the
loop went on (API outages, compaction stalled for every tenant). Here the record is produced
straight to the node's journal topic: the node must stay up and keep serving, dead-letter the
record once with its reason, commit past it, and not see it again after a restart.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx
from confluent_kafka import Consumer, Producer, TopicPartition

from core.config import Settings
from memstream.embedded.bootstrap import create_key
from memstream.embedded.process import ManagedProcess, free_port
from memstream.wiring.processors import threshold_namespace
from processors.thresholds import NAME as THRESHOLDS
from sinks.redis.client import redis_client
from streams.codecs import journal_messages
from streams.runtime.processor import group_id
from streams.topics import default_registry
from tests.memstream.node_process import node_env, node_process
from tests.processors.test_thresholds_broker import requests
from tests.processors.transcript_support import message
from tests.streams.runtime.support import consume_all

POISON_THREAD = "th-poison\n"


def produce_poison(settings: Settings) -> tuple[int, int]:
    """A valid journal message of thread "th-poison\\n" on the node's journal topic; (partition, offset)."""
    payload = journal_messages.payload(message("th-poison", 0, "I am a poison record", seq=10**9))
    payload["thread_id"] = POISON_THREAD
    producer = Producer({"bootstrap.servers": settings.broker_bootstrap, "enable.idempotence": True})
    where: list[tuple[int, int]] = []

    def delivered(err: Any, msg: Any) -> None:
        assert err is None, err
        where.append((msg.partition(), msg.offset()))

    producer.produce(
        settings.topic("journal.messages"),
        key=POISON_THREAD.encode(),
        value=json.dumps(payload).encode(),
        headers=[("message_id", b"th-poison-0")],
        on_delivery=delivered,
    )
    assert producer.flush(30) == 0
    (position,) = where
    return position


def dead_letters(settings: Settings, processor: str, want: int, timeout: float) -> list[dict[str, Any]]:
    topic = default_registry().dlq_topic(processor).broker_name(settings)
    return [json.loads(m.value()) for m in consume_all(settings, topic, want, timeout=timeout)]


def committed_offset(settings: Settings, processor: str, partition: int) -> int:
    consumer = Consumer(
        {"bootstrap.servers": settings.broker_bootstrap, "group.id": group_id(processor, settings)}
    )
    try:
        (tp,) = consumer.committed(
            [TopicPartition(settings.topic("journal.messages"), partition)], timeout=15
        )
    finally:
        consumer.close()
    return int(tp.offset)


def append(client: httpx.Client, thread: str, message_id: str, content: str) -> None:
    body = {"agent_id": "bot", "messages": [{"message_id": message_id, "role": "user", "content": content}]}
    response = client.post(f"/v1/threads/{thread}/messages", json=body)
    assert response.status_code in (200, 201), response.text


def wait_for(condition: Any, timeout: float, what: str, log: Path) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}:\n{log.read_text()[-4000:]}"
        time.sleep(0.5)


async def forget_counters(settings: Settings) -> None:
    client = redis_client(settings.redis)
    try:
        keys = [k async for k in client.scan_iter(match=f"{threshold_namespace(settings)}/*")]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


def test_a_poison_record_is_dead_lettered_once_and_never_stops_the_node(
    settings: Settings, tmp_path: Path
) -> None:
    port = free_port()
    env = node_env(settings, port)
    key = asyncio.run(create_key(settings, "acme"))
    base = f"http://127.0.0.1:{port}"
    logs = [tmp_path / "node-1.log", tmp_path / "node-2.log"]
    node: ManagedProcess = node_process(env, logs[0])
    node.start(timeout=120)
    try:
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30) as client:
            append(client, "th-good", "good-0", "hello before the poison")
            partition, offset = produce_poison(settings)

            found = wait_for(
                lambda: dead_letters(settings, THRESHOLDS, 1, timeout=2.0), 120, "the dead letter", logs[0]
            )
            (dead,) = found
            assert (dead["partition"], dead["offset"]) == (partition, offset)
            assert dead["key_text"] == POISON_THREAD and dead["reason"].strip()
            # committed past it: a restarted consumer group does not read it again
            assert wait_for(
                lambda: committed_offset(settings, THRESHOLDS, partition) > offset, 30, "the commit", logs[0]
            )

            # the node never stopped: the same process answers and takes appends, and is ready
            assert node.proc is not None and node.proc.poll() is None
            append(client, "th-good", "good-1", "hello after the poison")
            ready = client.get("/readyz")
            assert ready.status_code == 200 and ready.json()["status"] == "ready", ready.text

        node.stop()
        node = node_process(env, logs[1])
        node.start(timeout=120)
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30) as client:
            # thresholds consumes again after the restart: 50 messages of a new thread cross
            for i in range(50):
                append(client, "th-after", f"after-{i}", f"message {i} after the restart")
            wait_for(
                lambda: any(r["thread_id"] == "th-after" for r in requests(settings)),
                120,
                "the compaction request of th-after",
                logs[1],
            )
            assert node.proc is not None and node.proc.poll() is None
        # the poison did not come back: still dead-lettered exactly once
        assert len(dead_letters(settings, THRESHOLDS, 2, timeout=3.0)) == 1
        assert "dead-lettered" not in logs[1].read_text()
    finally:
        node.stop()
        asyncio.run(forget_counters(settings))
