"""Fault test: a node is killed (-9) while a compaction is in flight and restarts on a broker that
lost every topic and consumer offset (the memory-only embedded broker after a restart: here a new
topic prefix, so new topics and new consumer groups). The compaction completes within seconds of
the new node being ready, and nothing keeps the thread's guard."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from core.config import Settings
from core.stores.thresholds import ThreadScope
from memstream.embedded.bootstrap import create_key
from memstream.embedded.process import free_port
from memstream.wiring.processors import threshold_store
from tests.memstream.node_process import node_env, node_process
from tests.processors.test_thresholds_node import forget_counters

THREAD = "th-kill"


class SilentModelServer:
    """A TCP server that accepts HTTP requests and never answers: a chat model that hangs, so the
    summarizer is caught mid-call. `requests` counts the connections it got."""

    def __init__(self) -> None:
        self.port = free_port()
        self.requests = 0
        self._sock = socket.create_server(("127.0.0.1", self.port))
        self._held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self._held.append(conn)
            self.requests += 1

    def close(self) -> None:
        self._sock.close()
        for conn in self._held:
            conn.close()


def _append(api: httpx.Client, n: int) -> None:
    messages = [
        {"message_id": f"k-{i}", "role": "user" if i % 2 == 0 else "assistant", "content": f"Step {i}."}
        for i in range(n)
    ]
    response = api.post(f"/v1/threads/{THREAD}/messages", json={"agent_id": "bot", "messages": messages})
    assert response.status_code == 201, response.text


def _summary_version(api: httpx.Client) -> Any:
    return api.get(f"/v1/threads/{THREAD}/context").json()["metadata"].get("summary_version")


async def _open_compaction(settings: Settings) -> Any:
    conn = await asyncpg.connect(settings.postgres)
    try:
        return await conn.fetchrow(
            "SELECT to_offset, rerequests FROM thread_compactions WHERE thread_id = $1", THREAD
        )
    finally:
        await conn.close()


async def _guard(settings: Settings) -> bytes | None:
    store = threshold_store(settings)
    try:
        held: bytes | None = await store.client.get(
            store.guard_key(ThreadScope(settings.environment, "acme", "bot", THREAD))
        )
        return held
    finally:
        await store.aclose()


def test_a_compaction_in_flight_at_kill_9_completes_after_a_restart_on_a_new_broker(
    settings: Settings, tmp_path: Path
) -> None:
    key = asyncio.run(create_key(settings, "acme"))
    model = SilentModelServer()
    port = free_port()
    hanging = {
        **node_env(settings, port),
        "MEMSTREAM_CHAT_MODEL__PROVIDER": "openai",
        "MEMSTREAM_CHAT_MODEL__BASE_URL": f"http://127.0.0.1:{model.port}/v1",
        "MEMSTREAM_CHAT_MODEL__MODEL": "silent",
        "MEMSTREAM_CHAT_MODEL__TIMEOUT_S": "120",
    }
    headers = {"Authorization": f"Bearer {key}"}
    base = f"http://127.0.0.1:{port}"
    first = node_process(hanging, tmp_path / "node-1.log")
    first.start(timeout=120)
    try:
        with httpx.Client(base_url=base, headers=headers, timeout=30) as api:
            _append(api, 55)
            deadline = time.monotonic() + 90
            while model.requests == 0:  # the summarizer called the model: the compaction is in flight
                assert time.monotonic() < deadline, (tmp_path / "node-1.log").read_text()[-3000:]
                time.sleep(0.2)
        assert first.pid is not None and first.proc is not None
        os.kill(first.pid, signal.SIGKILL)
        first.proc.wait(10)
    finally:
        model.close()
        first.stop()
    assert asyncio.run(_open_compaction(settings))["to_offset"] == 49

    # the broker lost everything: new topics, new consumer groups (the journal and Redis remain)
    reborn = {**node_env(settings, port), "MEMSTREAM_TOPIC_PREFIX": f"t{uuid.uuid4().hex[:10]}."}
    second = node_process(reborn, tmp_path / "node-2.log")
    second.start(timeout=120)
    ready_at = time.monotonic()
    try:
        with httpx.Client(base_url=base, headers=headers, timeout=30) as api:
            while _summary_version(api) is None:
                assert time.monotonic() - ready_at < 45, (tmp_path / "node-2.log").read_text()[-4000:]
                time.sleep(0.5)
            took = time.monotonic() - ready_at
            assert _summary_version(api) == 1
    finally:
        second.stop()
        asyncio.run(forget_counters(settings))
    assert took < 45
    settled = asyncio.run(_open_compaction(settings))
    assert settled is not None and settled["to_offset"] is None  # nothing left to request again
    assert asyncio.run(_guard(settings)) is None  # the thread is free for its next compaction
    assert "requested again" in (tmp_path / "node-2.log").read_text()
