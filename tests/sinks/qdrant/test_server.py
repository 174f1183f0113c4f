"""QdrantServerIndex against a server that does not answer (the contract every index shares is
`tests/core/stores/test_vectors.py`)."""

from __future__ import annotations

import socket

import pytest

from core.stores.vectors import CollectionRef, IndexFilter, IndexPoint, IndexUnavailable
from sinks.embeddings.bm25 import Bm25Sparse
from sinks.qdrant.server import QdrantServerIndex

REF = CollectionRef(environment="test", account_id="acme", model_id="all-MiniLM-L6-v2-int8")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_an_unreachable_server_raises_index_unavailable(sparse: Bm25Sparse) -> None:
    index = QdrantServerIndex(f"http://127.0.0.1:{closed_port()}", timeout_s=2)
    point = IndexPoint(
        entry_id="e",
        dense=(1.0, 0.0),
        sparse=sparse.encode_document("tea"),
        payload={"agent_id": "bot", "user_id": None, "visibility": "shared", "category": "observation"},
    )
    try:
        with pytest.raises(IndexUnavailable):
            await index.upsert(REF, [point])
        with pytest.raises(IndexUnavailable):
            await index.hybrid_query(
                REF, [1.0, 0.0], sparse.encode_query("tea"), IndexFilter(agent_id="bot", user_id=None), 5
            )
        with pytest.raises(IndexUnavailable):
            await index.delete(REF, ["e"])
    finally:
        await index.close()
