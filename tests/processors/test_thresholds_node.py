"""The node hosts `thresholds` with its own journal: 50 messages over HTTP -> one compaction request."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx

from core.config import Settings
from memstream.embedded.bootstrap import create_key
from memstream.embedded.process import free_port
from memstream.wiring.processors import threshold_namespace
from sinks.redis.client import redis_client
from tests.memstream.node_process import node_env, node_process
from tests.processors.test_thresholds_broker import requests


async def forget_counters(settings: Settings) -> None:
    """Delete the node's threshold keys from the shared test Redis."""
    client = redis_client(settings.redis)
    try:
        keys = [k async for k in client.scan_iter(match=f"{threshold_namespace(settings)}/*")]
        assert keys, "the node counted nothing in Redis"
        await client.delete(*keys)
    finally:
        await client.aclose()


def test_the_node_requests_compaction_at_the_fiftieth_message(settings: Settings, tmp_path: Path) -> None:
    port = free_port()
    key = asyncio.run(create_key(settings, "acme"))
    node = node_process(node_env(settings, port), tmp_path / "node.log")
    node.start(timeout=120)
    try:
        with httpx.Client(
            base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {key}"}, timeout=30
        ) as client:
            for i in range(55):
                role = "user" if i % 2 == 0 else "assistant"
                body = {
                    "agent_id": "bot",
                    "messages": [{"message_id": f"n-{i}", "role": role, "content": f"hi {i}"}],
                }
                response = client.post("/v1/threads/th-node/messages", json=body)
                assert response.status_code in (200, 201), response.text
            deadline = time.monotonic() + 60
            found = requests(settings)
            while not found:
                assert time.monotonic() < deadline, (tmp_path / "node.log").read_text()[-3000:]
                time.sleep(0.5)
                found = requests(settings)
    finally:
        node.stop()
        asyncio.run(forget_counters(settings))
    (request,) = found
    assert (request["account_id"], request["thread_id"], request["agent_id"]) == ("acme", "th-node", "bot")
    assert (request["from_offset"], request["to_offset"], request["messages"]) == (0, 49, 50)
