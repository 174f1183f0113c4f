"""`VectorIndex` on Qdrant Edge (qdrant-edge-py): the embedded default, in process, no server.

Layout: one Edge shard (a directory) per collection under `root` (`settings.qdrant` =
`edge://DIR`), named by `layout.collection_name`, created on the first upsert with the dense
vector's size. Each shard is limited to one search thread and one indexing thread (a 2-core box
also runs the broker, Postgres and the model). Calls into the engine block, so they run in a worker
thread, one at a time per shard (a lock per shard).

Durability: `upsert` and `delete` apply the operation (written to the shard's WAL) and then
`flush()` the shard, so they return only once the change is on disk.

Only one process may open a shard directory (Edge locks it); engine errors raise `IndexUnavailable`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import qdrant_edge as qe

from memstream.embeddings.base import SparseVector
from sinks.qdrant.base import CollectionRef, IndexFilter, IndexPoint, IndexUnavailable, ScoredId
from sinks.qdrant.layout import (
    DENSE,
    ENTRY_ID,
    KEYWORD_FIELDS,
    RRF_K,
    SPARSE,
    collection_name,
    point_id,
    prefetch_limit,
)

T = TypeVar("T")


class _Shard:
    """One open Edge shard and the lock serialising calls into it."""

    def __init__(self, shard: qe.EdgeShard) -> None:
        self.shard = shard
        self.lock = threading.Lock()


class QdrantEdgeIndex:
    """`VectorIndex` storing each collection as an Edge shard under `root` (module doc)."""

    def __init__(self, root: Path | str, *, search_threads: int = 1) -> None:
        self.root = Path(root)
        self.search_threads = search_threads
        self._shards: dict[str, _Shard] = {}
        self._open_lock = threading.Lock()
        self._closed = False

    # ---- VectorIndex ----

    async def upsert(self, collection: CollectionRef, points: Sequence[IndexPoint]) -> None:
        """Insert or replace `points` (all with the collection's dense size); returns once flushed."""
        if not points:
            return
        dims = {len(p.dense) for p in points}
        if len(dims) != 1:
            raise ValueError(f"points of one upsert must share the dense size, got sizes {sorted(dims)}")
        operation = qe.UpdateOperation.upsert_points([_point(p) for p in points])

        def apply(shard: qe.EdgeShard) -> None:
            shard.update(operation)
            shard.flush()

        await self._call(collection, apply, create_dims=dims.pop())

    async def delete(self, collection: CollectionRef, entry_ids: Sequence[str]) -> None:
        """Remove the points of `entry_ids` (unknown ids, or no collection yet, are fine)."""
        if not entry_ids:
            return
        operation = qe.UpdateOperation.delete_points([point_id(e) for e in entry_ids])

        def apply(shard: qe.EdgeShard) -> None:
            shard.update(operation)
            shard.flush()

        await self._call(collection, apply, create_dims=None)

    async def hybrid_query(
        self,
        collection: CollectionRef,
        dense: Sequence[float],
        sparse: SparseVector,
        where: IndexFilter,
        limit: int,
    ) -> list[ScoredId]:
        """Dense + sparse prefetches fused with RRF under `where`; [] if the collection is empty."""
        if limit < 1:
            return []
        flt = edge_filter(where)
        candidates = prefetch_limit(limit)
        prefetches = [
            qe.Prefetch(limit=candidates, query=qe.Query.Nearest(list(dense), using=DENSE), filter=flt)
        ]
        if sparse.indices:  # a query of stop words only has no sparse part
            vector = qe.SparseVector(list(sparse.indices), list(sparse.values))
            prefetches.append(
                qe.Prefetch(limit=candidates, query=qe.Query.Nearest(vector, using=SPARSE), filter=flt)
            )
        request = qe.QueryRequest(
            limit=limit,
            prefetches=prefetches,
            query=qe.Fusion.Rrf(k=RRF_K),  # type: ignore[arg-type]  # the stub omits Fusion's variants
            filter=flt,
            with_payload=[ENTRY_ID],
            with_vector=False,
        )
        found = await self._call(collection, lambda shard: shard.query(request), create_dims=None)
        if found is None:
            return []
        return [ScoredId(entry_id=str((p.payload or {})[ENTRY_ID]), score=p.score) for p in found]

    async def close(self) -> None:
        """Close every open shard (idempotent); the index cannot be used afterwards."""
        await asyncio.to_thread(self._close_all)

    # ---- extras (tests, benchmarks, operators) ----

    async def count(self, collection: CollectionRef) -> int:
        """Number of points in the collection (0 if it does not exist)."""
        found = await self._call(collection, lambda s: s.info().points_count, create_dims=None)
        return found or 0

    async def points(self, collection: CollectionRef) -> dict[str, dict[str, Any]]:
        """Every point's payload by entry id (for tests and rebuild checks; scrolls everything)."""

        def scroll(shard: qe.EdgeShard) -> dict[str, dict[str, Any]]:
            out: dict[str, dict[str, Any]] = {}
            offset: Any = None
            while True:
                records, offset = shard.scroll(
                    qe.ScrollRequest(offset=offset, limit=1000, with_payload=True, with_vector=False)
                )
                for record in records:
                    payload = dict(record.payload or {})
                    out[str(payload[ENTRY_ID])] = payload
                if offset is None:
                    return out

        return await self._call(collection, scroll, create_dims=None) or {}

    async def optimize(self, collection: CollectionRef) -> bool:
        """Run the shard's segment optimizers (builds the HNSW index of large segments); blocks
        that shard until done. True if anything was optimized."""
        return bool(await self._call(collection, lambda s: s.optimize(), create_dims=None))

    # ---- internals ----

    async def _call(
        self, collection: CollectionRef, fn: Callable[[qe.EdgeShard], T], *, create_dims: int | None
    ) -> T | None:
        """Run `fn(shard)` in a worker thread under the shard's lock. Without `create_dims`, a
        missing collection gives None; with it, the collection is created."""

        def run() -> T | None:
            shard = self._shard(collection, create_dims)
            if shard is None:
                return None
            with shard.lock:
                return fn(shard.shard)

        try:
            return await asyncio.to_thread(run)
        except (IndexUnavailable, ValueError):
            raise
        except Exception as exc:  # the engine raises plain exceptions (OSError, RuntimeError, ...)
            raise IndexUnavailable(f"qdrant edge {collection_name(collection)}: {exc}") from exc

    def _shard(self, collection: CollectionRef, create_dims: int | None) -> _Shard | None:
        name = collection_name(collection)
        with self._open_lock:
            if self._closed:
                raise IndexUnavailable("the qdrant edge index is closed")
            shard = self._shards.get(name)
            if shard is not None:
                return shard
            path = self.root / name
            if (path / "edge_config.json").exists() or _has_segments(path):
                opened = qe.EdgeShard.load(str(path), None)
            elif create_dims is not None:
                path.mkdir(parents=True, exist_ok=True)
                opened = qe.EdgeShard.create(str(path), self._config(create_dims))
                for field in KEYWORD_FIELDS:
                    opened.update(qe.UpdateOperation.create_field_index(field, qe.PayloadSchemaType.Keyword))
                opened.flush()
            else:
                return None
            shard = self._shards[name] = _Shard(opened)
            return shard

    def _config(self, dims: int) -> qe.EdgeConfig:
        return qe.EdgeConfig(
            vectors={
                DENSE: qe.EdgeVectorParams(
                    size=dims,
                    distance=qe.Distance.Cosine,
                    hnsw_config=qe.HnswIndexConfig(
                        m=16, ef_construct=100, full_scan_threshold=10_000, max_indexing_threads=1
                    ),
                )
            },
            sparse_vectors={SPARSE: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
            max_search_threads=self.search_threads,
        )

    def _close_all(self) -> None:
        with self._open_lock:
            self._closed = True
            shards, self._shards = list(self._shards.values()), {}
        for shard in shards:
            with shard.lock:
                shard.shard.close()


def _has_segments(path: Path) -> bool:
    return path.is_dir() and any(path.iterdir())


def _point(point: IndexPoint) -> qe.Point:
    vectors: dict[str, Any] = {
        DENSE: list(point.dense),
        SPARSE: qe.SparseVector(list(point.sparse.indices), list(point.sparse.values)),
    }
    return qe.Point(point_id(point.entry_id), vectors, {**point.payload, ENTRY_ID: point.entry_id})


def edge_filter(where: IndexFilter) -> qe.Filter:
    """The Edge filter of `where` (see `layout` for the visibility rule)."""
    shared = qe.FieldCondition("visibility", match=qe.MatchValue("shared"))
    visible: qe.FieldCondition | qe.Filter = shared
    if where.user_id is not None:
        own = qe.Filter(
            must=[
                qe.FieldCondition("visibility", match=qe.MatchValue("private")),
                qe.FieldCondition("user_id", match=qe.MatchValue(where.user_id)),
            ]
        )
        visible = qe.Filter(should=[shared, own])
    must: list[Any] = [qe.FieldCondition("agent_id", match=qe.MatchValue(where.agent_id)), visible]
    if where.category is not None:
        must.append(qe.FieldCondition("category", match=qe.MatchValue(where.category)))
    return qe.Filter(must=must)
