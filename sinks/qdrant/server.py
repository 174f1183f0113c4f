"""`VectorIndex` on a Qdrant server through `qdrant_client.AsyncQdrantClient` (production).

The same layout as the Edge adapter (`layout`): a collection per (environment, account, model),
named dense vector (cosine) + `sparse` vector with the IDF modifier, keyword payload indexes,
dense + sparse prefetches fused by `fusion` (default `layout.FUSION`, DBSF: a server from Qdrant
1.11 on), the same visibility filter. Collections are created on the first upsert (a concurrent
creator is fine). Writes use `wait=True`: the server answers once the change is in its WAL.

`QdrantServerIndex(url="http://...")` talks to a server; `QdrantServerIndex(location=":memory:")`
or `(path=DIR)` runs qdrant-client's local mode (a Python re-implementation, brute force: tests
only). Connection failures, timeouts and server errors raise `IndexUnavailable`.

Rebuilds (`sinks.qdrant.generations`): the staging generation's collections are real collections
`<name>_<generation>`; `swap_in` points the alias `<name>` at each of them in one
`update_collection_aliases` request (atomic on the server) and then deletes every other
`mem_` collection. Readers and writers always address `<name>`, so every process follows the swap.
The first rebuild of an index created before rebuilds existed must delete the unsuffixed
collection `<name>` before the alias can take its name: for that one swap, queries of such a
collection find nothing for a moment.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Awaitable, Sequence
from typing import Any, TypeVar

from qdrant_client import AsyncQdrantClient, models
from qdrant_client.http.exceptions import ApiException, UnexpectedResponse

from core.embeddings.base import SparseVector
from core.stores.vectors import CollectionRef, IndexFilter, IndexPoint, IndexUnavailable, ScoredId
from sinks.qdrant.generations import (
    Mirror,
    base_name,
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


class QdrantServerIndex:
    """`VectorIndex` over qdrant-client (module doc). Give exactly one of url, location, path."""

    def __init__(
        self,
        url: str | None = None,
        *,
        location: str | None = None,
        path: str | None = None,
        api_key: str | None = None,
        timeout_s: int = 10,
        fusion: Fusion = FUSION,
    ) -> None:
        if sum(x is not None for x in (url, location, path)) != 1:
            raise ValueError("give exactly one of url, location or path")
        self.description = url or location or f"path={path}"
        self.fusion = fusion
        self._client = AsyncQdrantClient(
            url=url,
            location=location,
            path=path,
            api_key=api_key,
            timeout=timeout_s,
            check_compatibility=False,  # no request at construction: errors surface on use
        )
        self._known: set[str] = set()
        self._create_lock = asyncio.Lock()
        self.mirror = Mirror()

    # ---- VectorIndex ----

    async def upsert(
        self, collection: CollectionRef, points: Sequence[IndexPoint], *, generation: str | None = None
    ) -> None:
        """Insert or replace `points`; returns once the server acknowledged them (wait=True).
        `generation`: a running rebuild's staging generation (default: live, mirrored to it)."""
        if not points:
            return
        dims = {len(p.dense) for p in points}
        if len(dims) != 1:
            raise ValueError(f"points of one upsert must share the dense size, got sizes {sorted(dims)}")
        size = dims.pop()

        async def write(target: str | None, ids: set[str]) -> None:
            await self._upsert(_name(collection, target), size, [p for p in points if p.entry_id in ids])

        await routed_write(self.mirror, collection, [p.entry_id for p in points], generation, write)

    async def _upsert(self, name: str, dims: int, points: Sequence[IndexPoint]) -> None:
        name = await self._ensure(name, dims)
        structs = [
            models.PointStruct(
                id=point_id(p.entry_id),
                vector={
                    DENSE: list(p.dense),
                    SPARSE: models.SparseVector(indices=list(p.sparse.indices), values=list(p.sparse.values)),
                },
                payload={**p.payload, ENTRY_ID: p.entry_id},
            )
            for p in points
        ]
        await self._guard(self._client.upsert(name, structs, wait=True), name)

    async def delete(
        self, collection: CollectionRef, entry_ids: Sequence[str], *, generation: str | None = None
    ) -> None:
        """Remove the points of `entry_ids` (unknown ids, or no collection yet, are fine)."""
        if not entry_ids:
            return

        async def write(target: str | None, ids: set[str]) -> None:
            name = await self._existing(_name(collection, target))
            if name is None:
                return
            selector = models.PointIdsList(points=[point_id(e) for e in entry_ids if e in ids])
            await self._guard(self._client.delete(name, selector, wait=True), name)

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
        [] if there is no collection."""
        if limit < 1:
            return []
        name = await self._existing(collection_name(collection))
        if name is None:
            return []
        flt = server_filter(where)
        candidates = prefetch_limit(limit)
        prefetch = [models.Prefetch(query=list(dense), using=DENSE, filter=flt, limit=candidates)]
        if sparse.indices:
            vector = models.SparseVector(indices=list(sparse.indices), values=list(sparse.values))
            prefetch.append(models.Prefetch(query=vector, using=SPARSE, filter=flt, limit=candidates))
        response = await self._guard(
            self._client.query_points(
                name,
                prefetch=prefetch,
                query=server_fusion(self.fusion),
                query_filter=flt,
                limit=limit,
                with_payload=[ENTRY_ID],
            ),
            name,
        )
        return [ScoredId(entry_id=str((p.payload or {})[ENTRY_ID]), score=p.score) for p in response.points]

    async def close(self) -> None:
        await self._client.close()

    # ---- rebuilds (sinks.qdrant.generations) ----

    async def begin_rebuild(self) -> str:
        """Start mirroring live writes to a new generation; returns it (RebuildInProgress if one runs)."""
        async with self.mirror.lock:
            return self.mirror.begin()

    async def swap_in(self, generation: str) -> None:
        """Point every alias at the running rebuild's `generation` (one atomic request), then
        delete every other generation's collections (module doc)."""
        self.mirror.check(generation)
        async with self.mirror.lock:
            self.mirror.check(generation)
            names = await self._collections()
            aliases = {
                a.alias_name: a.collection_name
                for a in (await self._call(self._client.get_aliases())).aliases
            }
            fresh = {base_name(n): n for n in names if generation_of(n) == generation}
            actions: list[models.AliasOperations] = []
            for alias, target in aliases.items():
                if alias.startswith("mem_") and fresh.get(alias) != target:
                    actions.append(
                        models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=alias))
                    )
            for alias, target in fresh.items():
                if alias in names:  # an unsuffixed collection from before rebuilds (module doc)
                    await self._call(self._client.delete_collection(alias))
                if aliases.get(alias) != target:
                    actions.append(
                        models.CreateAliasOperation(
                            create_alias=models.CreateAlias(collection_name=target, alias_name=alias)
                        )
                    )
            if actions:
                await self._call(self._client.update_collection_aliases(actions))
            self._known.clear()
            self.mirror.end()
        for name in await self._collections():
            if generation_of(name) != generation:
                await self._call(self._client.delete_collection(name))

    async def discard_rebuild(self, generation: str) -> None:
        """Stop the rebuild of `generation` (if running) and delete its collections."""
        if not check_generation(generation):
            raise ValueError("the unsuffixed generation is never discarded")
        async with self.mirror.lock:
            if self.mirror.staging == generation:
                self.mirror.end()
        for name in await self._collections():
            if generation_of(name) == generation:
                await self._call(self._client.delete_collection(name))
                self._known.discard(name)

    # ---- extras (tests, rebuild checks) ----

    async def count(self, collection: CollectionRef, *, generation: str | None = None) -> int:
        name = await self._existing(_name(collection, generation))
        if name is None:
            return 0
        result = await self._guard(self._client.count(name, exact=True), name)
        return result.count

    async def points(
        self, collection: CollectionRef, *, generation: str | None = None
    ) -> dict[str, dict[str, Any]]:
        """Every point's payload by entry id (scrolls everything)."""
        name = await self._existing(_name(collection, generation))
        if name is None:
            return {}
        out: dict[str, dict[str, Any]] = {}
        offset: Any = None
        while True:
            records, offset = await self._guard(
                self._client.scroll(name, limit=1000, offset=offset, with_payload=True), name
            )
            for record in records:
                payload = dict(record.payload or {})
                out[str(payload[ENTRY_ID])] = payload
            if offset is None:
                return out

    # ---- internals ----

    async def _guard(self, call: Awaitable[T], name: str) -> T:
        try:
            return await call
        except (ApiException, OSError, TimeoutError) as exc:
            raise IndexUnavailable(f"qdrant {self.description} ({name}): {exc}") from exc
        except Exception as exc:  # httpx/grpc transport errors surface under their own types
            if type(exc).__module__.split(".")[0] in ("httpx", "httpcore", "grpc"):
                raise IndexUnavailable(f"qdrant {self.description} ({name}): {exc}") from exc
            raise

    async def _call(self, call: Awaitable[T]) -> T:
        return await self._guard(call, "collections")

    async def _collections(self) -> set[str]:
        """Names of the `mem_` collections (not aliases)."""
        found = await self._call(self._client.get_collections())
        return {c.name for c in found.collections if c.name.startswith("mem_")}

    async def _existing(self, name: str) -> str | None:
        if name in self._known:
            return name
        if await self._guard(self._client.collection_exists(name), name):
            self._known.add(name)
            return name
        return None

    async def _ensure(self, name: str, dims: int) -> str:
        if name in self._known:
            return name
        async with self._create_lock:
            if await self._existing(name) is not None:
                return name
            try:
                await self._guard(
                    self._client.create_collection(
                        name,
                        vectors_config={
                            DENSE: models.VectorParams(size=dims, distance=models.Distance.COSINE)
                        },
                        sparse_vectors_config={
                            SPARSE: models.SparseVectorParams(modifier=models.Modifier.IDF)
                        },
                    ),
                    name,
                )
            except IndexUnavailable as exc:
                conflict = isinstance(exc.__cause__, UnexpectedResponse) and exc.__cause__.status_code == 409
                if not conflict:  # 409: another writer created it first
                    raise
            with warnings.catch_warnings():  # local mode warns that payload indexes do nothing
                warnings.simplefilter("ignore")
                for field in KEYWORD_FIELDS:
                    await self._guard(
                        self._client.create_payload_index(
                            name, field, models.PayloadSchemaType.KEYWORD, wait=True
                        ),
                        name,
                    )
            self._known.add(name)
            return name


