"""The qdrant-projection processor: the pure plan, and the sink on a real Qdrant Edge index."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from qdrant_client.http.exceptions import UnexpectedResponse

from core.config import Settings
from core.stores.vectors import CollectionRef, IndexFilter, IndexUnavailable
from memstream.wiring.processors import PROCESSORS, build_qdrant_projection, create_processor
from processors.qdrant_projection import NAME, QdrantProjection, entry_payload, plan
from sinks.embeddings.bm25 import Bm25Sparse
from sinks.embeddings.minilm import OfflineMiniLM
from sinks.qdrant.edge import QdrantEdgeIndex
from streams.runtime.outages import is_outage
from streams.runtime.processor import InvalidMessage
from tests.fakes.outage import Outage
from tests.processors.projection_support import T0, entry, key_of, record, tombstone, upsert, value_of

MODEL = "all-MiniLM-L6-v2-q8"
ACME = CollectionRef(environment="test", account_id="acme", model_id=MODEL)
GLOBEX = CollectionRef(environment="test", account_id="globex", model_id=MODEL)


def test_the_latest_record_of_an_entry_wins_within_a_batch() -> None:
    a1, a2 = entry(1, "first"), entry(1, "second")
    b, c = entry(2, "b"), entry(3, "c")
    result = plan(
        [
            upsert(a1, 0),
            upsert(b, 1),
            upsert(a2, 2, version=2),
            upsert(c, 3),
            tombstone(c, 4),
            tombstone(b, 5),
            upsert(b, 6, version=3),
        ],
        MODEL,
        T0,
    )
    assert result.upserts == {ACME: [a2, b]}
    assert result.deletes == {ACME: [c.entry_id]}


def test_upserts_and_deletes_are_grouped_per_collection() -> None:
    a, g, p = entry(1, "a"), entry(2, "g", account="globex"), entry(3, "p", environment="prod")
    result = plan([upsert(a, 0), upsert(g, 1), tombstone(p, 2)], MODEL, T0)
    assert result.upserts == {ACME: [a], GLOBEX: [g]}
    assert result.deletes == {
        CollectionRef(environment="prod", account_id="acme", model_id=MODEL): [p.entry_id]
    }


def test_entries_expired_at_processing_time_are_deleted_not_indexed() -> None:
    expired = entry(1, "old", expires_at=T0 - timedelta(seconds=1))
    due_now = entry(2, "due", expires_at=T0)
    later = entry(3, "later", expires_at=T0 + timedelta(days=1))
    result = plan([upsert(expired, 0), upsert(due_now, 1), upsert(later, 2)], MODEL, T0)
    assert result.upserts == {ACME: [later]}
    assert result.deletes == {ACME: [expired.entry_id, due_now.entry_id]}


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        (None, value_of(entry(1, "x")), "bad memory.entries key"),
        (b"test/acme", value_of(entry(1, "x")), "bad memory.entries key"),
        (b"\xff\xfe/a/b", None, "bad memory.entries key"),
        (key_of(entry(1, "x")), b"not json", "bad EntryEvent value"),
        (key_of(entry(1, "x")), b'{"schema_version": 2, "version": 1, "entry": {}}', "bad EntryEvent value"),
        (
            key_of(entry(1, "x")),
            value_of(entry(1, "x")).replace(b'"version":1', b'"version":0'),
            "bad EntryEvent value",
        ),
        (key_of(entry(2, "x")), value_of(entry(1, "x")), "under key"),
        (key_of(entry(1, "x", account="globex")), value_of(entry(1, "x")), "under key"),
    ],
    ids=[
        "no-key",
        "short-key",
        "non-utf8-key",
        "not-json",
        "schema-v2",
        "version-0",
        "other-entry",
        "other-account",
    ],
)
def test_malformed_records_raise_invalid_message(key: bytes | None, value: bytes | None, reason: str) -> None:
    bad = record(key, value, 7)
    with pytest.raises(InvalidMessage, match=reason) as caught:
        plan([upsert(entry(5, "fine"), 6), bad], MODEL, T0)
    assert caught.value.record is bad


def test_registered_with_a_declared_dead_letter_topic(tmp_path: Path) -> None:
    assert NAME in PROCESSORS
    processor = create_processor(NAME, Settings(data_dir=tmp_path))
    assert isinstance(processor, QdrantProjection) and processor.source_topics == ("memory.entries",)


@pytest.fixture
async def edge(tmp_path: Path) -> AsyncIterator[QdrantEdgeIndex]:
    index = QdrantEdgeIndex(tmp_path / "qdrant")
    yield index
    await index.close()


@pytest.fixture(scope="module")
def embedder() -> OfflineMiniLM:
    return OfflineMiniLM()


async def test_processing_a_batch_twice_gives_the_same_index(
    edge: QdrantEdgeIndex, embedder: OfflineMiniLM
) -> None:
    now = T0 + timedelta(hours=1)
    projection = QdrantProjection(edge, embedder, Bm25Sparse(), clock=lambda: now, close_index=False)
    tea = entry(1, "The user prefers green tea.", category="user_profile")
    deploy = entry(2, "Deploys happen on Fridays.")
    gone = entry(3, "Obsolete fact.")
    expired = entry(
        4, "Short-lived observation.", category="observation", expires_at=now - timedelta(minutes=1)
    )
    private = entry(5, "Alice's locker code is 1234.", visibility="private", user_id="alice")
    other = entry(6, "Globex uses Oracle.", account="globex")
    first = [
        upsert(tea, 0),
        upsert(deploy, 1),
        upsert(gone, 2),
        upsert(expired, 3),
        upsert(private, 4),
        upsert(other, 5),
    ]
    second = [
        tombstone(gone, 6),
        upsert(deploy.model_copy(update={"content": "Deploys happen on Mondays."}), 7, 2),
    ]
    for _ in range(2):  # at-least-once: the same batches again change nothing
        await projection.process(first)
        await projection.process(second)
        points = await edge.points(ACME)
        assert set(points) == {tea.entry_id, deploy.entry_id, private.entry_id}
        assert points[tea.entry_id] == {**entry_payload(tea), "entry_id": tea.entry_id}
        assert set(await edge.points(GLOBEX)) == {other.entry_id}
    dense, sparse = (await embedder.embed(["mondays deploy"]))[0], Bm25Sparse().encode_query("mondays deploy")
    found = await edge.hybrid_query(ACME, dense, sparse, IndexFilter(agent_id="bot", user_id=None), 5)
    assert found[0].entry_id == deploy.entry_id
    assert private.entry_id not in {f.entry_id for f in found}


def test_a_worker_alone_opens_and_closes_its_own_index(tmp_path: Path) -> None:
    processor = build_qdrant_projection(Settings(data_dir=tmp_path))
    assert isinstance(processor.sink.index, QdrantEdgeIndex) and processor.close_index


async def test_with_the_node_engines_the_index_is_shared_and_left_open(tmp_path: Path) -> None:
    from memstream.engines import Engines

    engines = Engines(Settings(data_dir=tmp_path))
    processor = create_processor(NAME, Settings(data_dir=tmp_path), engines=engines)
    assert isinstance(processor, QdrantProjection)
    assert processor.sink.index is engines.index() and processor.embedder is engines.embedder()
    await processor.stop()
    # still open: the processor left the shared index to its owner
    e = entry(1, "the shared index still takes writes")
    await processor.sink.write(plan([upsert(e, 1)], MODEL, T0))
    index = engines.index()
    assert isinstance(index, QdrantEdgeIndex)
    assert (
        await index.count(CollectionRef(environment=e.environment, account_id=e.account_id, model_id=MODEL))
        == 1
    )
    await engines.close()


def failure(message: str, cause: Exception | None) -> IndexUnavailable:
    try:
        raise IndexUnavailable(message) from cause
    except IndexUnavailable as exc:
        return exc


async def test_a_server_outage_is_raised_as_an_outage_for_the_runtime_to_wait_out(
    edge: QdrantEdgeIndex, embedder: OfflineMiniLM
) -> None:
    """Regression: a Qdrant server down for longer than the runtime's retries crashed the
    projection (it had no outage handling). The index's error, raised from a connection-class
    error, is an outage (`is_outage` walks the cause), which the runtime retries without limit; an
    index error that is not an outage stays what it is."""
    down = failure("qdrant http://qdrant:6333 (points)", httpx.ConnectError("connection refused"))
    switched = Outage(edge, methods={"upsert", "delete"}, error=down)
    projection = QdrantProjection(switched.proxy, embedder, Bm25Sparse(), clock=lambda: T0, close_index=False)
    tea = entry(1, "The user prefers green tea.")
    with pytest.raises(IndexUnavailable, match="qdrant http://qdrant:6333") as raised:
        await projection.process([upsert(tea, 0)])
    assert is_outage(raised.value)
    switched.fail(
        failure("qdrant (points)", UnexpectedResponse(503, "Service Unavailable", b"", httpx.Headers()))
    )
    with pytest.raises(IndexUnavailable) as raised:
        await projection.process([upsert(tea, 0)])
    assert is_outage(raised.value)
    switched.fail(failure("qdrant edge: wrong vector size", ValueError("dimension 3 != 384")))
    with pytest.raises(IndexUnavailable) as other:
        await projection.process([upsert(tea, 0)])
    assert not is_outage(other.value)
    switched.restore()
    await projection.process([upsert(tea, 0)])
    assert set(await edge.points(ACME)) == {tea.entry_id}
