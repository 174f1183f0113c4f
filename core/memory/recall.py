"""Recall (`memory_recall`): hybrid index query for ranked ids, then Postgres for the truth.

Phase 1 embeds the query (dense + BM25-style sparse; the dense vectors of the scope's recent
query texts are kept, `core.memory.query_vectors`) and asks the vector index for the best
`limit * OVERFETCH` ids among what the caller may see (the agent's shared entries and, with a
user, that user's private ones; optionally one category). The index is a projection that may lag,
so phase 2 fetches the authoritative rows from Postgres (`by_ids`), which re-applies visibility,
expiry and the filters (category, key prefix): an id the index returns for an entry that is gone,
expired, changed category or private to someone else is dropped there.

When phase 1 fails (index unavailable, any index or embedding error) or phase 2 keeps nothing,
the answer comes from the Postgres full-text search (`keyword_search`) instead; `RecallResult.path`
says which path answered (`"qdrant"` or `"postgres_fts"`) and `fallback_reason` why.

Final score = path score x (0.8 + importance x 0.2), best first: the boost is relative, so it
means the same on either path's scale (the index's fused score, DBSF by default: about 0..2; the
full-text `ts_rank`: small positive numbers). A negative path score (DBSF: a candidate far below
its lists' means) is divided by that factor instead, so a higher importance never ranks an entry
lower. The returned entries' recall counters (count, last recalled at the recall's time) are
updated behind the answer (`core.memory.recall_counts`: the recall does not wait for them).
Expiry is judged by the service's clock.

Limit: default `RECALL_DEFAULT_LIMIT` (5), capped at `RECALL_MAX_LIMIT` (20): a larger limit is
not an error, it answers with at most 20 entries and says so (`RecallResult.limit` is the limit
applied, `RecallResult.note` explains the cap). A limit below 1, or not an integer, is
`InvalidInput` (field `limit`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Literal, NamedTuple, Protocol

from core.embeddings.base import Embedder, SparseEncoder
from core.errors import InvalidInput
from core.inputs import check_text
from core.memory.checks import check_key_prefix
from core.memory.models import CATEGORIES, RECALL_DEFAULT_LIMIT, RECALL_MAX_LIMIT, MemoryEntry, MemoryScope
from core.memory.query_vectors import QueryVectors
from core.memory.reads import ScoredEntry
from core.memory.recall_counts import RecallCounts
from core.metrics import MEMORY_RECALLS, child
from core.stores.vectors import CollectionRef, IndexFilter, VectorIndex

log = logging.getLogger("memstream.memory.recall")

OVERFETCH = 4
MAX_INDEX_LIMIT = 100
MAX_QUERY_CHARS = 2_000

RecallPath = Literal["qdrant", "postgres_fts"]


class RecallStore(Protocol):
    """The part of `MemoryService` recall needs (its own clock decides what is expired)."""

    async def by_ids(
        self,
        scope: MemoryScope,
        ids: Sequence[str],
        *,
        category: str | None = None,
        key_prefix: str | None = None,
    ) -> list[MemoryEntry]: ...

    async def keyword_search(
        self,
        scope: MemoryScope,
        query: str,
        *,
        category: str | None = None,
        key_prefix: str | None = None,
        limit: int = RECALL_DEFAULT_LIMIT,
    ) -> Sequence[ScoredEntry]: ...

    async def record_recall(
        self, scope: MemoryScope, entry_ids: Sequence[str], *, at: datetime | None = None
    ) -> int: ...

    def now(self) -> datetime: ...


class RecallHit(NamedTuple):
    entry: MemoryEntry
    score: float


class RecallResult(NamedTuple):
    hits: list[RecallHit]
    path: RecallPath
    fallback_reason: str | None = None
    limit: int = RECALL_DEFAULT_LIMIT
    """The limit applied (the requested one, capped at RECALL_MAX_LIMIT)."""
    note: str | None = None
    """Set when the requested limit was capped."""


def effective_limit(limit: int) -> tuple[int, str | None]:
    """(the limit applied, a note when it was capped): `limit` capped at RECALL_MAX_LIMIT.
    InvalidInput (field `limit`) when it is not an integer >= 1."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidInput(f"limit must be an integer of at least 1, got {limit!r}", field="limit")
    if limit > RECALL_MAX_LIMIT:
        return RECALL_MAX_LIMIT, (
            f"limit {limit} was capped at {RECALL_MAX_LIMIT}: recall returns at most "
            f"{RECALL_MAX_LIMIT} entries"
        )
    return limit, None


