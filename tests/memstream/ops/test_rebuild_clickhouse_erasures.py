"""User erasures racing `rebuild clickhouse` and a replay, on the real engines (SlateDB journal, relay,
Tansu, chdb, Postgres registers): an erasure completed while the rebuild reads, swaps or catches up
leaves no row of the user's threads in the swapped-in table, a replay of `journal.messages` by a new
processor brings none back, and the same user id in another account keeps its thread. The harness
is the thread deletions' (`test_rebuild_clickhouse_deletions.py`)."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest

from core.stores.erasures import ErasureRecord
from core.thread_deletion import ThreadDeletion
from core.user_erasure import UserErasure
from memstream.engines import Engines
from memstream.ops.progress import Progress
from memstream.ops.rebuild import rebuild_clickhouse
from sinks.postgres.deletions import PostgresDeletions
from sinks.postgres.erasures import PostgresErasures
from sinks.postgres.threads import PostgresThreadStore
from sinks.slatedb.journal import SlateJournal
from streams.deletions import DeletionEvents
from streams.relays.journal import Relay
from tests.memstream.ops.live_projection import eventually
from tests.memstream.ops.test_rebuild_clickhouse import (  # noqa: F401  (fixtures)
    append,
    ch_settings,
    live_rows,
    shards_of,
)
from tests.memstream.ops.test_rebuild_clickhouse import engines as engines
from tests.memstream.ops.test_rebuild_clickhouse_deletions import Live

ROUNDS = 20
THREADS = 7  # thread t: account acct-{t % 2}, user user-{t % 3}, 4 messages a round
ERASED = {("acct-0", "th-0"), ("acct-0", "th-6")}  # user-0 of acct-0
KEPT_ELSEWHERE = ("acct-1", "th-3")  # user-0 of acct-1: another user


def rows_by_thread(chdb_client: Any, database: str) -> dict[tuple[str, str], int]:
    counts: dict[tuple[str, str], int] = {}
    for row in live_rows(chdb_client, database):
        key = (row[1], row[4])
        counts[key] = counts.get(key, 0) + 1
    return counts


async def setup(
    engines: Engines, journal: SlateJournal, pool: asyncpg.Pool
) -> tuple[UserErasure, DeletionEvents]:
    """The journal's threads with their rows (the erasure lists the threads store), and the erasure."""
    threads = PostgresThreadStore(pool)
    for t in range(THREADS):
        await threads.upsert("test", f"acct-{t % 2}", f"th-{t}", "bot", f"user-{t % 3}", {})
    await append(journal, rounds=ROUNDS, threads=THREADS)
    events = DeletionEvents(engines.settings)
    deletion = ThreadDeletion(threads, journal, PostgresDeletions(pool), events.publish)
    return UserErasure(threads, deletion, PostgresErasures(pool)), events


@pytest.mark.parametrize("during", ["read", "swap", "catch-up"])
async def test_an_erasure_racing_the_rebuild_and_a_replay_leaves_nothing_of_the_user(
    during: str,
    engines: Engines,
    journal: SlateJournal,
    pool: asyncpg.Pool,
    chdb_client: Any,
    clickhouse_database: str,
) -> None:
    store = engines.transcripts()
    register = PostgresDeletions(pool)
    erasure, events = await setup(engines, journal, pool)
    total = ROUNDS * THREADS * 4
    relay = Relay(journal, engines.settings)
    stop = asyncio.Event()
    relaying = asyncio.create_task(relay.run(stop))
    racing: list[asyncio.Task[ErasureRecord]] = []

    def progress(p: Progress) -> None:
        if p.phase == during and not racing:
            racing.append(asyncio.create_task(erasure.erase_in("test", "acct-0", "user-0")))

    async def row_count_is(n: int) -> bool:
        return await store.row_count() == n

    async with Live(engines, register):
        await eventually(lambda: row_count_is(total))
        await rebuild_clickhouse(engines, shards_of(engines), progress=progress, batch_size=50)
        assert racing, f"the rebuild never reported {during}"
        record = await racing[0]
        assert record.completed_at is not None
        assert sorted(d["thread_id"] for d in record.report["threads"]["deletions"]) == ["th-0", "th-6"]
        assert record.report["threads"]["deleted"]["journal"] == {"messages": 2 * ROUNDS * 4}
        await eventually(lambda: row_count_is(total - 2 * ROUNDS * 4))
        await asyncio.sleep(1.0)  # whatever is still in flight has landed
    counts = rows_by_thread(chdb_client, clickhouse_database)
    assert not ERASED & set(counts) and counts[KEPT_ELSEWHERE] == ROUNDS * 4
    assert sum(counts.values()) == total - 2 * ROUNDS * 4

    # a replay of journal.messages from its start by a new processor brings nothing back
    async with Live(engines, register):
        await asyncio.sleep(2.0)
    assert rows_by_thread(chdb_client, clickhouse_database) == counts
    stop.set()
    await relaying
    events.close()
    await relay.close()
