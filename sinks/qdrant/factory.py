"""Build the configured vector index from `settings.qdrant`: `edge://DIR` or `http(s)://...`."""

from __future__ import annotations

from pathlib import Path

from core.config import Settings
from core.stores.vectors import VectorIndex
from sinks.qdrant.edge import QdrantEdgeIndex
from sinks.qdrant.server import QdrantServerIndex


def build_index(settings: Settings) -> VectorIndex:
    """`edge://DIR` -> `QdrantEdgeIndex(DIR)` (embedded default, under the data dir);
    `http://` / `https://` -> `QdrantServerIndex(url, api_key=settings.qdrant_api_key)`.
    ValueError for any other scheme."""
    url = settings.qdrant
    if url.startswith("edge://"):
        root = url.removeprefix("edge://")
        if not root:
            raise ValueError("qdrant_url edge:// needs a directory, e.g. edge:///var/lib/memstream/qdrant")
        return QdrantEdgeIndex(Path(root))
    if url.startswith(("http://", "https://")):
        key = settings.qdrant_api_key
        return QdrantServerIndex(url, api_key=key.get_secret_value() if key is not None else None)
    raise ValueError(f"unsupported qdrant_url {url!r}: expected edge://DIR or http(s)://host:port")
