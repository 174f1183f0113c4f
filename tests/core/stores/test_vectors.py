"""The `VectorIndex` contract (`core.stores.vectors`), on every index: the in-memory fake, Qdrant
Edge and qdrant-client (local mode, the server code path). Asserted: which entries a query may
return (tenancy, visibility, category), idempotent writes, separate collections, data that
survives a reopen, and the clear winner of a query (not scores). Adapter-only details are in
`tests/sinks/qdrant/`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from core.stores.vectors import CollectionRef, IndexFilter, IndexPoint, VectorIndex
from sinks.embeddings.bm25 import Bm25Sparse
from sinks.embeddings.minilm import OfflineMiniLM
from tests.fakes.vectors import Collections, InMemoryVectorIndex
from tests.sinks.qdrant.adapters import KINDS, open_adapter

OpenIndex = Callable[[], Awaitable[VectorIndex]]


@pytest.fixture(params=["memory", *KINDS])
async def open_index(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[OpenIndex]:
    """Opens the index under test on its data (one tmp directory, or one in-memory collection
    map): calling it again after closing reopens the same data."""
    opened: list[VectorIndex] = []
    data: Collections = {}

    async def open_() -> VectorIndex:
        index: VectorIndex = (
            InMemoryVectorIndex(data) if request.param == "memory" else open_adapter(request.param, tmp_path)
        )
        opened.append(index)
        return index

    yield open_
    for index in opened:
        await index.close()


REF = CollectionRef(environment="test", account_id="acme", model_id="all-MiniLM-L6-v2-int8")

FACTS = {
    "e-tea": ("The user prefers green tea over coffee in the morning.", "shared", None, "user_profile"),
    "e-deploy": ("Deployments to production happen every Friday at 5pm.", "shared", None, "project_fact"),
    "e-cat": (
        "The user's cat is named Biscuit and is afraid of thunderstorms.",
        "shared",
        None,
        "observation",
    ),
    "e-db": (
        "The project stores invoices in PostgreSQL 16 with logical replication.",
        "shared",
        None,
        "project_fact",
    ),
    "e-alice": ("Alice's passport number ends in 4471.", "private", "alice", "user_profile"),
    "e-bob": ("Bob is allergic to peanuts and shellfish.", "private", "bob", "user_profile"),
}


def payload(agent: str, visibility: str, user: str | None, category: str) -> dict[str, Any]:
    return {
        "agent_id": agent,
        "user_id": user,
        "visibility": visibility,
        "category": category,
        "key": "k",
        "importance": 0.5,
        "expires_at": None,
    }


async def points(
    embedder: OfflineMiniLM,
    sparse: Bm25Sparse,
    facts: Mapping[str, tuple[str, str, str | None, str]],
    agent: str = "bot",
) -> list[IndexPoint]:
    texts = [f[0] for f in facts.values()]
    dense = await embedder.embed(texts)
    return [
        IndexPoint(
            entry_id=entry_id,
            dense=tuple(vector),
            sparse=sparse.encode_document(text),
            payload=payload(agent, visibility, user, category),
        )
        for (entry_id, (text, visibility, user, category)), vector in zip(facts.items(), dense, strict=True)
    ]


async def query(
    index: VectorIndex,
    embedder: OfflineMiniLM,
    sparse: Bm25Sparse,
    text: str,
    where: IndexFilter,
    ref: CollectionRef = REF,
    limit: int = 10,
) -> list[str]:
    (vector,) = await embedder.embed([text])
    found = await index.hybrid_query(ref, vector, sparse.encode_query(text), where, limit)
    scores = [s.score for s in found]
    assert scores == sorted(scores, reverse=True)
    return [s.entry_id for s in found]


async def test_hybrid_query_ranks_the_closest_entry_first(
    open_index: OpenIndex, embedder: OfflineMiniLM, sparse: Bm25Sparse
) -> None:
    index = await open_index()
    await index.upsert(REF, await points(embedder, sparse, FACTS))
    everyone = IndexFilter(agent_id="bot", user_id=None)
    # semantic only (no word in common with any entry), lexical only (a name), and both
    assert (await query(index, embedder, sparse, "favourite hot beverage", everyone))[0] == "e-tea"
    assert (await query(index, embedder, sparse, "when do we deploy to prod", everyone))[0] == "e-deploy"
    assert (await query(index, embedder, sparse, "Biscuit", everyone))[0] == "e-cat"  # lexical
    assert (await query(index, embedder, sparse, "which database holds invoices", everyone))[0] == "e-db"
    # a query of stop words only has no sparse part: the dense prefetch still answers
    assert sparse.encode_query("the of and").indices == ()
    assert len(await query(index, embedder, sparse, "the of and", everyone, limit=2)) == 2


async def test_private_entries_only_reach_their_user_and_shared_ones_everyone(
    open_index: OpenIndex, embedder: OfflineMiniLM, sparse: Bm25Sparse
) -> None:
    index = await open_index()
    await index.upsert(REF, await points(embedder, sparse, FACTS))
    shared = {"e-tea", "e-deploy", "e-cat", "e-db"}
    for user, own in ((None, set()), ("alice", {"e-alice"}), ("bob", {"e-bob"}), ("carol", set())):
        where = IndexFilter(agent_id="bot", user_id=user)
        for text in ("passport number", "allergic to peanuts", "tea"):
            assert set(await query(index, embedder, sparse, text, where)) == shared | own
    # another agent of the same account sees nothing of this agent's entries
    assert await query(index, embedder, sparse, "tea", IndexFilter(agent_id="other", user_id="alice")) == []


async def test_category_filter(open_index: OpenIndex, embedder: OfflineMiniLM, sparse: Bm25Sparse) -> None:
    index = await open_index()
    await index.upsert(REF, await points(embedder, sparse, FACTS))
    where = IndexFilter(agent_id="bot", user_id="alice", category="user_profile")
    assert set(await query(index, embedder, sparse, "tea", where)) == {"e-tea", "e-alice"}
    where = IndexFilter(agent_id="bot", user_id="alice", category="project_fact")
    assert set(await query(index, embedder, sparse, "tea", where)) == {"e-deploy", "e-db"}


async def test_upsert_replace_and_delete_are_idempotent(
    open_index: OpenIndex, embedder: OfflineMiniLM, sparse: Bm25Sparse
) -> None:
    index = await open_index()
    everyone = IndexFilter(agent_id="bot", user_id=None)
    batch = await points(embedder, sparse, FACTS)
    await index.upsert(REF, batch)
    await index.upsert(REF, batch)  # again: same points, no duplicates
    assert len(await query(index, embedder, sparse, "tea", IndexFilter(agent_id="bot", user_id="alice"))) == 5
    # replace: same entry id, new content and payload
    replaced = {"e-tea": ("The user switched to espresso, double shot.", "shared", None, "observation")}
    await index.upsert(REF, await points(embedder, sparse, replaced))
    assert (await query(index, embedder, sparse, "espresso double shot", everyone))[0] == "e-tea"
    where = IndexFilter(agent_id="bot", user_id=None, category="user_profile")
    assert "e-tea" not in await query(index, embedder, sparse, "tea", where)
    # delete, twice, plus an unknown id
    await index.delete(REF, ["e-tea", "e-cat"])
    await index.delete(REF, ["e-tea", "e-cat", "never-existed"])
    assert set(await query(index, embedder, sparse, "tea", everyone)) == {"e-deploy", "e-db"}
    # unknown collections: nothing to find, nothing to delete
    other = CollectionRef(environment="test", account_id="nobody", model_id="m")
    assert await index.hybrid_query(other, [0.1] * 384, sparse.encode_query("tea"), everyone, 5) == []
    await index.delete(other, ["e-tea"])


async def test_collections_are_separate_per_account_environment_and_model(
    open_index: OpenIndex, embedder: OfflineMiniLM, sparse: Bm25Sparse
) -> None:
    index = await open_index()
    refs = [
        REF,
        CollectionRef(environment="test", account_id="globex", model_id=REF.model_id),
        CollectionRef(environment="prod", account_id="acme", model_id=REF.model_id),
        CollectionRef(environment="test", account_id="acme", model_id="other-model"),
    ]
    for n, ref in enumerate(refs):
        facts = {
            f"{ref.account_id}-{ref.environment}-{n}": (
                "The user prefers green tea.",
                "shared",
                None,
                "user_profile",
            )
        }
        await index.upsert(ref, await points(embedder, sparse, facts))
    everyone = IndexFilter(agent_id="bot", user_id=None)
    for n, ref in enumerate(refs):
        assert await query(index, embedder, sparse, "tea", everyone, ref=ref) == [
            f"{ref.account_id}-{ref.environment}-{n}"
        ]


async def test_points_survive_a_reopen(
    open_index: OpenIndex, embedder: OfflineMiniLM, sparse: Bm25Sparse
) -> None:
    index = await open_index()
    await index.upsert(REF, await points(embedder, sparse, FACTS))
    await index.delete(REF, ["e-cat"])
    await index.close()
    reopened = await open_index()
    everyone = IndexFilter(agent_id="bot", user_id="bob")
    assert set(await query(reopened, embedder, sparse, "tea", everyone)) == {
        "e-tea",
        "e-deploy",
        "e-db",
        "e-bob",
    }
    assert (await query(reopened, embedder, sparse, "peanut allergy", everyone))[0] == "e-bob"
