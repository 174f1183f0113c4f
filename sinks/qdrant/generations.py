"""Generations of an index's collections: how a rebuild fills fresh collections and swaps them in.

A collection is named `layout.collection_name(ref)` (generation "", what the index always had) or
`<that>_<generation>` with a generation token `g` + 8 hex digits (the base name ends in a 12-hex
digest, which can never start with `g`, so `generation_of(name)` is unambiguous).

A rebuild (`begin_rebuild` -> staged writes -> `swap_in` or `discard_rebuild`, on both adapters):
- `begin_rebuild()` picks a new generation. From then on, every ordinary write through this index
  object (the live projection) is applied to the live collection AND mirrored to the staging
  generation, and `Mirror` remembers which entries the mirror wrote.
- Staged writes (`upsert/delete(..., generation=staging)`, e.g. through `StagedIndex`) skip those
  mirrored entries: the live projection applies the topic in order, so its latest write of an entry
  is never older than what a rebuild read earlier, and a later record of that entry will be
  applied (mirrored, or into the new generation after the swap) by the live projection anyway.
  Writes of the live projection and staged writes are serialised by `Mirror.lock`.
- `swap_in(generation)` makes the staging generation the live one at once (under `Mirror.lock`,
  so no write is half applied), then drops every collection of other generations. Collections of
  accounts the rebuild did not see simply do not exist afterwards (queries find no points).
- `discard_rebuild(generation)` stops mirroring and drops the staging collections; the live
  collections are untouched.

Mirroring covers writers in this process only (the node hosts the projection with the rebuild;
an Edge directory cannot be opened by two processes anyway). A projection running in another
process against a Qdrant server keeps writing to the alias, which follows the swap, but its writes
during the rebuild are not mirrored: stop it, or replay it after the rebuild.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, runtime_checkable

from core.embeddings.base import SparseVector
from core.errors import Conflict
from core.stores.vectors import CollectionRef, IndexFilter, IndexPoint, ScoredId
from sinks.qdrant.layout import collection_name

_TOKEN = re.compile(r"g[0-9a-f]{8}")


def new_generation() -> str:
    return f"g{uuid.uuid4().hex[:8]}"


def check_generation(generation: str) -> str:
    """`generation` if it is "" or a token of `new_generation`; ValueError otherwise."""
    if generation and not _TOKEN.fullmatch(generation):
        raise ValueError(f"not an index generation: {generation!r}")
    return generation


def generation_name(ref: CollectionRef, generation: str) -> str:
    """The collection name of `ref` in `generation` ("" = the unsuffixed name)."""
    base = collection_name(ref)
    return f"{base}_{check_generation(generation)}" if generation else base


def generation_of(name: str) -> str:
    """The generation of a collection name ("" for an unsuffixed one)."""
    last = name.rsplit("_", 1)[-1]
    return last if _TOKEN.fullmatch(last) else ""


def base_name(name: str) -> str:
    """The unsuffixed (alias) name of a collection name of any generation."""
    generation = generation_of(name)
    return name[: -len(generation) - 1] if generation else name


class RebuildInProgress(Conflict):
    code = "rebuild_in_progress"


class Mirror:
    """The staging generation of a running rebuild and the entries the live writes touched."""

    def __init__(self) -> None:
        self.staging: str | None = None
        self.touched: set[tuple[str, str]] = set()
        self.lock = asyncio.Lock()
        """Held by every write (live and staged) and by the swap."""

    def begin(self) -> str:
        if self.staging is not None:
            raise RebuildInProgress(f"a rebuild of the vector index (generation {self.staging}) is running")
        self.staging = new_generation()
        self.touched = set()
        return self.staging

    def check(self, generation: str) -> None:
        if generation != self.staging:
            raise ValueError(f"generation {generation!r} is not the running rebuild's ({self.staging!r})")

    def end(self) -> None:
        self.staging = None
        self.touched = set()

    def mirrored(self, collection: CollectionRef, entry_ids: Sequence[str]) -> str | None:
        """A live write of `entry_ids`: the staging generation to mirror it to (None: no rebuild)."""
        if self.staging is None:
            return None
        name = collection_name(collection)
        self.touched.update((name, e) for e in entry_ids)
        return self.staging

    def unmirrored(self, collection: CollectionRef, entry_ids: Sequence[str]) -> set[str]:
        """Of a staged write, the entry ids the live writes have not touched."""
        name = collection_name(collection)
        return {e for e in entry_ids if (name, e) not in self.touched}


async def routed_write(
    mirror: Mirror,
    collection: CollectionRef,
    entry_ids: Sequence[str],
    generation: str | None,
    apply: Callable[[str | None, set[str]], Awaitable[None]],
) -> None:
    """Apply a write of `entry_ids` as the module doc says: `apply(None, ids)` writes the live
    collection, `apply(generation, ids)` a staging one (only `ids` of the write)."""
    async with mirror.lock:
        if generation is None:
            staging = mirror.mirrored(collection, entry_ids)
            await apply(None, set(entry_ids))
            if staging is not None:
                await apply(staging, set(entry_ids))
        else:
            mirror.check(generation)
            keep = mirror.unmirrored(collection, entry_ids)
            if keep:
                await apply(generation, keep)


@runtime_checkable
class RebuildableIndex(Protocol):
    """A `VectorIndex` whose collections can be rebuilt into a fresh generation (module doc)."""

    async def upsert(
        self, collection: CollectionRef, points: Sequence[IndexPoint], *, generation: str | None = None
    ) -> None: ...

    async def delete(
        self, collection: CollectionRef, entry_ids: Sequence[str], *, generation: str | None = None
    ) -> None: ...

    async def begin_rebuild(self) -> str:
        """Start mirroring live writes to a new generation; returns it. RebuildInProgress if one runs."""
        ...

    async def swap_in(self, generation: str) -> None:
        """Make `generation` live atomically and drop every other generation's collections."""
        ...

    async def discard_rebuild(self, generation: str) -> None:
        """Stop the rebuild and drop `generation`'s collections (idempotent)."""
        ...

    async def count(self, collection: CollectionRef, *, generation: str | None = None) -> int: ...


class StagedIndex:
    """The `VectorIndex` writes of one staging generation (for `ProjectionSink`); not queryable."""

    def __init__(self, index: RebuildableIndex, generation: str) -> None:
        self.index = index
        self.generation = generation

    async def upsert(self, collection: CollectionRef, points: Sequence[IndexPoint]) -> None:
        await self.index.upsert(collection, points, generation=self.generation)

    async def delete(self, collection: CollectionRef, entry_ids: Sequence[str]) -> None:
        await self.index.delete(collection, entry_ids, generation=self.generation)

    async def hybrid_query(
        self,
        collection: CollectionRef,
        dense: Sequence[float],
        sparse: SparseVector,
        where: IndexFilter,
        limit: int,
    ) -> list[ScoredId]:
        raise NotImplementedError("a staging generation is not queried before it is swapped in")

    async def close(self) -> None:
        """Nothing to close: the index belongs to its owner."""
