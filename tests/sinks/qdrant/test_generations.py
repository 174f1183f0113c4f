"""Rebuild generations on both adapters: staged writes stay invisible until `swap_in`, live writes
during a rebuild are mirrored (and win over staged ones), a swap drops every other generation, a
discarded rebuild leaves the live collections untouched, and the swap survives a reopen."""

from __future__ import annotations

from typing import cast

import pytest

from core.embeddings.base import SparseVector
from core.stores.vectors import CollectionRef, IndexFilter, IndexPoint
from sinks.qdrant.edge import QdrantEdgeIndex
from sinks.qdrant.generations import (
    RebuildInProgress,
    base_name,
    generation_name,
    generation_of,
)
from sinks.qdrant.server import QdrantServerIndex
from tests.sinks.qdrant.conftest import OpenIndex

ACME = CollectionRef(environment="test", account_id="acme", model_id="m")
GLOBEX = CollectionRef(environment="test", account_id="globex", model_id="m")
WHERE = IndexFilter(agent_id="bot", user_id=None)

Index = QdrantEdgeIndex | QdrantServerIndex


def point(entry_id: str, n: int, note: str = "") -> IndexPoint:
    return IndexPoint(
        entry_id=entry_id,
        dense=(1.0, float(n), 0.5, 0.25),
        sparse=SparseVector(indices=(n,), values=(1.0,)),
        payload={"agent_id": "bot", "user_id": None, "visibility": "shared", "category": "c", "key": note},
    )


async def opened(open_index: OpenIndex) -> Index:
    return cast(Index, await open_index())


async def keys(index: Index, ref: CollectionRef, generation: str | None = None) -> dict[str, object]:
    return {e: p["key"] for e, p in (await index.points(ref, generation=generation)).items()}


def test_names_carry_the_generation() -> None:
    name = generation_name(ACME, "g0123abcd")
    assert name == generation_name(ACME, "") + "_g0123abcd"
    assert (generation_of(name), base_name(name)) == ("g0123abcd", generation_name(ACME, ""))
    assert generation_of(generation_name(ACME, "")) == ""
    with pytest.raises(ValueError, match="not an index generation"):
        generation_name(ACME, "../x")


async def test_a_swap_replaces_every_collection_and_survives_a_reopen(open_index: OpenIndex) -> None:
    index = await opened(open_index)
    await index.upsert(ACME, [point("a", 1, "old"), point("stale", 2, "old")])
    await index.upsert(GLOBEX, [point("g", 3, "old")])
    generation = await index.begin_rebuild()
    with pytest.raises(RebuildInProgress):
        await index.begin_rebuild()
    await index.upsert(ACME, [point("a", 1, "new"), point("b", 4, "new")], generation=generation)
    # staged points are invisible to the live reads until the swap
    assert await keys(index, ACME) == {"a": "old", "stale": "old"}
    assert await keys(index, ACME, generation) == {"a": "new", "b": "new"}
    await index.swap_in(generation)
    assert await keys(index, ACME) == {"a": "new", "b": "new"}
    assert await keys(index, GLOBEX) == {}  # the rebuild saw no globex entry
    assert {
        s.entry_id
        for s in await index.hybrid_query(
            ACME, [1.0, 1.0, 0.5, 0.25], SparseVector(indices=(1,), values=(1.0,)), WHERE, 5
        )
    } == {"a", "b"}
    # after the swap, ordinary writes go to the new generation; a new rebuild can start
    await index.upsert(ACME, [point("c", 5, "after")])
    await index.delete(ACME, ["b"])
    assert await keys(index, ACME) == {"a": "new", "c": "after"}
    await index.close()
    reopened = await opened(open_index)
    assert await keys(reopened, ACME) == {"a": "new", "c": "after"}
    assert await keys(reopened, GLOBEX) == {}
    again = await reopened.begin_rebuild()
    await reopened.discard_rebuild(again)


async def test_live_writes_during_a_rebuild_are_mirrored_and_win(open_index: OpenIndex) -> None:
    index = await opened(open_index)
    await index.upsert(ACME, [point("a", 1, "v1"), point("b", 2, "v1"), point("gone", 3, "v1")])
    generation = await index.begin_rebuild()
    # the live projection moves on while the rebuild is still writing what it read earlier
    await index.upsert(ACME, [point("a", 1, "v2")])
    await index.delete(ACME, ["gone"])
    await index.upsert(
        ACME, [point("a", 1, "v1"), point("b", 2, "v1"), point("gone", 3, "v1")], generation=generation
    )
    assert await keys(index, ACME, generation) == {"a": "v2", "b": "v1"}
    assert await keys(index, ACME) == {"a": "v2", "b": "v1"}
    await index.swap_in(generation)
    assert await keys(index, ACME) == {"a": "v2", "b": "v1"}


async def test_a_discarded_rebuild_leaves_the_live_collections_alone(open_index: OpenIndex) -> None:
    index = await opened(open_index)
    await index.upsert(ACME, [point("a", 1, "live")])
    generation = await index.begin_rebuild()
    await index.upsert(ACME, [point("x", 9, "staged")], generation=generation)
    await index.upsert(GLOBEX, [point("y", 8, "staged")], generation=generation)
    await index.discard_rebuild(generation)
    await index.discard_rebuild(generation)  # idempotent
    assert await keys(index, ACME) == {"a": "live"}
    assert await index.count(ACME, generation=generation) == 0
    assert await index.count(GLOBEX, generation=generation) == 0
    with pytest.raises(ValueError, match="not the running rebuild"):
        await index.upsert(ACME, [point("z", 7)], generation=generation)
    with pytest.raises(ValueError, match="not the running rebuild"):
        await index.swap_in(generation)
    # live writes are no longer mirrored anywhere
    await index.upsert(ACME, [point("b", 2, "live")])
    assert await keys(index, ACME) == {"a": "live", "b": "live"}
