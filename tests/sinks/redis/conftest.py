"""Redis fixtures: a client of the session's embedded Redis, a Redis of the test's own (to stop and
restart), and a URL where nothing listens."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from redis.asyncio import Redis

from memstream.embedded import services
from memstream.embedded.process import ManagedProcess, free_port
from sinks.redis.client import redis_client


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[Redis]:
    client = redis_client(redis_url)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
def namespace() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture
def closed_redis_url() -> str:
    return f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there: connection refused


@dataclass
class OwnRedis:
    process: ManagedProcess
    url: str


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[OwnRedis]:
    """A Redis server of this test only (append-only file on, like the embedded one): stop and
    start it at will (same port, same data)."""
    port = free_port()
    proc = services.redis_process(tmp_path, port)
    proc.start()
    try:
        yield OwnRedis(proc, f"redis://127.0.0.1:{port}/0")
    finally:
        proc.stop()
