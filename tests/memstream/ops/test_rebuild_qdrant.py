"""`rebuild_qdrant` on the real engines: Postgres (memory service and its outbox relay), the Tansu
broker and Qdrant Edge (the node's default index, through `Engines`).

The live projection is stood in for by a task that does what the processor's batch does (read
`memory.entries`, `QdrantProjection.process` on the shared index) without a consumer group.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, cast

import asyncpg
import pytest

from core.config import Settings
from core.memory.service import MemoryService
from core.stores.vectors import CollectionRef
from memstream.engines import Engines
from memstream.ops.progress import Progress
from memstream.ops.rebuild import RebuildFailed, rebuild_qdrant
from processors.qdrant_projection import QdrantProjection
from sinks.postgres.memory import PostgresMemoryStore
from sinks.postgres.outbox import PostgresEntriesOutbox
from sinks.qdrant.edge import QdrantEdgeIndex
from sinks.qdrant.generations import generation_of
from streams.admin import apply_topics
from streams.relays.memory_entries import ENTRIES_TOPIC, EntriesOutboxRelay
from streams.topics import load_topics
from tests.core.memory.helpers import scope
from tests.memstream.ops.live_projection import LiveProjection, eventually

MODEL = "all-MiniLM-L6-v2-q8"
REFS = [CollectionRef(environment="test", account_id=a, model_id=MODEL) for a in ("acme", "globex")]


@pytest.fixture
async def engines(settings: Settings, pool: asyncpg.Pool) -> AsyncIterator[Engines]:
    apply_topics(settings, load_topics())
    built = Engines(settings, pool=pool)
    try:
        yield built
    finally:
        await built.close()


def edge(engines: Engines) -> QdrantEdgeIndex:
    return cast(QdrantEdgeIndex, engines.index())


def live_projection(engines: Engines) -> LiveProjection:
    """The live processor's effect: every record of memory.entries applied to the live index."""
    projection = QdrantProjection(engines.index(), engines.embedder(), engines.sparse(), close_index=False)
    return LiveProjection(engines.settings, ENTRIES_TOPIC, projection.process, batch_size=200)


async def expected(pool: asyncpg.Pool) -> dict[str, dict[str, str]]:
    """Per account, entry id -> content hash: what the index must hold (Postgres is the authority)."""
    out: dict[str, dict[str, str]] = {"acme": {}, "globex": {}}
    for row in await pool.fetch("SELECT entry_id::text AS id, account_id, content_hash FROM memory_entries"):
        out[row["account_id"]][row["id"]] = row["content_hash"]
    return out


async def indexed(engines: Engines) -> dict[str, dict[str, str]]:
    index = edge(engines)
    return {
        ref.account_id: {e: str(p["content_hash"]) for e, p in (await index.points(ref)).items()}
        for ref in REFS
    }


async def payloads(engines: Engines) -> list[dict[str, dict[str, Any]]]:
    return [await edge(engines).points(ref) for ref in REFS]


async def populate(service: MemoryService, n: int, tag: str = "") -> None:
    """n entries over two accounts, some edited and some forgotten."""
    ids = []
    for i in range(n):
        account = "acme" if i % 3 else "globex"
        result = await service.store(
            scope(account=account),
            f"{tag}fact-{i}",
            f"{tag} fact number {i}: the build runs on machine {i % 7}.",
            "project_fact",
            scope_visibility="shared",
        )
        ids.append((account, result.entry.entry_id, f"{tag}fact-{i}"))
    for account, entry_id, _ in ids[::4]:
        await service.edit(scope(account=account), entry_id, content=f"{tag} edited {entry_id[:8]}")
    for account, _, key in ids[1::5]:
        await service.forget(scope(account=account), key)


async def published_and_projected(
    engines: Engines, pool: asyncpg.Pool, n: int
) -> tuple[MemoryService, EntriesOutboxRelay, dict[str, dict[str, str]]]:
    """`populate(n)`, published by the outbox relay and projected into the live index; returns the
    service, the relay (the caller closes it) and what the index holds."""
    service = MemoryService(PostgresMemoryStore(pool))
    await populate(service, n)
    relay = EntriesOutboxRelay(PostgresEntriesOutbox(pool), engines.settings)
    await relay.drain()
    want = await expected(pool)
    async with live_projection(engines):
        await eventually(lambda: _index_is(engines, want))
    return service, relay, want


