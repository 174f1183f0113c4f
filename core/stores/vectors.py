"""The vector index interface used by the projection processor (writes) and recall (reads).

Collections are per environment, account and embedding model (so dimensions never clash); every
point is an entry id with a dense and a sparse vector and a payload used for filtering.
Implementations: `sinks/qdrant/edge.py` (qdrant-edge-py, embedded) and `sinks/qdrant/server.py`
(qdrant-client, production; its local mode runs the same code path in tests).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from pydantic import BaseModel, ConfigDict

from core.embeddings.base import SparseVector


class CollectionRef(BaseModel):
    model_config = ConfigDict(frozen=True)

    environment: str
    account_id: str
    model_id: str


class IndexPoint(BaseModel):
    """One entry in the index. `payload` carries agent_id, user_id, visibility, category, key,
    importance and expires_at (epoch seconds or None) for filtering."""

    model_config = ConfigDict(frozen=True)

    entry_id: str
    dense: tuple[float, ...]
    sparse: SparseVector
    payload: dict[str, str | float | int | None]


class IndexFilter(BaseModel):
    """What a caller may see: the agent's shared entries, plus the user's private ones when a
    user is given; optionally one category."""

    model_config = ConfigDict(frozen=True)

    agent_id: str
    user_id: str | None
    category: str | None = None


class ScoredId(BaseModel):
    model_config = ConfigDict(frozen=True)

    entry_id: str
    score: float


class IndexUnavailable(Exception):
    """The index cannot be queried or written right now (recall falls back to Postgres)."""


class VectorIndex(Protocol):
    async def upsert(self, collection: CollectionRef, points: Sequence[IndexPoint]) -> None:
        """Insert or replace points (idempotent); returns when durable in the index."""
        ...

    async def delete(self, collection: CollectionRef, entry_ids: Sequence[str]) -> None:
        """Remove points (idempotent: unknown ids are fine)."""
        ...

    async def hybrid_query(
        self,
        collection: CollectionRef,
        dense: Sequence[float],
        sparse: SparseVector,
        where: IndexFilter,
        limit: int,
    ) -> list[ScoredId]:
        """Dense + sparse prefetches fused (DBSF by default, `sinks.qdrant.layout`), filtered by
        `where`; best first. Scores rank within one answer only (DBSF: about 0..2, may be < 0)."""
        ...

    async def close(self) -> None: ...