def _name(collection: CollectionRef, generation: str | None) -> str:
    """The live name (an alias after a rebuild) or a staging generation's collection name."""
    return collection_name(collection) if generation is None else generation_name(collection, generation)


def server_fusion(fusion: Fusion) -> models.FusionQuery | models.RrfQuery:
    """The qdrant-client query of `fusion`."""
    if fusion is Fusion.DBSF:
        return models.FusionQuery(fusion=models.Fusion.DBSF)
    return models.RrfQuery(rrf=models.Rrf(k=RRF_K))


def server_filter(where: IndexFilter) -> models.Filter:
    """The qdrant-client filter of `where` (see `layout` for the visibility rule)."""
    shared = models.FieldCondition(key="visibility", match=models.MatchValue(value="shared"))
    visible: models.FieldCondition | models.Filter = shared
    if where.user_id is not None:
        own = models.Filter(
            must=[
                models.FieldCondition(key="visibility", match=models.MatchValue(value="private")),
                models.FieldCondition(key="user_id", match=models.MatchValue(value=where.user_id)),
            ]
        )
        visible = models.Filter(should=[shared, own])
    must: list[models.Condition] = [
        models.FieldCondition(key="agent_id", match=models.MatchValue(value=where.agent_id)),
        visible,
    ]
    if where.category is not None:
        must.append(models.FieldCondition(key="category", match=models.MatchValue(value=where.category)))
    return models.Filter(must=must)
