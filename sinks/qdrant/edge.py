"""`VectorIndex` on Qdrant Edge (qdrant-edge-py): the embedded default, in process, no server.

Layout: one Edge shard (a directory) per collection under `root` (`settings.qdrant` =
`edge://DIR`), named by `layout.collection_name`, created on the first upsert with the dense
vector's size. Each shard is limited to one search thread and one indexing thread (a 2-core box
also runs the broker, Postgres and the model). Calls into the engine block, so they run in a worker
thread, one at a time per shard (a lock per shard). Hybrid queries fuse by `fusion` (default
`layout.FUSION`, DBSF).

Durability: `upsert` and `delete` apply the operation (written to the shard's WAL) and then
`flush()` the shard, so they return only once the change is on disk.

Rebuilds (`sinks.qdrant.generations`): Edge has no aliases, so the live generation is recorded
in the file `root/GENERATION` (replaced atomically; absent = the unsuffixed names) and read once
when the index first opens a shard; `swap_in` rewrites it, switches this object to the new names
under the write lock, then closes and deletes the shard directories of every other generation.

Only one process may open a shard directory (Edge locks it); engine errors raise `IndexUnavailable`.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import qdrant_edge as qe

from core.embeddings.base import SparseVector
from core.stores.vectors import CollectionRef, IndexFilter, IndexPoint, IndexUnavailable, ScoredId
from sinks.qdrant.generations import (
    Mirror,
    check_generation,
    generation_name,
    generation_of,
    routed_write,
)
from sinks.qdrant.layout import (
    DENSE,
    ENTRY_ID,
    FUSION,
    KEYWORD_FIELDS,
    RRF_K,
    SPARSE,
    Fusion,
    collection_name,
    point_id,
    prefetch_limit,
)

T = TypeVar("T")
GENERATION_FILE = "GENERATION"


class _Shard:
    """One open Edge shard and the lock serialising calls into it."""

    def __init__(self, shard: qe.EdgeShard) -> None:
        self.shard = shard
        self.lock = threading.Lock()


class QdrantEdgeIndex:
    """`VectorIndex` storing each collection as an Edge shard under `root` (module doc)."""

    def __init__(self, root: Path | str, *, search_threads: int = 1, fusion: Fusion = FUSION) -> None:
        self.root = Path(root)
        self.search_threads = search_threads
        self.fusion = fusion
        self._shards: dict[str, _Shard] = {}
        self._open_lock = threading.Lock()
        self._closed = False
        self._generation: str | None = None  # the live generation, read from GENERATION_FILE
        self.mirror = Mirror()

    # ---- VectorIndex ----

    async def upsert(
        self, collection: CollectionRef, points: Sequence[IndexPoint], *, generation: str | None = None
    ) -> None:
        """Insert or replace `points` (all with the collection's dense size); returns once flushed.
        `generation`: a running rebuild's staging generation (default: live, mirrored to it)."""
        if not points:
            return
        dims = {len(p.dense) for p in points}
        if len(dims) != 1:
            raise ValueError(f"points of one upsert must share the dense size, got sizes {sorted(dims)}")
        size = dims.pop()

        async def write(target: str | None, ids: set[str]) -> None:
            operation = qe.UpdateOperation.upsert_points([_point(p) for p in points if p.entry_id in ids])
            await self._call(collection, _applier(operation), create_dims=size, generation=target)

        await routed_write(self.mirror, collection, [p.entry_id for p in points], generation, write)

    async def delete(
        self, collection: CollectionRef, entry_ids: Sequence[str], *, generation: str | None = None
    ) -> None:
        """Remove the points of `entry_ids` (unknown ids, or no collection yet, are fine)."""
        if not entry_ids:
            return

        async def write(target: str | None, ids: set[str]) -> None:
            operation = qe.UpdateOperation.delete_points([point_id(e) for e in entry_ids if e in ids])
            await self._call(collection, _applier(operation), create_dims=None, generation=target)

        await routed_write(self.mirror, collection, entry_ids, generation, write)

    async def hybrid_query(
        self,
        collection: CollectionRef,
        dense: Sequence[float],
        sparse: SparseVector,
        where: IndexFilter,
        limit: int,
    ) -> list[ScoredId]:
        """Dense + sparse prefetches fused by `self.fusion` (`layout`) under `where`, best first;
        [] if the collection is empty."""
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
            query=edge_fusion(self.fusion),
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

    # ---- rebuilds (sinks.qdrant.generations) ----

    async def begin_rebuild(self) -> str:
        """Start mirroring live writes to a new generation; returns it (RebuildInProgress if one runs)."""
        async with self.mirror.lock:
            return self.mirror.begin()

    async def swap_in(self, generation: str) -> None:
        """Make the running rebuild's `generation` live, then delete every other generation."""
        self.mirror.check(generation)
        async with self.mirror.lock:
            self.mirror.check(generation)
            await asyncio.to_thread(self._record_generation, generation)
            self.mirror.end()
        await asyncio.to_thread(self._drop_generations, lambda g: g != generation)

    async def discard_rebuild(self, generation: str) -> None:
        """Stop the rebuild of `generation` (if running) and delete its shards; never the live ones."""
        check_generation(generation)
        async with self.mirror.lock:
            if self.mirror.staging == generation:
                self.mirror.end()
        if generation != await asyncio.to_thread(self._live):
            await asyncio.to_thread(self._drop_generations, lambda g: g == generation)

    async def generation(self) -> str:
        """The live generation ("" = unsuffixed names)."""
        return await asyncio.to_thread(self._live)

    # ---- extras (tests, benchmarks, operators) ----

    async def count(self, collection: CollectionRef, *, generation: str | None = None) -> int:
        """Number of points in the collection (0 if it does not exist)."""
        found = await self._call(
            collection, lambda s: s.info().points_count, create_dims=None, generation=generation
        )
        return found or 0

    async def points(
        self, collection: CollectionRef, *, generation: str | None = None
    ) -> dict[str, dict[str, Any]]:
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

        return await self._call(collection, scroll, create_dims=None, generation=generation) or {}

    async def optimize(self, collection: CollectionRef) -> bool:
        """Run the shard's segment optimizers (builds the HNSW index of large segments); blocks
        that shard until done. True if anything was optimized."""
        return bool(await self._call(collection, lambda s: s.optimize(), create_dims=None))

    # ---- internals ----

    async def _call(
        self,
        collection: CollectionRef,
        fn: Callable[[qe.EdgeShard], T],
        *,
        create_dims: int | None,
        generation: str | None = None,
    ) -> T | None:
        """Run `fn(shard)` in a worker thread under the shard's lock, on the collection of
        `generation` (None: the live one). Without `create_dims`, a missing collection gives None;
        with it, the collection is created."""

        def run() -> T | None:
            shard = self._shard(collection, create_dims, generation)
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

    def _shard(
        self, collection: CollectionRef, create_dims: int | None, generation: str | None
    ) -> _Shard | None:
        with self._open_lock:
            if self._closed:
                raise IndexUnavailable("the qdrant edge index is closed")
            name = generation_name(collection, self._live_locked() if generation is None else generation)
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

    def _live(self) -> str:
        with self._open_lock:
            return self._live_locked()

    def _live_locked(self) -> str:
        if self._generation is None:
            path = self.root / GENERATION_FILE
            self._generation = check_generation(path.read_text().strip()) if path.exists() else ""
        return self._generation

    def _record_generation(self, generation: str) -> None:
        """Durably record `generation` as live (write, fsync, rename, fsync the directory)."""
        with self._open_lock:
            self.root.mkdir(parents=True, exist_ok=True)
            tmp = self.root / f"{GENERATION_FILE}.tmp"
            with open(tmp, "w") as f:
                f.write(generation)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.root / GENERATION_FILE)
            directory = os.open(self.root, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
            self._generation = generation

    def _drop_generations(self, doomed: Callable[[str], bool]) -> None:
        """Close and delete every shard whose generation is `doomed`."""
        with self._open_lock:
            closing = [n for n in self._shards if doomed(generation_of(n))]
            shards = [self._shards.pop(n) for n in closing]
        for shard in shards:
            with shard.lock:
                shard.shard.close()
        if self.root.is_dir():
            for path in self.root.iterdir():
                if path.is_dir() and path.name.startswith("mem_") and doomed(generation_of(path.name)):
                    shutil.rmtree(path)

    def _close_all(self) -> None:
        with self._open_lock:
            self._closed = True
            shards, self._shards = list(self._shards.values()), {}
        for shard in shards:
            with shard.lock:
                shard.shard.close()


def _applier(operation: qe.UpdateOperation) -> Callable[[qe.EdgeShard], None]:
    def apply(shard: qe.EdgeShard) -> None:
        shard.update(operation)
        shard.flush()

    return apply


def _has_segments(path: Path) -> bool:
    return path.is_dir() and any(path.iterdir())


def _point(point: IndexPoint) -> qe.Point:
    vectors: dict[str, Any] = {
        DENSE: list(point.dense),
        SPARSE: qe.SparseVector(list(point.sparse.indices), list(point.sparse.values)),
    }
    return qe.Point(point_id(point.entry_id), vectors, {**point.payload, ENTRY_ID: point.entry_id})


def edge_fusion(fusion: Fusion) -> Any:
    """The Edge query of `fusion` (typed Any: the stub omits Fusion's variants from the query type)."""
    return qe.Fusion.Dbsf() if fusion is Fusion.DBSF else qe.Fusion.Rrf(k=RRF_K)


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
