"""Fault test: kill -9 the node while a client appends continuously.

After a restart, every acknowledged append is in the journal exactly once (gap-free offsets, no
duplicate message ids) and on the journal topic at least once.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections import defaultdict
from pathlib import Path

import httpx
from confluent_kafka import Consumer, KafkaError

from core.config import Settings
from memstream.embedded.bootstrap import create_key
from memstream.embedded.process import free_port
from tests.memstream.node_process import node_env, node_process

THREADS = [f"t-{i}" for i in range(4)]


class Appender(threading.Thread):
    """Appends one message at a time, round-robin over THREADS, remembering what was acknowledged."""

    def __init__(self, base: str, key: str) -> None:
        super().__init__(daemon=True)
        self.client = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=5)
        self.acked: dict[str, str] = {}  # message_id -> thread
        self.failed = 0
        self.stop = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            thread = THREADS[i % len(THREADS)]
            message_id = f"m-{i}"
            body = {
                "agent_id": "agent-1",
                "messages": [{"message_id": message_id, "role": "user", "content": f"message number {i}"}],
            }
            try:
                response = self.client.post(f"/v1/threads/{thread}/messages", json=body)
            except httpx.HTTPError:
                self.failed += 1
                time.sleep(0.02)
            else:
                if response.status_code == 201:
                    self.acked[message_id] = thread
                else:
                    self.failed += 1
                    time.sleep(0.02)
            i += 1


def _journal_ids(base: str, key: str) -> dict[str, list[tuple[int, str]]]:
    out: dict[str, list[tuple[int, str]]] = {}
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=10) as client:
        for thread in THREADS:
            rows: list[tuple[int, str]] = []
            after = -1
            while True:
                response = client.get(
                    f"/v1/threads/{thread}/messages", params={"after": after, "limit": 1000}
                )
                if response.status_code == 404:
                    break
                response.raise_for_status()
                page = response.json()["messages"]
                if not page:
                    break
                rows.extend((m["offset"], m["message_id"]) for m in page)
                after = page[-1]["offset"]
            out[thread] = rows
    return out


def _topic_ids(settings: Settings, want: set[str], timeout: float = 60.0) -> dict[str, int]:
    consumer = Consumer(
        {
            "bootstrap.servers": settings.broker_bootstrap,
            "group.id": f"{settings.topic_prefix}crash-check",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([settings.topic("journal.messages")])
    seen: dict[str, int] = defaultdict(int)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and not want <= seen.keys():
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                continue
            headers = dict(msg.headers() or [])
            seen[headers["message_id"].decode()] += 1
    finally:
        consumer.close()
    return seen


def test_kill9_loses_no_acknowledged_append(settings: Settings, tmp_path: Path) -> None:
    port = free_port()
    env = node_env(settings, port)
    key = asyncio.run(create_key(settings, "acme"))
    base = f"http://127.0.0.1:{port}"
    node = node_process(env, tmp_path / "node-1.log")
    node.start(timeout=120)
    appender = Appender(base, key)
    appender.start()
    try:
        time.sleep(3)
        acked_before_kill = len(appender.acked)
        assert node.pid is not None
        os.kill(node.pid, signal.SIGKILL)
        assert node.proc is not None
        node.proc.wait(10)
        time.sleep(0.5)
        node = node_process(env, tmp_path / "node-2.log")
        node.start(timeout=120)
        time.sleep(2)
    finally:
        appender.stop.set()
        appender.join(10)
    try:
        acked = dict(appender.acked)
        assert acked_before_kill > 20, f"only {acked_before_kill} appends before the kill"
        assert len(acked) > acked_before_kill, "no append was acknowledged after the restart"
        assert appender.failed > 0, "the kill should have failed some appends"

        journal = _journal_ids(base, key)
        for thread, rows in journal.items():
            offsets = [offset for offset, _ in rows]
            assert offsets == list(range(len(rows))), f"{thread}: offsets are not gap-free"
            ids = [message_id for _, message_id in rows]
            assert len(ids) == len(set(ids)), f"{thread}: a message is in the journal twice"
        where = {message_id: thread for thread, rows in journal.items() for _, message_id in rows}
        missing = [m for m, thread in acked.items() if where.get(m) != thread]
        assert not missing, f"{len(missing)} acknowledged appends are not in the journal: {missing[:5]}"

        seen = _topic_ids(settings, set(acked))
        not_published = set(acked) - seen.keys()
        assert not not_published, f"{len(not_published)} acknowledged appends never reached the topic"
    finally:
        node.stop()
