"""`qdrant-projection`: the vector index of agent memory, projected from `memory.entries`.

Input: the compacted `memory.entries` topic (key `environment/account_id/entry_id`; value an
`EntryEvent` JSON for an upsert, null for a delete). Output: points in the collection of
(environment, account, embedding model) of each entry, upserted or deleted idempotently.

The pure part, `plan(batch, model_id, now)`, turns a batch into `ProjectionPlan`: per entry only
its latest record of the batch counts (records of one key share a partition and arrive in offset
order); an upsert whose `expires_at` is already past at `now` becomes a delete (the index never
holds expired entries; recall re-checks expiry in Postgres anyway). A record that can never be
applied (bad key, undecodable value, a value whose ids disagree with its key) raises
`InvalidMessage` and is dead-lettered. The effect, `ProjectionSink.write(plan)`, embeds the
upserted contents (dense + BM25 sparse) and applies each collection's deletes and upserts; it
returns once the index made them durable, and re-applying a plan changes nothing.

Replaying the topic from the beginning into an empty index rebuilds exactly the same points: a
point is a function of the entry's last record only.

Qdrant unavailable (an `IndexUnavailable` or `EmbeddingError` caused by a connection-class error,
or a server answering 429/502/503/504): `process` raises it as it is; the runtime sees the outage
in its cause (`streams.runtime.outages.is_outage`) and waits it out (retried without limit,
nothing dead-lettered, offsets not committed). Other errors of the index (e.g. the embedded Edge
engine refusing a point, or the index closed) go to the runtime as they are (retried, then the
record that still fails alone is dead-lettered).

After a batch is applied, the live projection (as `memstream.wiring.processors` builds it) notes
the batch's `outbox_seq` headers as applied (`core.stores.outbox.AppliedOutbox`), so
that what the broker loses before the projection applied it is published again from Postgres
(`EntriesOutboxRelay.republish_unapplied`).
That note is best effort: when Postgres cannot take it, a warning is logged and the batch still
completes (its records are then merely published again after a broker loss).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from core.embeddings.base import Embedder, SparseEncoder
from core.memory.models import EntryEvent, MemoryEntry
from core.stores.outbox import AppliedOutbox
from core.stores.vectors import CollectionRef, IndexPoint, VectorIndex
from streams.codecs import memory_entries
from streams.relays.memory_entries import outbox_seqs
from streams.runtime.processor import Processor, Record, decoding

NAME = "qdrant-projection"
SOURCE_TOPIC = "memory.entries"
BATCH_WAIT_S = 0.05
"""Longest wait to fill a batch (the runtime's default is 0.2 s): a stored entry should be
recallable soon, and a batch's cost is its embeddings, which small batches do not make dearer."""

log = logging.getLogger("memstream.qdrant_projection")

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class ProjectionPlan:
    """What one batch does to the index: per collection, entries to upsert and ids to delete.
    An entry appears at most once in the whole plan."""

    upserts: dict[CollectionRef, list[MemoryEntry]] = field(default_factory=dict)
    deletes: dict[CollectionRef, list[str]] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.upserts and not self.deletes


def decode(record: Record, model_id: str) -> tuple[CollectionRef, str, EntryEvent | None]:
    """(collection, entry_id, event or None for a tombstone) of `record`; InvalidMessage if bad."""
    with decoding(record):
        decoded = memory_entries.decode(record.key, record.value)
    ref = CollectionRef(environment=decoded.environment, account_id=decoded.account_id, model_id=model_id)
    return ref, decoded.entry_id, decoded.event


def plan(batch: Sequence[Record], model_id: str, now: datetime) -> ProjectionPlan:
    """The pure projection of `batch` (module doc). Raises InvalidMessage for the first bad record."""
    latest: dict[tuple[CollectionRef, str], EntryEvent | None] = {}
    for record in batch:
        ref, entry_id, event = decode(record, model_id)
        key = (ref, entry_id)
        latest.pop(key, None)  # re-insert: the dict keeps the order of last occurrence
        latest[key] = event
    result = ProjectionPlan()
    for (ref, entry_id), event in latest.items():
        if event is None or (event.entry.expires_at is not None and event.entry.expires_at <= now):
            result.deletes.setdefault(ref, []).append(entry_id)
        else:
            result.upserts.setdefault(ref, []).append(event.entry)
    return result


def entry_payload(entry: MemoryEntry) -> dict[str, str | float | int | None]:
    """The point payload of `entry`: the filter fields and what recall may want without Postgres."""
    return {
        "agent_id": entry.agent_id,
        "user_id": entry.user_id,
        "visibility": entry.visibility,
        "category": entry.category,
        "key": entry.key,
        "importance": entry.importance,
        "content_hash": entry.content_hash,
        "expires_at": int(entry.expires_at.timestamp()) if entry.expires_at is not None else None,
        "updated_at": entry.updated_at.isoformat(),
    }


class ProjectionSink:
    """Applies `ProjectionPlan`s to a `VectorIndex` (embedding upserted contents first)."""

    def __init__(self, index: VectorIndex, embedder: Embedder, sparse: SparseEncoder) -> None:
        self.index = index
        self.embedder = embedder
        self.sparse = sparse

    async def write(self, plan: ProjectionPlan) -> None:
        """Apply `plan`; returns once durable in the index. Idempotent. Errors propagate
        (`EmbeddingError`, `IndexUnavailable`: the runtime retries the batch)."""
        entries = [e for group in plan.upserts.values() for e in group]
        vectors = iter(await self.embedder.embed([e.content for e in entries]) if entries else [])
        for ref, ids in plan.deletes.items():
            await self.index.delete(ref, ids)
        for ref, group in plan.upserts.items():
            points = [
                IndexPoint(
                    entry_id=e.entry_id,
                    dense=tuple(next(vectors)),
                    sparse=self.sparse.encode_document(e.content),
                    payload=entry_payload(e),
                )
                for e in group
            ]
            await self.index.upsert(ref, points)


class QdrantProjection(Processor):
    """The `qdrant-projection` processor (module doc). `name` may differ for a second consumer
    group (a rebuild); `clock` decides what is expired."""

    def __init__(
        self,
        index: VectorIndex,
        embedder: Embedder,
        sparse: SparseEncoder,
        *,
        name: str = NAME,
        clock: Clock = utc_now,
        close_index: bool = True,
        applied: AppliedOutbox | None = None,
    ) -> None:
        self.name = name
        self.source_topics = (SOURCE_TOPIC,)
        self.batch_wait_s = BATCH_WAIT_S
        self.embedder = embedder
        self.sink = ProjectionSink(index, embedder, sparse)
        self.clock = clock
        self.close_index = close_index
        self.applied = applied

    def plan(self, batch: Sequence[Record]) -> ProjectionPlan:
        return plan(batch, self.embedder.model_id, self.clock())

    async def process(self, batch: Sequence[Record]) -> None:
        result = self.plan(batch)
        if not result.empty:
            await self.sink.write(result)
        if self.applied is not None:
            try:
                await self.applied.record(outbox_seqs([record.headers for record in batch]))
            except Exception as exc:
                log.warning(
                    "%s: could not note the applied outbox records (%r); applied anyway", self.name, exc
                )

    async def start(self) -> None:
        if self.applied is not None:
            try:
                await self.applied.start()
            except Exception as exc:  # retried with the first batch
                log.warning(
                    "%s: cannot reach Postgres to note applied outbox records yet (%r)", self.name, exc
                )

    async def stop(self) -> None:
        try:
            if self.close_index:
                await self.sink.index.close()
        finally:
            if self.applied is not None:
                await self.applied.stop()
