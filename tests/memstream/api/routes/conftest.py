"""An API with agent memory wired (`memory_client`): real Postgres, offline embedder, Qdrant Edge."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import httpx
import pytest

from core.config import Settings
from memstream.api import ApiDeps, create_app
from memstream.api.deps import MemoryDeps
from memstream.wiring.api import build_api_deps, build_memory_deps
from sinks.embeddings.bm25 import Bm25Sparse
from sinks.embeddings.minilm import OfflineMiniLM
from sinks.qdrant.edge import QdrantEdgeIndex
from sinks.slatedb.journal import SlateJournal


@pytest.fixture
async def edge_index(tmp_path: Path) -> AsyncIterator[QdrantEdgeIndex]:
    index = QdrantEdgeIndex(tmp_path / "qdrant")
    yield index
    await index.close()


@pytest.fixture
def memory_deps(pool: asyncpg.Pool, embedder: OfflineMiniLM, edge_index: QdrantEdgeIndex) -> MemoryDeps:
    return build_memory_deps(pool, embedder, Bm25Sparse(), edge_index)


@pytest.fixture
def memory_api(
    api_settings: Settings, journal: SlateJournal, pool: asyncpg.Pool, memory_deps: MemoryDeps
) -> ApiDeps:
    return build_api_deps(api_settings, journal, pool, memory=memory_deps)


@pytest.fixture
async def memory_client(memory_api: ApiDeps) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(memory_api))
    async with httpx.AsyncClient(transport=transport, base_url="http://memstream.test") as client:
        yield client
