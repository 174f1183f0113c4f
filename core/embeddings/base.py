"""The embedding interfaces: dense (`Embedder`) and BM25-style sparse (`SparseEncoder`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from pydantic import BaseModel, ConfigDict


class SparseVector(BaseModel):
    """A sparse vector: parallel lists of term indices and weights."""

    model_config = ConfigDict(frozen=True)

    indices: tuple[int, ...]
    values: tuple[float, ...]


class Embedder(Protocol):
    """Dense text embeddings. `model_id` names the model (and so the index collection)."""

    @property
    def model_id(self) -> str: ...

    @property
    def dimensions(self) -> int: ...

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One L2-normalised vector per text, in order. Raises `EmbeddingError` on failure."""
        ...


class SparseEncoder(Protocol):
    """BM25-style term vectors, to be paired with a sparse index using the IDF modifier."""

    def encode_document(self, text: str) -> SparseVector: ...

    def encode_query(self, text: str) -> SparseVector: ...
