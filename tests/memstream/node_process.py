"""Run `memstream node` as a real child process against the test servers of `settings`."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from core.config import Settings
from memstream.embedded.bootstrap import create_key
from memstream.embedded.process import ManagedProcess, free_port
from memstream.embedded.supervisor import http_ok


def node_env(settings: Settings, api_port: int) -> dict[str, str]:
    """The environment a node needs to use the same data dir, topics, database and Redis (and a
    free port of its own for the SQL endpoint)."""
    return {
        **os.environ,
        "MEMSTREAM_DATA_DIR": str(settings.data_path),
        "MEMSTREAM_ENVIRONMENT": settings.environment,
        "MEMSTREAM_TOPIC_PREFIX": settings.topic_prefix,
        "MEMSTREAM_BROKER_URL": f"kafka://{settings.broker_bootstrap}",
        "MEMSTREAM_POSTGRES_DSN": settings.postgres,
        "MEMSTREAM_REDIS_URL": settings.redis,
        "MEMSTREAM_API_PORT": str(api_port),
        "MEMSTREAM_JOURNAL_SHARDS": str(settings.journal_shards),
        "MEMSTREAM_SQL__PORT": str(free_port()),
    }


def node_process(env: dict[str, str], log: Path) -> ManagedProcess:
    """A node process (not started); ready once its /healthz answers."""
    port = env["MEMSTREAM_API_PORT"]
    return ManagedProcess(
        name="node",
        argv=[sys.executable, "-m", "memstream", "node"],
        log_path=log,
        ready=lambda: http_ok(f"http://127.0.0.1:{port}/healthz"),
        env=env,
    )


@dataclass
class RunningNode:
    """A started node: `api` is an HTTP client on /v1 with an API key of `account`."""

    api: httpx.Client
    url: str
    env: dict[str, str]
    log: Path

    @property
    def sql_url(self) -> str:
        """The node's SQL endpoint."""
        return f"http://127.0.0.1:{self.env['MEMSTREAM_SQL__PORT']}"


@contextlib.contextmanager
def running_node(settings: Settings, tmp_path: Path, *, account: str = "acme") -> Iterator[RunningNode]:
    """Start a node on `settings` (its own API port, log in `tmp_path`), stop it on exit."""
    port = free_port()
    key = asyncio.run(create_key(settings, account))
    env = node_env(settings, port)
    log = tmp_path / "node.log"
    process = node_process(env, log)
    process.start(timeout=120)
    url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as api:
            yield RunningNode(api=api, url=url, env=env, log=log)
    finally:
        process.stop()