async def test_rebuild_produces_an_identical_index(engines: Engines, pool: asyncpg.Pool) -> None:
    _, relay, want = await published_and_projected(engines, pool, 30)
    before = await payloads(engines)

    seen: list[Progress] = []
    report = await rebuild_qdrant(engines, progress=seen.append, batch_size=7)

    assert await payloads(engines) == before
    live = sum(len(v) for v in want.values())
    assert (report.target, report.rows) == ("qdrant", live)
    assert report.details["snapshot_entries"] == live and report.details["invalid"] == 0
    generation = await edge(engines).generation()
    assert generation != ""
    shards = [p.name for p in edge(engines).root.iterdir() if p.is_dir()]
    assert shards and all(generation_of(name) == generation for name in shards)
    reads = [p for p in seen if p.phase == "read"]
    assert reads and all(p.total == live for p in reads) and reads[-1].done == live
    indexing = [p for p in seen if p.phase == "index"]
    assert indexing and indexing[-1].done == indexing[-1].total == report.details["keys"]
    assert seen[-1].phase == "done" and seen[-1].done == live
    await relay.close()


async def _index_is(engines: Engines, want: dict[str, dict[str, str]]) -> bool:
    return await indexed(engines) == want


async def test_rebuild_while_the_live_projection_keeps_writing_loses_nothing(
    engines: Engines, pool: asyncpg.Pool
) -> None:
    service = MemoryService(PostgresMemoryStore(pool))
    await populate(service, 30)
    relay = EntriesOutboxRelay(PostgresEntriesOutbox(pool), engines.settings, poll_interval=0.1)
    stop = asyncio.Event()
    relaying = asyncio.create_task(relay.run(stop))
    async with live_projection(engines):

        async def keep_writing() -> None:
            """Store, edit and forget without pause (bounded: each round forgets the one before)."""
            n = 0
            while not stop.is_set():
                who = scope(user=f"writer-{n % 4}", account="acme" if n % 2 else "globex")
                stored = await service.store(
                    who, f"late-{n}", f"late fact {n}", "project_fact", scope_visibility="shared"
                )
                await service.edit(who, stored.entry.entry_id, content=f"late fact {n}, edited")
                if n >= 2:
                    previous = scope(user=f"writer-{(n - 2) % 4}", account="acme" if n % 2 else "globex")
                    await service.forget(previous, f"late-{n - 2}")
                n += 1

        writing = asyncio.create_task(keep_writing())
        report = await rebuild_qdrant(engines, progress=lambda _: None, batch_size=16)
        await asyncio.sleep(0.5)  # writes after the swap, too
        stop.set()
        await writing
        await relaying
        await relay.drain()
        want = await expected(pool)
        await eventually(lambda: _index_is(engines, want))
    assert report.details["snapshot_entries"] >= 24
    await relay.close()


async def test_a_failed_rebuild_leaves_the_live_index_untouched(engines: Engines, pool: asyncpg.Pool) -> None:
    service, relay, _ = await published_and_projected(engines, pool, 12)
    before = await payloads(engines)
    await populate(service, 3, tag="unpublished")  # the outbox relay is not running

    with pytest.raises(RebuildFailed, match=r"outbox row\(s\) up to seq \d+ unpublished"):
        await rebuild_qdrant(engines, progress=lambda _: None, idle_timeout_s=1.5)
    assert await payloads(engines) == before
    assert await edge(engines).generation() == ""
    assert all(generation_of(p.name) == "" for p in edge(engines).root.iterdir() if p.is_dir())

    # live writes are no longer mirrored; once the relay ran, a rebuild completes
    await relay.drain()
    async with live_projection(engines):
        want = await expected(pool)
        await eventually(lambda: _index_is(engines, want))
    report = await rebuild_qdrant(engines, progress=lambda _: None)
    assert report.rows == sum(len(v) for v in want.values())
    assert await indexed(engines) == want
    await relay.close()


async def test_a_topic_lacking_an_entrys_latest_record_is_named_as_the_reason(
    engines: Engines, pool: asyncpg.Pool
) -> None:
    _, relay, _ = await published_and_projected(engines, pool, 6)
    before = await payloads(engines)
    # as if the broker lost the latest record of one entry: Postgres has a version the topic never got
    entry_id = await pool.fetchval(
        "UPDATE memory_entries SET version = version + 1 WHERE entry_id = "
        "(SELECT entry_id FROM memory_entries ORDER BY entry_id LIMIT 1) RETURNING entry_id::text"
    )

    with pytest.raises(RebuildFailed) as failed:
        await rebuild_qdrant(engines, progress=lambda _: None, idle_timeout_s=1.5)
    message = str(failed.value)
    assert f"lacks the latest record of 1 memory entr(ies) (e.g. {entry_id})" in message
    assert "unpublished" not in message and "relay running" not in message
    assert await payloads(engines) == before
    assert await edge(engines).generation() == ""
    await relay.close()


async def test_needs_the_nodes_pool(base_settings: Settings) -> None:
    with pytest.raises(RebuildFailed, match="needs the node's Postgres pool"):
        await rebuild_qdrant(Engines(base_settings), progress=lambda _: None)
