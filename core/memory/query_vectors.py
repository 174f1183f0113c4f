"""The dense vectors of recent recall queries (`QueryVectors`), so a repeated query is not embedded again.

Used by agent-memory recall (scopes `MemoryScope`) and by transcript search's re-rank
(`core.transcripts.rerank`, scopes `TranscriptScope`): any hashable scope.

Embedding the query is the largest part of a recall (a MiniLM run, ~3 ms of CPU on an idle core),
and it competes with the qdrant-projection for the same embedder. Agents repeat queries (the same
question on every turn, a caller polling for a fact it just stored), so recall keeps the vectors
of the last `size` distinct (scope, query text) pairs. The scope (environment, account, agent,
user) is part of the key so that a hit, being faster, tells a caller only about its own earlier
queries, never about another tenant's or user's.

Correctness: an `Embedder`'s vector is a function of the text (and the model) only: the offline
int8 model runs each text alone and the batched model masks padding (`sinks.embeddings.minilm`),
and a remote model is asked for one text. One `QueryVectors` serves one embedder (one model id),
so a cached vector is exactly what embedding the text again would give. Nothing else is cached:
the index query and the Postgres re-check run on every recall.

`forget(matches)` drops the vectors of the scopes `matches` picks (a user erasure drops the
user's queries, which hold their texts).

The vectors are kept as arrays of doubles (exactly the floats the embedder returned; 3 KiB for 384
dimensions, ~3 MiB in all), the least recently used dropped first. Failures are not cached.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence

from core.embeddings.base import Embedder

DEFAULT_SIZE = 1024


class QueryVectors:
    """Dense vectors of query texts through `embedder`, the last `size` distinct (scope, text) kept."""

    def __init__(self, embedder: Embedder, *, size: int = DEFAULT_SIZE) -> None:
        if size < 0:
            raise ValueError("size must be >= 0")
        self._embedder = embedder
        self._size = size
        self._vectors: OrderedDict[tuple[Hashable, str], array[float]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    async def vector(self, scope: Hashable, text: str) -> Sequence[float]:
        """The dense vector of `text` asked in `scope` (the embedder's errors propagate, nothing is
        kept for them)."""
        key = (scope, text)
        found = self._vectors.get(key)
        if found is not None:
            self._vectors.move_to_end(key)
            self.hits += 1
            return found
        self.misses += 1
        vector = (await self._embedder.embed([text]))[0]
        if self._size:
            self._vectors[key] = array("d", vector)
            while len(self._vectors) > self._size:
                self._vectors.popitem(last=False)
        return vector

    def forget(self, matches: Callable[[Hashable], bool]) -> int:
        """Drop the kept vectors of every scope `matches` is true of; returns how many."""
        gone = [key for key in self._vectors if matches(key[0])]
        for key in gone:
            del self._vectors[key]
        return len(gone)
