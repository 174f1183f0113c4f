"""Thread deletions racing `rebuild clickhouse` and replays, on the real engines (SlateDB journal,
relay, Tansu, chdb, Postgres register): a deletion done before the rebuild is never rebuilt, and
one completed while the rebuild reads, swaps or catches up is gone from the swapped-in table, and
its message vectors written meanwhile are deleted too."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import asyncpg
import pytest

from core.stores.message_vectors import MessageVector
from core.stores.transcripts import TranscriptStore
from core.thread_deletion import ThreadDeletion
from memstream.engines import Engines
from memstream.ops.progress import Progress
from memstream.ops.rebuild import rebuild_clickhouse
from processors.clickhouse_projection import ClickHouseProjection
from sinks.postgres.deletions import PostgresDeletions
from sinks.postgres.threads import PostgresThreadStore
from sinks.slatedb.journal import SlateJournal
from streams.codecs.journal_deletions import TOPIC as DELETIONS_TOPIC
from streams.deletions import DeletionEvents
from streams.relays.journal import JOURNAL_TOPIC, Relay
from streams.runtime.processor import Record
from tests.memstream.ops.live_projection import LiveProjection, eventually
from tests.memstream.ops.test_rebuild_clickhouse import (  # noqa: F401  (fixtures)
    append,
    ch_settings,
    live_rows,
    shards_of,
)
from tests.memstream.ops.test_rebuild_clickhouse import engines as engines

THREAD = ("test", "acct-1", "th-1")
ROUNDS = 20  # 5 threads x 4 messages a round: th-1 has 80 of the 400


class Live:
    """The live processor: one `ClickHouseProjection` (with the register) fed by both its topics,
    one batch at a time, as the runtime feeds it."""

    def __init__(self, engines: Engines, register: PostgresDeletions) -> None:
        self.projection = ClickHouseProjection(engines.transcripts(), close_store=False, tombstones=register)
        self.lock = asyncio.Lock()
        self.messages = LiveProjection(engines.settings, JOURNAL_TOPIC, self.apply, batch_size=200)
        self.deletions = LiveProjection(engines.settings, DELETIONS_TOPIC, self.apply, batch_size=10)

    async def apply(self, batch: Sequence[Record]) -> None:
        async with self.lock:
            await self.projection.process(batch)

    async def __aenter__(self) -> Live:
        await self.projection.start()
        await self.messages.__aenter__()
        await self.deletions.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.messages.__aexit__(*exc)
        await self.deletions.__aexit__(*exc)


def deletion_of(engines: Engines, pool: asyncpg.Pool, events: DeletionEvents) -> ThreadDeletion:
    assert engines.journal is not None
    return ThreadDeletion(PostgresThreadStore(pool), engines.journal, PostgresDeletions(pool), events.publish)


async def delete_thread(deletions: ThreadDeletion, register: PostgresDeletions) -> int:
    record = await deletions.finish(await register.open(*THREAD, "bot", None))
    assert record.up_to_seq is not None
    return int(record.report["journal"]["messages"])


async def thread_rows(store: TranscriptStore, chdb_client: Any, database: str) -> int:
    return sum(1 for r in live_rows(chdb_client, database) if (r[0], r[1], r[4]) == THREAD)


async def test_a_deleted_thread_is_never_rebuilt(
    engines: Engines, journal: SlateJournal, pool: asyncpg.Pool, chdb_client: Any, clickhouse_database: str
) -> None:
    store = engines.transcripts()
    register = PostgresDeletions(pool)
    events = DeletionEvents(engines.settings)
    await append(journal, rounds=ROUNDS)
    relay = Relay(journal, engines.settings)
    while await relay.run_once():
        pass
    async with Live(engines, register):
        await eventually(lambda: _rows_are(store, 400))
        assert await delete_thread(deletion_of(engines, pool, events), register) == 80
        await eventually(lambda: _rows_are(store, 320))  # the live processor honoured the event
    assert await thread_rows(store, chdb_client, clickhouse_database) == 0
    # the topic still holds the deleted messages: a rebuild reads them and leaves them out
    report = await rebuild_clickhouse(engines, shards_of(engines), progress=lambda _: None, batch_size=150)
    assert (report.rows, report.details["deleted"]) == (320, 80)
    assert await thread_rows(store, chdb_client, clickhouse_database) == 0
    # a replay of journal.messages into the live table by a new processor adds nothing back
    async with Live(engines, register):
        await asyncio.sleep(2.0)
    assert await store.row_count() == 320 and await thread_rows(store, chdb_client, clickhouse_database) == 0
    events.close()
    await relay.close()


@pytest.mark.parametrize("during", ["read", "swap", "catch-up"])
async def test_a_deletion_racing_the_rebuild_does_not_survive_the_swap(
    during: str,
    engines: Engines,
    journal: SlateJournal,
    pool: asyncpg.Pool,
    chdb_client: Any,
    clickhouse_database: str,
) -> None:
    store = engines.transcripts()
    register = PostgresDeletions(pool)
    events = DeletionEvents(engines.settings)
    deletions = deletion_of(engines, pool, events)
    await append(journal, rounds=ROUNDS)
    relay = Relay(journal, engines.settings)
    stop = asyncio.Event()
    relaying = asyncio.create_task(relay.run(stop))
    racing: list[asyncio.Task[int]] = []
    vectors = engines.message_vectors()
    inserting: list[asyncio.Task[None]] = []

    def progress(p: Progress) -> None:
        if not inserting:  # vectors written after the rebuild started (its prune keeps them)
            rows = live_rows(chdb_client, clickhouse_database)
            written = [
                MessageVector(r[0], r[1], r[2], r[3], r[4], r[6], r[5], "m", b"\x01", r[7]) for r in rows
            ]
            inserting.append(asyncio.create_task(vectors.insert_vectors(written)))
        if p.phase == during and not racing:
            racing.append(asyncio.create_task(delete_thread(deletions, register)))

    async with Live(engines, register):
        await eventually(lambda: _rows_are(store, 400))
        await rebuild_clickhouse(engines, shards_of(engines), progress=progress, batch_size=50)
        assert racing, f"the rebuild never reported {during}"
        assert await racing[0] == 80
        await inserting[0]
        await eventually(lambda: _rows_are(store, 320))
        await asyncio.sleep(1.0)  # whatever is still in flight has landed
    assert await thread_rows(store, chdb_client, clickhouse_database) == 0
    assert await store.row_count() == 320
    # no live transcript-vectors here: a deletion registered while the rebuild reads deletes the
    # vectors written meanwhile (read again after the swap); one racing the swap may be registered
    # after that read, and one during the catch-up is: those are the live processor's
    # (tests/processors/test_transcript_vectors_deletions.py)
    vectored = await vectors.count_thread_rows(*THREAD, 1 << 62)
    assert vectored in ((0,) if during == "read" else (0, 80) if during == "swap" else (80,))
    left = chdb_client.query(f"SELECT count() FROM {clickhouse_database}.message_vectors FINAL")
    assert left.result_rows[0][0] == 320 + vectored
    stop.set()
    await relaying
    events.close()
    await relay.close()


async def _rows_are(store: TranscriptStore, n: int) -> bool:
    return await store.row_count() == n
