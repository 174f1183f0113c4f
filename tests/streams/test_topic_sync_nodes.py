"""Several nodes' `TopicSync` over one Postgres (`topic_identities`) and one broker (real Tansu,
real Postgres), as nodes of a deployment start: each declares the topics (`apply_topics`) and
checks the compaction topics with what it created.

- nodes starting at once on a new deployment: each compaction topic is created by one of them, and
  at most its creator tells the compaction recovery (`on_lost`, logged at INFO as created with no
  identity recorded before), at most once per topic, however the creations and checks interleave
  (when another node recorded the new topic's identity first, nobody tells: nothing was lost);
  every node agrees on the recorded identity;
- a node starting after them finds the identities recorded and tells nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter

import asyncpg
import pytest

from core.config import Settings
from streams.admin import apply_topics
from streams.identity import fingerprint, topic_identity
from streams.topic_guards import COMPACTION_TOPICS, CompactionTopicGuard
from streams.topic_sync import TopicSync
from streams.topics import load_topics, topic_name

REGISTRY = load_topics()


async def start_node(settings: Settings, pool: asyncpg.Pool, lost: Counter[str], name: str) -> list[str]:
    """What a node's start does with the topics (`memstream.node` and `build_node`); returns the
    topics its `apply_topics` created."""
    report = await asyncio.to_thread(apply_topics, settings, REGISTRY)
    guards = [
        CompactionTopicGuard(settings, pool, topic, lambda topic=topic: lost.update([f"{name}:{topic}"]))
        for topic in COMPACTION_TOPICS
    ]
    await TopicSync(settings, guards, registry=REGISTRY).check(created=report.created)
    return [t for t in report.created if t in COMPACTION_TOPICS]


@pytest.mark.parametrize("nodes", [2, 3])
async def test_nodes_starting_at_once_tell_the_recovery_once_per_new_topic(
    settings: Settings, pool: asyncpg.Pool, nodes: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="memstream.topic_sync")
    lost: Counter[str] = Counter()
    created = await asyncio.gather(*(start_node(settings, pool, lost, f"n{i}") for i in range(nodes)))
    creators = Counter(topic for topics in created for topic in topics)
    assert creators == Counter(COMPACTION_TOPICS), created  # one creator per topic
    told = Counter(key.split(":")[1] for key in lost.elements())
    assert max(told.values(), default=0) <= 1, lost  # at most once per topic ...
    for i, topics in enumerate(created):  # ... by its creator
        assert {key.split(":")[1] for key in lost if key.startswith(f"n{i}:")} <= set(topics), lost
    for topic in COMPACTION_TOPICS:
        broker_name = topic_name(settings, topic)
        identity = await asyncio.to_thread(topic_identity, settings.broker_bootstrap, broker_name)
        assert identity is not None
        stored = await pool.fetchval("SELECT fingerprint FROM topic_identities WHERE topic = $1", broker_name)
        assert stored == fingerprint(identity)

    later: Counter[str] = Counter()
    assert await start_node(settings, pool, later, "late") == []
    assert later == Counter()
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "memstream.topic_sync"]
    first = [m for level, m in said if level == logging.INFO and "created by this node" in m]
    assert len(first) == len(lost), said  # one line per topic told
    assert [m for level, m in said if level >= logging.WARNING] == []  # nothing was lost