def boosted(score: float, importance: float) -> float:
    """The final score: score x (0.8 + importance x 0.2); a negative score is divided by that
    factor, so the result never falls as importance rises (module doc)."""
    factor = 0.8 + importance * 0.2
    return score * factor if score >= 0 else score / factor


def rank(scored: Sequence[tuple[MemoryEntry, float]], limit: int) -> list[RecallHit]:
    """Hits by boosted score, best first (ties keep the input order), at most `limit`. Pure."""
    hits = [RecallHit(entry, boosted(score, entry.importance)) for entry, score in scored]
    order = sorted(range(len(hits)), key=lambda i: (-hits[i].score, i))
    return [hits[i] for i in order[:limit]]


def check_recall_args(query: str, category: str | None, key_prefix: str | None) -> str:
    """The stripped query; InvalidInput naming the field otherwise (the limit: `effective_limit`)."""
    text = query.strip() if isinstance(query, str) else ""
    if not text:
        raise InvalidInput("query must be a non-empty string", field="query")
    if len(text) > MAX_QUERY_CHARS:
        raise InvalidInput(f"query is {len(text)} characters; the limit is {MAX_QUERY_CHARS}", field="query")
    if category is not None and category not in CATEGORIES:
        raise InvalidInput(
            f"category must be one of {', '.join(CATEGORIES)}, got {category!r}", field="category"
        )
    check_key_prefix(key_prefix)
    return check_text(text, "query")


class Recaller:
    """Two-phase recall over the vector index and Postgres (see the module doc). `counts` writes
    the recall counters (default: a `RecallCounts` over `service`); its owner drains it
    (`await recaller.counts.drain()`) before closing the database."""

    def __init__(
        self,
        service: RecallStore,
        embedder: Embedder,
        sparse: SparseEncoder,
        index: VectorIndex,
        *,
        model_id: str,
        counts: RecallCounts | None = None,
    ) -> None:
        self._service = service
        self.counts = counts if counts is not None else RecallCounts(service)
        self.query_vectors = QueryVectors(embedder)
        self._sparse = sparse
        self._index = index
        self._model_id = model_id

    async def recall(
        self,
        scope: MemoryScope,
        query: str,
        *,
        limit: int = RECALL_DEFAULT_LIMIT,
        category: str | None = None,
        key_prefix: str | None = None,
    ) -> RecallResult:
        """The best `limit` entries (capped at 20, see the module doc) for `query` visible in
        `scope` (InvalidInput on bad arguments)."""
        limit, note = effective_limit(limit)
        text = check_recall_args(query, category, key_prefix)
        result = await self._from_index(scope, text, limit, category, key_prefix)
        if isinstance(result, str) or not result.hits:
            reason = result if isinstance(result, str) else "the index returned no usable entries"
            found = await self._service.keyword_search(
                scope, text, category=category, key_prefix=key_prefix, limit=limit
            )
            hits = rank([(item.entry, item.score) for item in found], limit)
            result = RecallResult(hits=hits, path="postgres_fts", fallback_reason=reason)
        if result.hits:
            self.counts.note(scope, [hit.entry.entry_id for hit in result.hits], self._service.now())
        child(MEMORY_RECALLS, result.path).inc()
        return result._replace(limit=limit, note=note)

    async def _from_index(
        self,
        scope: MemoryScope,
        text: str,
        limit: int,
        category: str | None,
        key_prefix: str | None,
    ) -> RecallResult | str:
        """Phase 1 + 2; the reason when phase 1 failed (logged)."""
        collection = CollectionRef(
            environment=scope.environment, account_id=scope.account_id, model_id=self._model_id
        )
        where = IndexFilter(agent_id=scope.agent_id, user_id=scope.user_id, category=category)
        try:
            dense = await self.query_vectors.vector(scope, text)
            sparse = self._sparse.encode_query(text)
            scored = await self._index.hybrid_query(
                collection, dense, sparse, where, min(limit * OVERFETCH, MAX_INDEX_LIMIT)
            )
        except Exception as exc:
            reason = f"the index failed: {type(exc).__name__}: {exc}"
            log.warning("recall: %s; answering from Postgres full-text search", reason)
            return reason
        if not scored:
            return RecallResult(hits=[], path="qdrant")
        scores = {item.entry_id: item.score for item in scored}
        entries = await self._service.by_ids(scope, list(scores), category=category, key_prefix=key_prefix)
        by_id = {entry.entry_id: entry for entry in entries}
        ordered = [(by_id[i], scores[i]) for i in scores if i in by_id]
        return RecallResult(hits=rank(ordered, limit), path="qdrant")
