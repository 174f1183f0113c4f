"""The two vector index adapters every index test runs on: Qdrant Edge, and qdrant-client's local
mode (`path=`, the server code path)."""

from __future__ import annotations

from pathlib import Path

from sinks.qdrant.edge import QdrantEdgeIndex
from sinks.qdrant.layout import FUSION, Fusion
from sinks.qdrant.server import QdrantServerIndex

KINDS = ["edge", "client-local"]
"""Parameters of an index fixture: `open_adapter`'s kinds."""

Index = QdrantEdgeIndex | QdrantServerIndex


def open_adapter(kind: str, root: Path, fusion: Fusion = FUSION) -> Index:
    """The `kind` adapter on its directory under `root` (opening it again reopens the same data),
    fusing hybrid queries by `fusion`."""
    if kind == "edge":
        return QdrantEdgeIndex(root / "edge", fusion=fusion)
    return QdrantServerIndex(path=str(root / "client"), fusion=fusion)
