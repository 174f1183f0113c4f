"""Fixtures for the vector index suite: one parametrised `open_index` over both adapters."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from memstream.embeddings.offline import OfflineMiniLM
from memstream.embeddings.sparse import Bm25Sparse
from sinks.qdrant.base import VectorIndex
from sinks.qdrant.edge import QdrantEdgeIndex
from sinks.qdrant.server import QdrantServerIndex

OpenIndex = Callable[[], Awaitable[VectorIndex]]


@pytest.fixture(scope="session")
def embedder() -> OfflineMiniLM:
    model = OfflineMiniLM()
    model.load()
    return model


@pytest.fixture(scope="session")
def sparse() -> Bm25Sparse:
    return Bm25Sparse()


@pytest.fixture(params=["edge", "client-local"])
async def open_index(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[OpenIndex]:
    """Opens the adapter under test on one tmp directory: Qdrant Edge, or qdrant-client's local
    mode (`path=`, the server code path). Calling it again after closing reopens the same data."""
    opened: list[VectorIndex] = []

    async def open_() -> VectorIndex:
        index: VectorIndex
        if request.param == "edge":
            index = QdrantEdgeIndex(tmp_path / "edge")
        else:
            index = QdrantServerIndex(path=str(tmp_path / "client"))
        opened.append(index)
        return index

    yield open_
    for index in opened:
        await index.close()
