"""`InMemoryVectorIndex`: the `VectorIndex` (`core.stores.vectors`) in memory.

What the contract suite (`tests/core/stores/test_vectors.py`) asserts of every index holds here:
collections are separate per (environment, account, model); upserts replace by entry id and
deletes of unknown ids or collections are fine; a query sees only `where`'s agent, its shared
entries plus the user's private ones, and `where.category` when given. Ranking is the adapters'
shape, simplified: a dense prefetch (cosine) and a sparse prefetch (dot product, points sharing a
term only) of `max(50, 4 * limit)` candidates each, fused with DBSF like the adapters'
default (`sinks.qdrant.layout`: each list's scores mapped by its mean +- 3 sample sd, summed);
the contract asserts membership and the order of clear winners, not scores.

`collections` may be shared by several instances: the same data opened again. After `close`,
every call raises IndexUnavailable (like an index that was closed).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from core.embeddings.base import SparseVector
from core.stores.vectors import CollectionRef, IndexFilter, IndexPoint, IndexUnavailable, ScoredId

Collections = dict[CollectionRef, dict[str, IndexPoint]]


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return sum(x * y for x, y in zip(a, b, strict=True)) / norm if norm else 0.0


def _dot(a: SparseVector, b: SparseVector) -> float:
    weights = dict(zip(a.indices, a.values, strict=True))
    return sum(weights.get(i, 0.0) * v for i, v in zip(b.indices, b.values, strict=True))


def _distribution_normalised(scored: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """DBSF's per-list step: `(s - (mean - 3 sd)) / (6 sd)`, 0.5 for a lone or all-equal list."""
    if len(scored) < 2:
        return [(entry_id, 0.5) for entry_id, _ in scored]
    mean = sum(score for _, score in scored) / len(scored)
    sd = math.sqrt(sum((score - mean) ** 2 for _, score in scored) / (len(scored) - 1))
    if sd == 0:
        return [(entry_id, 0.5) for entry_id, _ in scored]
    return [(entry_id, (score - mean + 3 * sd) / (6 * sd)) for entry_id, score in scored]


def visible(point: IndexPoint, where: IndexFilter) -> bool:
    """`where`'s rule: the agent's shared entries, plus the user's private ones, in the category."""
    payload = point.payload
    if payload.get("agent_id") != where.agent_id:
        return False
    if where.category is not None and payload.get("category") != where.category:
        return False
    if payload.get("visibility") == "shared":
        return True
    return (
        where.user_id is not None
        and payload.get("visibility") == "private"
        and payload.get("user_id") == where.user_id
    )


class InMemoryVectorIndex:
    """See the module doc."""

    def __init__(self, collections: Collections | None = None) -> None:
        self.collections: Collections = {} if collections is None else collections
        self.closed = False

    def _open(self) -> None:
        if self.closed:
            raise IndexUnavailable("index closed")

    async def upsert(self, collection: CollectionRef, points: Sequence[IndexPoint]) -> None:
        self._open()
        stored = self.collections.setdefault(collection, {})
        for point in points:
            stored[point.entry_id] = point

    async def delete(self, collection: CollectionRef, entry_ids: Sequence[str]) -> None:
        self._open()
        stored = self.collections.get(collection, {})
        for entry_id in entry_ids:
            stored.pop(entry_id, None)

    async def hybrid_query(
        self,
        collection: CollectionRef,
        dense: Sequence[float],
        sparse: SparseVector,
        where: IndexFilter,
        limit: int,
    ) -> list[ScoredId]:
        self._open()
        if limit < 1:
            return []
        candidates = max(50, 4 * limit)
        seen = [p for p in self.collections.get(collection, {}).values() if visible(p, where)]
        semantic = [(p.entry_id, _cosine(dense, p.dense)) for p in seen]
        dense_scores = sorted(semantic, key=lambda item: -item[1])[:candidates]
        lexical = [(p.entry_id, _dot(sparse, p.sparse)) for p in seen]
        sparse_scores = [item for item in sorted(lexical, key=lambda item: -item[1]) if item[1] > 0][
            :candidates
        ]
        fused: dict[str, float] = {}
        for ranking in (dense_scores, sparse_scores):
            for entry_id, score in _distribution_normalised(ranking):
                fused[entry_id] = fused.get(entry_id, 0.0) + score
        best = sorted(fused.items(), key=lambda item: (-item[1], item[0]))[:limit]
        return [ScoredId(entry_id=entry_id, score=score) for entry_id, score in best]

    async def close(self) -> None:
        self.closed = True
