"""The semantic re-rank of `journal_message_search` (`DenseRerank`), on when `settings.transcript_vectors` is.

One search: the query text is embedded (the last `QueryVectors` size distinct (scope, query) pairs
are cached: a repeated query costs nothing here), then the store's BM25 query returns its top
`CANDIDATES` hits together with the cosine of their messages' vectors to it
(`MessageVectorStore.candidates`: same scope and role rules as `TranscriptStore.search`, one
query, the cosine computed where the vectors are); the candidates are re-ordered by
the fused score (`core.transcripts.fusion`) and the best `limit` returned, each with its fused
score as `score`. A candidate whose message has no vector yet keeps its place by the documented
neutral dense score (`fusion.NEUTRAL_DENSE`); none is dropped. When the query cannot be embedded
(`EmbeddingError`), every candidate gets the neutral dense score, i.e. the BM25 order (logged),
never an error.

The embedder must be the one the `transcript-vectors` processor embeds messages with: vectors are
asked for by its `model_id`, so those of another model count as missing.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace

from core.embeddings.base import Embedder
from core.embeddings.errors import EmbeddingError
from core.memory.query_vectors import QueryVectors
from core.stores.message_vectors import MessageVectorStore
from core.stores.transcripts import MessageHit, Period, TranscriptScope
from core.transcripts.fusion import CANDIDATES, fused
from core.transcripts.terms import query_terms

log = logging.getLogger("memstream.transcripts.rerank")


class DenseRerank:
    """BM25 top `candidates` re-ordered with the dense signal (module doc)."""

    def __init__(
        self, store: MessageVectorStore, embedder: Embedder, *, candidates: int = CANDIDATES
    ) -> None:
        if candidates < 1:
            raise ValueError("candidates must be >= 1")
        self._store = store
        self._embedder = embedder
        self.queries = QueryVectors(embedder)
        """The vectors of recent queries, by (scope, text) (a user erasure drops the user's)."""
        self.candidates = candidates

    async def search(
        self,
        scope: TranscriptScope,
        query: str,
        *,
        thread_id: str | None = None,
        limit: int = 10,
        period: Period | None = None,
    ) -> list[MessageHit]:
        """The best `limit` hits of `scope` (optionally one thread and `period`) for `query`, re-ranked."""
        if limit < 1 or not query_terms(query):
            return []  # nothing to search for (the store finds nothing): no query to embed
        try:
            vector: Sequence[float] | None = await self.queries.vector(scope, query)
        except EmbeddingError as exc:
            log.warning("transcript search: the query could not be embedded, BM25 order kept: %s", exc)
            vector = None  # every candidate's dense score is then the neutral one: BM25's order
        found = await self._store.candidates(
            scope,
            query,
            model=self._embedder.model_id,
            query_vector=vector,
            thread_id=thread_id,
            limit=max(limit, self.candidates),
            period=period,
        )
        scores = fused([c.hit.score for c in found], [c.cosine for c in found])
        order = sorted(range(len(found)), key=lambda i: -scores[i])
        return [replace(found[i].hit, score=scores[i]) for i in order[:limit]]
