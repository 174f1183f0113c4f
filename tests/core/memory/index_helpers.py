"""Helpers for the recall/tools/API tests: entries put into a real index the way the projection
processor does it (dense + BM25 sparse, its payload), a down index (an `Outage` of the in-memory
one), a closed port."""

from __future__ import annotations

import socket
from collections.abc import Sequence
from typing import Any

from core.memory.models import MemoryEntry
from core.stores.vectors import (
    CollectionRef,
    IndexPoint,
    IndexUnavailable,
    VectorIndex,
)
from processors.qdrant_projection import entry_payload
from sinks.embeddings.bm25 import Bm25Sparse
from sinks.embeddings.minilm import OfflineMiniLM
from tests.fakes.outage import Outage
from tests.fakes.vectors import InMemoryVectorIndex

MODEL_ID = "all-MiniLM-L6-v2-q8"


def collection(entry: MemoryEntry) -> CollectionRef:
    return CollectionRef(environment=entry.environment, account_id=entry.account_id, model_id=MODEL_ID)


def payload(entry: MemoryEntry, **override: Any) -> dict[str, str | float | int | None]:
    """The projection processor's payload of `entry`, with fields overridden (a stale projection)."""
    values = entry_payload(entry)
    values.update(override)
    return values


async def project(
    index: VectorIndex,
    embedder: OfflineMiniLM,
    sparse: Bm25Sparse,
    entries: Sequence[MemoryEntry],
    **payload_override: Any,
) -> None:
    """Upsert `entries` into the index (payload fields can be overridden to fake a stale projection)."""
    dense = await embedder.embed([entry.content for entry in entries])
    for entry, vector in zip(entries, dense, strict=True):
        point = IndexPoint(
            entry_id=entry.entry_id,
            dense=tuple(vector),
            sparse=sparse.encode_document(entry.content),
            payload=payload(entry, **payload_override),
        )
        await index.upsert(collection(entry), [point])


def down_index() -> Outage[InMemoryVectorIndex]:
    """A `VectorIndex` whose server is down: every call raises `IndexUnavailable` (`.proxy` is the
    index, `.calls` counts the calls)."""
    return Outage(
        InMemoryVectorIndex(),
        methods={"upsert", "delete", "hybrid_query"},
        error=lambda: IndexUnavailable("connection refused"),
    )


def closed_port() -> int:
    """A local TCP port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
