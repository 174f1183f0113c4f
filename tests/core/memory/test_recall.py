"""Recall against real Postgres and both real index adapters (Qdrant Edge, qdrant-client local)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import asyncpg
import pytest

from core.errors import InvalidInput
from core.memory.models import MemoryEntry
from core.memory.recall import Recaller, boosted, rank
from core.memory.service import MemoryService
from core.stores.vectors import IndexFilter, VectorIndex
from sinks.embeddings.bm25 import Bm25Sparse
from sinks.embeddings.minilm import OfflineMiniLM
from sinks.qdrant.server import QdrantServerIndex
from tests.sinks.qdrant.adapters import KINDS, open_adapter

from .entries import make_entry
from .helpers import FakeClock, legacy_shared_profile, scope
from .index_helpers import MODEL_ID, closed_port, collection, down_index, project

ALICE = scope("alice")
BOB = scope("bob")


@pytest.fixture(params=KINDS)
async def index(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[VectorIndex]:
    opened = open_adapter(request.param, tmp_path)
    yield opened
    await opened.close()


def recaller_of(
    service: MemoryService, embedder: OfflineMiniLM, sparse: Bm25Sparse, index: VectorIndex
) -> Recaller:
    return Recaller(service, embedder, sparse, index, model_id=MODEL_ID)


async def store(
    service: MemoryService,
    key: str,
    content: str,
    *,
    user: str | None = "alice",
    visibility: str = "shared",
    category: str = "project_fact",
    importance: float = 0.5,
) -> MemoryEntry:
    result = await service.store(
        scope(user), key, content, category, scope_visibility=visibility, importance=importance
    )
    return result.entry


def test_rank_applies_the_importance_boost() -> None:
    low, high = make_entry("low", importance=0.0), make_entry("high", importance=1.0)
    hits = rank([(low, 0.0164), (high, 0.0160)], 5)
    assert [h.entry.entry_id for h in hits] == ["high", "low"]
    assert hits[0].score == pytest.approx(0.0160) and hits[1].score == pytest.approx(0.0164 * 0.8)
    assert boosted(1.0, 0.5) == pytest.approx(0.9)
    assert rank([(low, 1.0), (high, 1.0)], 1) == [hits[0]._replace(score=1.0)]


def test_a_higher_importance_never_ranks_an_entry_lower() -> None:
    """DBSF scores are not clipped: a candidate far below its lists' means scores below 0, and a
    plain product would then rank the more important entry lower."""
    low, high = make_entry("low", importance=0.0), make_entry("high", importance=1.0)
    hits = rank([(low, -0.2), (high, -0.2)], 5)
    assert [h.entry.entry_id for h in hits] == ["high", "low"]
    assert (hits[0].score, hits[1].score) == (pytest.approx(-0.2), pytest.approx(-0.25))
    for score in (-1.5, -0.01, 0.0, 0.3, 1.8):
        boosts = [boosted(score, importance / 10) for importance in range(11)]
        assert boosts == sorted(boosts)
        assert boosted(score, 0.5) == pytest.approx(score * 0.9 if score >= 0 else score / 0.9)


async def test_recall_ranks_by_boosted_index_score(
    service: MemoryService, embedder: OfflineMiniLM, sparse: Bm25Sparse, index: VectorIndex
) -> None:
    text = "The staging database is restored from backups every Sunday night."
    low = await store(service, "db.low", text, importance=0.0)
    high = await store(service, "db.high", text, importance=1.0)
    other = await store(service, "cat", "The office cat is called Biscuit.", importance=0.9)
    await project(index, embedder, sparse, [low, high, other])

    result = await recaller_of(service, embedder, sparse, index).recall(
        ALICE, "when is the database restored?"
    )
    assert result.path == "qdrant" and result.fallback_reason is None
    ids = [hit.entry.entry_id for hit in result.hits]
    assert ids[:2] == [high.entry_id, low.entry_id]
    dense = (await embedder.embed(["when is the database restored?"]))[0]
    raw = await index.hybrid_query(
        collection(low),
        dense,
        sparse.encode_query("when is the database restored?"),
        IndexFilter(agent_id="bot", user_id="alice"),
        20,
    )
    raw_scores = {item.entry_id: item.score for item in raw}
    for hit in result.hits:
        assert hit.score == pytest.approx(raw_scores[hit.entry.entry_id] * (0.8 + hit.entry.importance * 0.2))
    assert [h.score for h in result.hits] == sorted((h.score for h in result.hits), reverse=True)


async def test_importance_still_lifts_an_entry_the_index_scores_below_zero(
    service: MemoryService, embedder: OfflineMiniLM, sparse: Bm25Sparse, index: VectorIndex
) -> None:
    """Forty entries close to the query and two unrelated ones (same text, importance 0 and 1):
    DBSF puts the unrelated ones more than 3 sd below the dense list's mean, a score below 0. The
    key prefix keeps just those two; the important one still comes first."""
    everyone = scope(None)
    tea = [await store(service, f"tea.{i}", f"Green tea fact number {i}.", user=None) for i in range(40)]
    text = "The office cat is called Biscuit."
    low = await store(service, "odd.low", text, user=None, importance=0.0)
    high = await store(service, "odd.high", text, user=None, importance=1.0)
    await project(index, embedder, sparse, [*tea, low, high])
    raw = await index.hybrid_query(
        collection(low),
        (await embedder.embed(["green tea"]))[0],
        sparse.encode_query("green tea"),
        IndexFilter(agent_id="bot", user_id=None),
        80,
    )
    raw_scores = {item.entry_id: item.score for item in raw}
    assert raw_scores[low.entry_id] == pytest.approx(raw_scores[high.entry_id])
    assert raw_scores[low.entry_id] < 0 < min(raw_scores[e.entry_id] for e in tea)

    result = await recaller_of(service, embedder, sparse, index).recall(
        everyone, "green tea", limit=20, key_prefix="odd."
    )
    assert result.path == "qdrant"
    assert [hit.entry.entry_id for hit in result.hits] == [high.entry_id, low.entry_id]
    assert result.hits[0].score > result.hits[1].score


async def test_limit_default_cap_and_bounds(
    service: MemoryService, embedder: OfflineMiniLM, sparse: Bm25Sparse, index: VectorIndex
) -> None:
    entries = [await store(service, f"tea.{i}", f"Green tea fact number {i}.") for i in range(22)]
    await project(index, embedder, sparse, entries)
    recaller = recaller_of(service, embedder, sparse, index)
    for bad in (0, -1, True, 2.5):
        with pytest.raises(InvalidInput) as err:
            await recaller.recall(ALICE, "green tea", limit=bad)  # type: ignore[arg-type]
        assert err.value.field == "limit"
    with pytest.raises(InvalidInput) as err:
        await recaller.recall(ALICE, "   ")
    assert err.value.field == "query"
    with pytest.raises(InvalidInput) as err:
        await recaller.recall(ALICE, "tea", category="diary")
    assert err.value.field == "category"
    default = await recaller.recall(ALICE, "green tea")
    assert (len(default.hits), default.limit, default.note) == (5, 5, None)
    twenty = await recaller.recall(ALICE, "green tea", limit=20)
    assert (len(twenty.hits), twenty.limit, twenty.note) == (20, 20, None)
    for above in (21, 1000):  # capped at 20, not an error, and said so
        capped = await recaller.recall(ALICE, "green tea", limit=above)
        assert (len(capped.hits), capped.limit) == (20, 20)
        assert capped.note is not None and f"limit {above} was capped at 20" in capped.note
    down = await recaller_of(service, embedder, sparse, down_index().proxy).recall(
        ALICE, "green tea", limit=21
    )
    assert (down.path, len(down.hits), down.limit) == ("postgres_fts", 20, 20)
    assert len((await recaller.recall(ALICE, "green tea", limit=1)).hits) == 1


async def test_falls_back_to_postgres_when_the_index_is_down(
    service: MemoryService, embedder: OfflineMiniLM, sparse: Bm25Sparse
) -> None:
    tea = await store(service, "tea", "The user prefers green tea.", importance=1.0)
    await store(service, "bikes", "The user rides a blue bike.")
    down = down_index()
    result = await recaller_of(service, embedder, sparse, down.proxy).recall(ALICE, "which tea?")
    assert down.calls["hybrid_query"] == 1
    assert result.path == "postgres_fts"
    assert result.fallback_reason is not None and "IndexUnavailable" in result.fallback_reason
    assert [hit.entry.entry_id for hit in result.hits] == [tea.entry_id]
    assert result.hits[0].score > 0

    unreachable = QdrantServerIndex(f"http://127.0.0.1:{closed_port()}", timeout_s=1)
    try:
        result = await recaller_of(service, embedder, sparse, unreachable).recall(ALICE, "which tea?")
    finally:
        await unreachable.close()
    assert result.path == "postgres_fts"
    assert [hit.entry.entry_id for hit in result.hits] == [tea.entry_id]


async def test_falls_back_when_the_index_has_nothing(
    service: MemoryService, embedder: OfflineMiniLM, sparse: Bm25Sparse, index: VectorIndex
) -> None:
    tea = await store(service, "tea", "The user prefers green tea.")  # not projected yet (lag)
    result = await recaller_of(service, embedder, sparse, index).recall(ALICE, "green tea")
    assert result.path == "postgres_fts"
    assert result.fallback_reason == "the index returned no usable entries"
    assert [hit.entry.entry_id for hit in result.hits] == [tea.entry_id]


async def test_phase_two_drops_another_users_private_entry(
    service: MemoryService, embedder: OfflineMiniLM, sparse: Bm25Sparse, index: VectorIndex
) -> None:
    secret = await store(service, "tea.alice", "Alice drinks green tea at night.", visibility="private")
    shared = await store(service, "tea.office", "The office kitchen has green tea.")
    assert secret.visibility == "private" and secret.user_id == "alice"
    # A stale projection that still thinks the entry is shared: the index hands its id to bob.
    await project(index, embedder, sparse, [secret], visibility="shared", user_id=None)
    await project(index, embedder, sparse, [shared])
    recaller = recaller_of(service, embedder, sparse, index)
    dense = (await embedder.embed(["green tea"]))[0]
    raw = await index.hybrid_query(
        collection(secret),
        dense,
        sparse.encode_query("green tea"),
        IndexFilter(agent_id="bot", user_id="bob"),
        20,
    )
    assert secret.entry_id in {item.entry_id for item in raw}  # phase 1 hands it out

    for_bob = await recaller.recall(BOB, "green tea")
    assert for_bob.path == "qdrant"
    assert [hit.entry.entry_id for hit in for_bob.hits] == [shared.entry_id]
    anonymous = await recaller.recall(scope(None), "green tea")
    assert [hit.entry.entry_id for hit in anonymous.hits] == [shared.entry_id]
    for_alice = await recaller.recall(ALICE, "green tea")
    assert {hit.entry.entry_id for hit in for_alice.hits} == {secret.entry_id, shared.entry_id}


async def test_expired_entries_are_never_returned(
    service: MemoryService,
    clock: FakeClock,
    embedder: OfflineMiniLM,
    sparse: Bm25Sparse,
    index: VectorIndex,
) -> None:
    seen = await store(service, "seen", "The user saw a red fox today.", category="observation")
    assert seen.expires_at == clock.now + timedelta(days=30)
    await project(index, embedder, sparse, [seen])
    recaller = recaller_of(service, embedder, sparse, index)
    assert [h.entry.entry_id for h in (await recaller.recall(ALICE, "red fox")).hits] == [seen.entry_id]

    clock.advance(days=30)
    result = await recaller.recall(ALICE, "red fox")
    assert result.hits == []
    assert result.path == "postgres_fts"  # the index still has it; phase 2 dropped it, FTS too


async def test_filters_and_recall_counters(
    service: MemoryService,
    clock: FakeClock,
    embedder: OfflineMiniLM,
    sparse: Bm25Sparse,
    index: VectorIndex,
) -> None:
    a = await store(service, "project.deadline", "The tea shop project is due in March.")
    b = await store(service, "user.tea", "The user likes tea.", category="user_profile", importance=0.8)
    await project(index, embedder, sparse, [a, b])
    recaller = recaller_of(service, embedder, sparse, index)

    by_prefix = await recaller.recall(ALICE, "tea", key_prefix="project.")
    assert [h.entry.entry_id for h in by_prefix.hits] == [a.entry_id]
    by_category = await recaller.recall(ALICE, "tea", category="user_profile")
    assert [h.entry.entry_id for h in by_category.hits] == [b.entry_id]
    assert by_category.path == "qdrant"

    clock.advance(minutes=5)
    await recaller.recall(ALICE, "tea")
    await recaller.counts.drain()  # written behind the answer
    a_now, b_now = await service.get(ALICE, a.entry_id), await service.get(ALICE, b.entry_id)
    assert (a_now.recall_count, b_now.recall_count) == (2, 2)
    assert a_now.last_recalled_at == clock.now and b_now.last_recalled_at == clock.now


async def test_a_legacy_shared_profile_fact_is_recalled_for_nobody(
    service: MemoryService,
    embedder: OfflineMiniLM,
    sparse: Bm25Sparse,
    index: VectorIndex,
    pool: asyncpg.Pool,
) -> None:
    """Issue 9, finding 12: "my name is Mallory", stored shared by a user-less thread before profile
    facts needed a user, is in the index and in Postgres; neither recall path returns it to anyone."""
    await legacy_shared_profile(pool, "user.name", "The user's name is Mallory.")
    row = await pool.fetchrow("SELECT entry_id, created_at FROM memory_entries WHERE key = 'user.name'")
    legacy = make_entry(
        str(row["entry_id"]),
        key="user.name",
        content="The user's name is Mallory.",
        created_at=row["created_at"],
    )
    await project(index, embedder, sparse, [legacy])
    fact = await store(service, "bot.name", "The user's assistant is named Mallory Bot.")
    await project(index, embedder, sparse, [fact])
    for who in (BOB, scope(None)):
        for searched in (index, down_index().proxy):
            result = await recaller_of(service, embedder, sparse, searched).recall(
                who, "what is the user's name?"
            )
            assert result.path == ("qdrant" if searched is index else "postgres_fts")
            assert [hit.entry.key for hit in result.hits] == ["bot.name"], (who, result.path)
    listed = await pool.fetchval("SELECT count(*) FROM memory_entries WHERE key = 'user.name'")
    assert listed == 1  # left for operators to clean up, never deleted by a read
