"""BM25-style sparse vectors from Qdrant Edge's built-in BM25 model (no tokenizer of our own).

Documents get BM25 term-frequency weights (k=1.2, b=0.75, English stemming and stop words); queries
get weight 1.0 per unique term. The index pairs them with a sparse vector using the IDF modifier,
so the collection supplies the IDF part. The vectors are plain index/value lists: the same encoder
feeds Qdrant Edge and a Qdrant server.
"""

from __future__ import annotations

import qdrant_edge

from core.embeddings.base import SparseVector


class Bm25Sparse:
    """`SparseEncoder` backed by `qdrant_edge.Bm25` (pure CPU, microseconds per text)."""

    def __init__(self, config: qdrant_edge.Bm25Config | None = None) -> None:
        self._model = qdrant_edge.Bm25(config if config is not None else qdrant_edge.Bm25Config())

    def encode_document(self, text: str) -> SparseVector:
        return _convert(self._model.embed_document(text))

    def encode_query(self, text: str) -> SparseVector:
        return _convert(self._model.embed_query(text))


def _convert(vector: qdrant_edge.SparseVector) -> SparseVector:
    return SparseVector(indices=tuple(vector.indices), values=tuple(vector.values))
