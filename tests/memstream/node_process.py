"""Run `memstream node` as a real child process against the test servers of `settings`."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from memstream.config import Settings
from memstream.embedded.process import ManagedProcess
from memstream.embedded.supervisor import http_ok


def node_env(settings: Settings, api_port: int) -> dict[str, str]:
    """The environment a node needs to use the same data dir, topics, database and Redis."""
    return {
        **os.environ,
        "MEMSTREAM_DATA_DIR": str(settings.data_path),
        "MEMSTREAM_ENVIRONMENT": settings.environment,
        "MEMSTREAM_TOPIC_PREFIX": settings.topic_prefix,
        "MEMSTREAM_BROKER_URL": f"kafka://{settings.broker_bootstrap}",
        "MEMSTREAM_POSTGRES_DSN": settings.postgres,
        "MEMSTREAM_REDIS_URL": settings.redis,
        "MEMSTREAM_API_PORT": str(api_port),
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
