"""Fixtures for runtime tests against each broker tier: settings, timings, declared topics."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from core.config import Settings
from streams.admin import apply_topics
from streams.runtime.options import RuntimeOptions
from streams.topics import TopicRegistry, default_registry
from tests.streams.runtime.support import TOPIC, create_effects_table

NAMES = ("writer", "alpha", "beta")
"""The test processors; their dead-letter topics are declared by `registry`."""


@pytest.fixture
def rt_settings(broker: str, pg_dsn: str, topic_prefix: str, tmp_path: Path) -> Settings:
    """Settings on the parametrised broker (Tansu, or real Kafka with --kafka), own prefix and DB."""
    return Settings(
        data_dir=tmp_path / "data",
        environment="test",
        topic_prefix=topic_prefix,
        broker_url=f"kafka://{broker}",
        postgres_dsn=SecretStr(pg_dsn),
    )


@pytest.fixture
def rt_options(request: pytest.FixtureRequest) -> RuntimeOptions:
    """Short timings. Tansu joins a group in ~session/2; Apache Kafka refuses sessions < 6 s."""
    tier = request.node.callspec.params.get("broker", "tansu")
    session = 2.0 if tier == "tansu" else 6.0
    return RuntimeOptions(
        batch_size=50,
        batch_wait_s=0.05,
        max_attempts=3,
        backoff_initial_s=0.05,
        backoff_max_s=0.1,
        session_timeout_s=session,
        heartbeat_interval_s=0.5,
        commit_interval_s=0.5,
        drain_timeout_s=2.0,
        dlq_ack_timeout_s=10.0,
    )


@pytest.fixture
def registry(rt_settings: Settings) -> TopicRegistry:
    """topics.yaml plus the test processors' dead-letter topics, created on the broker."""
    reg = default_registry().with_dead_letter(*NAMES)
    apply_topics(rt_settings, reg, topics=[reg.get(TOPIC), *(reg.dlq_topic(n) for n in NAMES)])
    return reg


@pytest.fixture
async def effects_dsn(pg_dsn: str) -> str:
    """`pg_dsn` with the `effects` table the test processors write to."""
    await create_effects_table(pg_dsn)
    return pg_dsn
