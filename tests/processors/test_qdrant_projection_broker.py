"""qdrant-projection on the real broker: produce to memory.entries, project, query, rebuild by replay."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from core.config import Settings
from core.stores.vectors import CollectionRef, IndexFilter
from processors.qdrant_projection import NAME, QdrantProjection, entry_payload
from sinks.embeddings.bm25 import Bm25Sparse
from sinks.embeddings.minilm import OfflineMiniLM
from sinks.qdrant.edge import QdrantEdgeIndex
from streams.admin import apply_topics
from streams.runtime import RuntimeOptions
from streams.topics import TopicRegistry, default_registry
from tests.processors.projection_support import TOPIC, entry, key_of, value_of
from tests.processors.runtime_support import (
    Outgoing,
    broker_settings,
    produce,
    run_until_caught_up,
    short_options,
)

REPLAY = f"{NAME}-replay"
MODEL = "all-MiniLM-L6-v2-q8"


@pytest.fixture
def settings_(broker: str, topic_prefix: str, tmp_path: Path) -> Settings:
    return broker_settings(broker, topic_prefix, tmp_path)


@pytest.fixture
def options(request: pytest.FixtureRequest) -> RuntimeOptions:
    """Small batches: latest-wins spans batches."""
    return short_options(request, batch_size=7, batch_wait_s=0.05)


@pytest.fixture
def registry(settings_: Settings) -> TopicRegistry:
    reg = default_registry().with_dead_letter(REPLAY)
    apply_topics(settings_, reg, topics=[reg.get(TOPIC), reg.dlq_topic(NAME), reg.dlq_topic(REPLAY)])
    return reg


@pytest.fixture(scope="module")
def embedder() -> OfflineMiniLM:
    return OfflineMiniLM()


async def test_projection_and_rebuild_by_replay(
    settings_: Settings,
    options: RuntimeOptions,
    registry: TopicRegistry,
    embedder: OfflineMiniLM,
    tmp_path: Path,
) -> None:
    now = datetime.now(UTC)
    tea = entry(1, "The user prefers green tea.", category="user_profile", importance=0.9)
    deploy_v1 = entry(2, "Deploys happen on Fridays.")
    deploy_v2 = deploy_v1.model_copy(update={"content": "Deploys happen on Mondays.", "updated_at": now})
    forgotten = entry(3, "Obsolete fact.")
    expired = entry(4, "Short-lived.", category="observation", expires_at=now - timedelta(minutes=5))
    private = entry(5, "Alice's locker code is 1234.", visibility="private", user_id="alice")
    globex = entry(6, "Globex runs Oracle.", account="globex")
    readded = entry(7, "Re-added after a forget.")
    records: list[Outgoing] = [
        (key_of(tea), value_of(tea)),
        (key_of(deploy_v1), value_of(deploy_v1)),
        (key_of(forgotten), value_of(forgotten)),
        (key_of(expired), value_of(expired)),
        (key_of(private), value_of(private)),
        (key_of(globex), value_of(globex)),
        (key_of(readded), value_of(readded)),
        (b"not/a/valid/key", b"{}"),  # dead-lettered, the rest goes on
        (key_of(deploy_v2), value_of(deploy_v2, version=2)),
        (key_of(forgotten), None),
        (key_of(readded), None),
        (key_of(readded), value_of(readded, version=3)),
        *[(key_of(e), value_of(e)) for e in (entry(100 + n, f"filler fact number {n}") for n in range(20))],
    ]
    ends = produce(settings_, TOPIC, records)
    acme = CollectionRef(environment="test", account_id="acme", model_id=MODEL)
    globex_ref = CollectionRef(environment="test", account_id="globex", model_id=MODEL)
    expected = {
        tea,
        deploy_v2,
        private,
        readded,
        *(entry(100 + n, f"filler fact number {n}") for n in range(20)),
    }

    index = QdrantEdgeIndex(tmp_path / "live")
    try:
        projection = QdrantProjection(index, embedder, Bm25Sparse(), close_index=False)
        await run_until_caught_up(settings_, options, registry, projection, TOPIC, ends)
        points = await index.points(acme)
        assert points == {e.entry_id: {**entry_payload(e), "entry_id": e.entry_id} for e in expected}
        assert set(await index.points(globex_ref)) == {globex.entry_id}
        sparse = Bm25Sparse()
        (dense,) = await embedder.embed(["when do we deploy"])
        found = await index.hybrid_query(
            acme,
            dense,
            sparse.encode_query("when do we deploy"),
            IndexFilter(agent_id="bot", user_id="bob"),
            3,
        )
        assert found[0].entry_id == deploy_v2.entry_id
        assert private.entry_id not in {f.entry_id for f in found}
    finally:
        await index.close()

    # a new consumer group from the beginning into an empty index: exactly the same points
    rebuilt = QdrantEdgeIndex(tmp_path / "rebuilt")
    live = QdrantEdgeIndex(tmp_path / "live")
    try:
        replay = QdrantProjection(rebuilt, embedder, Bm25Sparse(), name=REPLAY, close_index=False)
        await run_until_caught_up(settings_, options, registry, replay, TOPIC, ends)
        for ref in (acme, globex_ref):
            assert await rebuilt.points(ref) == await live.points(ref)
        assert len(await rebuilt.points(acme)) == len(expected)
    finally:
        await rebuilt.close()
        await live.close()
