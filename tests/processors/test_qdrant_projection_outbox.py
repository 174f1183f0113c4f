"""From Postgres to the index: the records the service commits to `memory_outbox` (as the relay
publishes them) projected into both real index adapters - stores, forgets, edits and the hygiene
pass (expiry removes the point, decay lowers the payload's importance), and a replay of the whole
log into an empty index rebuilds the same points."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import asyncpg
import pytest

from core.memory.hygiene import run_hygiene
from core.memory.service import MemoryService
from core.stores.vectors import CollectionRef
from processors.qdrant_projection import QdrantProjection, entry_payload
from sinks.embeddings.bm25 import Bm25Sparse
from sinks.embeddings.minilm import OfflineMiniLM
from sinks.postgres.memory import PostgresMemoryStore
from streams.codecs.memory_entries import encode_value
from streams.runtime.processor import Record
from tests.core.memory.helpers import FakeClock, scope
from tests.processors.projection_support import TOPIC
from tests.sinks.qdrant.adapters import KINDS, Index, open_adapter

MODEL = "all-MiniLM-L6-v2-q8"
ACME = CollectionRef(environment="test", account_id="acme", model_id=MODEL)
GLOBEX = CollectionRef(environment="test", account_id="globex", model_id=MODEL)


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def index(kind: str, tmp_path: Path) -> AsyncIterator[Index]:
    opened = open_adapter(kind, tmp_path / "live")
    yield opened
    await opened.close()


class Log:
    """The entries topic as the relay would fill it: the outbox rows, in seq order, drained."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self.records: list[Record] = []

    async def drain(self) -> list[Record]:
        rows = await self.pool.fetch("SELECT seq, record_key, value FROM memory_outbox ORDER BY seq")
        await self.pool.execute("DELETE FROM memory_outbox WHERE seq <= $1", rows[-1]["seq"] if rows else 0)
        new = [
            Record(
                topic=TOPIC,
                partition=0,
                offset=len(self.records) + n,
                key=row["record_key"].encode(),
                value=encode_value(row["value"]),
                headers=(),
                timestamp_ms=None,
            )
            for n, row in enumerate(rows)
        ]
        self.records.extend(new)
        return new


async def apply(projection: QdrantProjection, records: Sequence[Record]) -> None:
    if records:
        await projection.process(records)


async def test_hygiene_changes_reach_the_index_and_a_replay_rebuilds_it(
    pool: asyncpg.Pool, index: Index, kind: str, embedder: OfflineMiniLM, tmp_path: Path
) -> None:
    clock = FakeClock()
    service = MemoryService(PostgresMemoryStore(pool), clock)
    log = Log(pool)
    projection = QdrantProjection(index, embedder, Bm25Sparse(), clock=clock, close_index=False)

    async def store(key: str, content: str, category: str, **kw: object) -> str:
        result = await service.store(scope(), key, content, category, scope_visibility="shared", **kw)  # type: ignore[arg-type]
        return result.entry.entry_id

    seen = await store("seen", "The user looked tired today.", "observation")
    fact = await store("fact", "The project deploys on Fridays.", "project_fact", importance=0.5)
    profile = await store("profile", "The user is called Ada.", "user_profile", importance=0.8)
    gone = await store("gone", "An obsolete fact.", "project_fact")
    mine = await service.store(scope(), "pin", "Locker 12.", "user_profile", scope_visibility="private")
    other = await service.store(
        scope(account="globex"), "fact", "Globex runs Oracle.", "project_fact", scope_visibility="shared"
    )
    await service.forget(scope(), "gone")
    await service.edit(scope(), fact, content="The project deploys on Mondays.")
    await apply(projection, await log.drain())
    points = await index.points(ACME)
    assert set(points) == {seen, fact, profile, mine.entry.entry_id}
    assert gone not in points and points[mine.entry.entry_id]["user_id"] == "alice"
    assert points[fact]["content_hash"] == (await service.get(scope(), fact)).content_hash
    assert set(await index.points(GLOBEX)) == {other.entry.entry_id}

    # day 30: the observation expires; the tombstone removes its point
    clock.advance(days=30)
    report = await run_hygiene(service, clock())
    assert (report.expired, report.decayed) == (1, 0)
    await apply(projection, await log.drain())
    assert seen not in await index.points(ACME)

    # day 90: the idle project_fact decays (0.5 -> 0.4); the index payload follows; user_profile never
    clock.advance(days=60)
    report = await run_hygiene(service, clock())
    assert report.decayed == 2  # the fact (acme) and globex's fact
    await apply(projection, await log.drain())
    points = await index.points(ACME)
    assert points[fact]["importance"] == pytest.approx(0.4)
    assert points[profile]["importance"] == pytest.approx(0.8)
    decayed = await service.get(scope(), fact)
    assert points[fact] == {**entry_payload(decayed), "entry_id": fact}
    assert (await index.points(GLOBEX))[other.entry.entry_id]["importance"] == pytest.approx(0.4)

    # replay the whole log into an empty index, in other batch sizes: exactly the same points
    for size in (1, 3, len(log.records)):
        rebuilt = open_adapter(kind, tmp_path / f"rebuilt-{size}")
        try:
            again = QdrantProjection(rebuilt, embedder, Bm25Sparse(), clock=clock, close_index=False)
            for start in range(0, len(log.records), size):
                await apply(again, log.records[start : start + size])
            for ref in (ACME, GLOBEX):
                assert await rebuilt.points(ref) == await index.points(ref)
        finally:
            await rebuilt.close()
    # at-least-once: re-applying the whole log to the live index changes nothing
    before = await index.points(ACME)
    await apply(projection, log.records)
    assert await index.points(ACME) == before
