"""`rebuild_clickhouse` on the real engines: SlateDB journal, its relay, the Tansu broker and chdb.

The live projection is stood in for by a task that does exactly what the processor's batch does
(read `journal.messages`, `clickhouse_projection.rows`, `store.insert`) without a consumer group.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

import asyncpg
import pytest

from core.config import Settings
from core.journal.models import NewMessage, ThreadRef, ToolCall
from core.stores.message_vectors import MessageVector
from core.stores.transcripts import TranscriptStore
from memstream.engines import Engines
from memstream.ops.progress import Progress
from memstream.ops.rebuild import RebuildFailed, rebuild_clickhouse
from processors import clickhouse_projection
from sinks.clickhouse.schema import COLUMNS
from sinks.slatedb.journal import SlateJournal
from streams.admin import apply_topics
from streams.journal_shards import LocalShard
from streams.relays.journal import DEFAULT_CURSOR, JOURNAL_TOPIC, Relay
from streams.runtime.processor import Record
from streams.topics import load_topics
from tests.memstream.ops.live_projection import LiveProjection, eventually
from tests.memstream.ops.local_shards import local_shards
from tests.sinks.clickhouse.rows import row


@pytest.fixture
def ch_settings(transcript_settings: Settings) -> Settings:
    apply_topics(transcript_settings, load_topics())
    return transcript_settings


@pytest.fixture
async def engines(ch_settings: Settings, journal: SlateJournal, pool: asyncpg.Pool) -> AsyncIterator[Engines]:
    built = Engines(ch_settings, journal=journal, pool=pool)
    await built.transcripts().ensure_schema()
    try:
        yield built
    finally:
        await built.close()


async def append(journal: SlateJournal, rounds: int, *, threads: int = 5, tag: str = "") -> None:
    """`rounds` x `threads` exchanges: user, assistant with a tool call, tool result, answer."""
    for r in range(rounds):
        for t in range(threads):
            ref = ThreadRef(environment="test", account_id=f"acct-{t % 2}", thread_id=f"th-{t}")
            call_id = f"call-{tag}{r}-{t}"
            await journal.append(
                ref,
                "bot",
                f"user-{t % 3}",
                [
                    NewMessage(role="user", content=f"{tag} question {r} about topic {t}"),
                    NewMessage(
                        role="assistant",
                        reasoning="thinking",
                        tool_call=ToolCall(id=call_id, name="lookup", arguments='{"q": 1}'),
                    ),
                    NewMessage(role="tool", tool_call=ToolCall(id=call_id, result="x" * (50 + r))),
                    NewMessage(role="assistant", content=f"answer {r} to {t}"),
                ],
            )


def shards_of(engines: Engines) -> list[LocalShard]:
    """The engines' journal as the node's one shard, with a relay of its own (it reads the durable
    cursor, whatever relay moved it)."""
    journal = engines.journal
    assert isinstance(journal, SlateJournal)
    return local_shards((journal, Relay(journal, engines.settings)))


def live_projection(settings: Settings, store: TranscriptStore) -> LiveProjection:
    """The live processor's effect: every record of journal.messages inserted into the live table."""
    projection = clickhouse_projection.ClickHouseProjection(store, close_store=False)

    async def insert(batch: Sequence[Record]) -> None:
        await projection.process(batch)

    return LiveProjection(settings, JOURNAL_TOPIC, insert, batch_size=500)


async def published_and_projected(engines: Engines, journal: SlateJournal, rounds: int) -> Relay:
    """`append(journal, rounds)`, published by the relay and projected into the live table; returns
    the relay (the caller closes it)."""
    store = engines.transcripts()
    await append(journal, rounds=rounds)
    relay = Relay(journal, engines.settings)
    while await relay.run_once():
        pass
    async with live_projection(engines.settings, store):
        await eventually(lambda: _count_is(store, rounds * 20))
    return relay


def live_rows(chdb_client: Any, database: str, table: str = "messages") -> list[tuple[Any, ...]]:
    columns = ", ".join(f"`{c}`" for c in COLUMNS)
    order = "environment, account_id, thread_id, offset"
    sql = f"SELECT {columns} FROM {database}.{table} FINAL ORDER BY {order}"
    return list(chdb_client.query(sql).result_rows)


def tables(chdb_client: Any, database: str) -> set[str]:
    rows = chdb_client.query(f"SELECT name FROM system.tables WHERE database = '{database}'").result_rows
    return {r[0] for r in rows}


async def test_rebuild_produces_an_identical_projection(
    engines: Engines, journal: SlateJournal, chdb_client: Any, clickhouse_database: str
) -> None:
    relay = await published_and_projected(engines, journal, rounds=20)  # 400 messages
    before = live_rows(chdb_client, clickhouse_database)
    assert len(before) == 400

    seen: list[Progress] = []
    report = await rebuild_clickhouse(engines, shards_of(engines), progress=seen.append, batch_size=150)

    assert live_rows(chdb_client, clickhouse_database) == before
    assert (report.target, report.rows) == ("clickhouse", 400)
    assert report.details["target_seq"] == 400 and report.details["inserted"] >= 400
    assert report.details["invalid"] == 0
    assert tables(chdb_client, clickhouse_database) == {"messages", "messages_dedup", "message_vectors"}
    reads = [p for p in seen if p.phase == "read"]
    assert reads and all(p.total == 400 for p in reads)
    assert reads[-1].done == 400 and all(0 <= p.done <= 400 for p in reads)
    assert [p.phase for p in seen][-1] == "done" and seen[-1].done == 400
    assert {"swap"} <= {p.phase for p in seen}
    await relay.close()


async def test_rebuild_prunes_the_vectors_of_rows_it_removed(
    engines: Engines, journal: SlateJournal, chdb_client: Any, clickhouse_database: str
) -> None:
    relay = await published_and_projected(engines, journal, rounds=2)  # 40 messages
    store = engines.transcripts()
    stray = row("th-stray", 0, "a row the journal does not have", account_id="acct-0", agent_id="bot")
    await store.insert([stray])  # e.g. left by an earlier projection: a rebuild removes it
    real = live_rows(chdb_client, clickhouse_database)[:3]
    keys = [(r[0], r[1], r[2], r[3], r[4], r[6], r[5]) for r in real] + [
        ("test", "acct-0", "bot", None, "th-stray", 0, stray.message_id)
    ]
    vectors = engines.message_vectors()
    seqs = [r[7] for r in real] + [stray.seq]
    await vectors.insert_vectors(
        [MessageVector(*key, model="m", vector=b"\x01", seq=seq) for key, seq in zip(keys, seqs, strict=True)]
    )

    await rebuild_clickhouse(engines, shards_of(engines), progress=lambda _: None)

    left = chdb_client.query(
        f"SELECT thread_id, offset FROM {clickhouse_database}.message_vectors ORDER BY thread_id, offset"
    ).result_rows
    assert sorted((k[4], k[5]) for k in keys[:3]) == [tuple(r) for r in left]  # the stray's is gone
    await relay.close()


async def _count_is(store: TranscriptStore, n: int) -> bool:
    return await store.row_count() == n


async def test_rebuild_while_the_live_projection_keeps_writing_loses_nothing(
    engines: Engines, journal: SlateJournal, chdb_client: Any, clickhouse_database: str
) -> None:
    store = engines.transcripts()
    await append(journal, rounds=30)  # 600 messages before the rebuild
    relay = Relay(journal, engines.settings)
    stop = asyncio.Event()
    relaying = asyncio.create_task(relay.run(stop))
    async with live_projection(engines.settings, store):
        appending = asyncio.create_task(_keep_appending(journal, stop))
        seen: list[Progress] = []
        report = await rebuild_clickhouse(engines, shards_of(engines), progress=seen.append, batch_size=100)
        await asyncio.sleep(0.5)  # a few appends after the swap, too
        stop.set()
        await appending
        await relaying
        while await relay.run_once():
            pass
        total = await journal.last_seq()
        assert total > 600
        await eventually(lambda: _count_is(store, total))
    assert report.details["target_seq"] >= 600
    # appends landed between the rebuild's read and the swap: the catch-up covered them
    assert report.details["target_seq_after_swap"] > report.details["target_seq"]
    rows = live_rows(chdb_client, clickhouse_database)
    assert sorted(r[COLUMNS.index("seq")] for r in rows) == list(range(1, total + 1))
    assert tables(chdb_client, clickhouse_database) == {"messages", "messages_dedup", "message_vectors"}
    await relay.close()


async def _keep_appending(journal: SlateJournal, stop: asyncio.Event) -> None:
    n = 0
    while not stop.is_set():
        await append(journal, rounds=1, threads=3, tag=f"late{n}-")
        n += 1
        await asyncio.sleep(0.02)


async def test_rebuild_completes_under_a_slow_steady_trickle(
    engines: Engines, journal: SlateJournal, chdb_client: Any, clickhouse_database: str
) -> None:
    """A few messages a second: reads are never empty and a batch never fills, yet the tail of the
    range is inserted and the rebuild completes well within its idle timeout."""
    store = engines.transcripts()
    await append(journal, rounds=5)  # 100 messages before the rebuild
    relay = Relay(journal, engines.settings)
    stop = asyncio.Event()
    relaying = asyncio.create_task(relay.run(stop))
    async with live_projection(engines.settings, store):

        async def trickle() -> None:  # one message every 0.2 s
            n = 0
            while not stop.is_set():
                ref = ThreadRef(environment="test", account_id="acct-0", thread_id="th-trickle")
                await journal.append(ref, "bot", "user-0", [NewMessage(role="user", content=f"drip {n}")])
                n += 1
                await asyncio.sleep(0.2)

        trickling = asyncio.create_task(trickle())
        await asyncio.sleep(1.0)
        report = await rebuild_clickhouse(
            engines, shards_of(engines), progress=lambda _: None, idle_timeout_s=3.0
        )
        stop.set()
        await trickling
        await relaying
        while await relay.run_once():
            pass
        total = await journal.last_seq()
        await eventually(lambda: _count_is(store, total))
    assert report.details["target_seq"] > 100
    rows = live_rows(chdb_client, clickhouse_database)
    assert sorted(r[COLUMNS.index("seq")] for r in rows) == list(range(1, total + 1))
    await relay.close()


async def test_a_topic_missing_seqs_fails_and_leaves_the_live_table_untouched(
    engines: Engines, journal: SlateJournal, chdb_client: Any, clickhouse_database: str
) -> None:
    relay = await published_and_projected(engines, journal, rounds=5)  # 100 messages
    before = live_rows(chdb_client, clickhouse_database)
    await append(journal, rounds=1)  # 20 more, never published...
    await journal.set_cursor(DEFAULT_CURSOR, 120)  # ...though the relay's cursor says they were

    seen: list[Progress] = []
    with pytest.raises(RebuildFailed, match=r"lacks seq 101 .*memstream republish --from-seq 101"):
        await rebuild_clickhouse(engines, shards_of(engines), progress=seen.append, idle_timeout_s=1.5)
    assert live_rows(chdb_client, clickhouse_database) == before
    assert tables(chdb_client, clickhouse_database) == {"messages", "messages_dedup", "message_vectors"}
    assert max(p.done for p in seen if p.phase == "read") == 100

    # the relay is behind: the error says so
    await journal.set_cursor(DEFAULT_CURSOR, 100)
    with pytest.raises(RebuildFailed, match="relay has published the journal up to seq 100 of 120"):
        await rebuild_clickhouse(engines, shards_of(engines), progress=seen.append, idle_timeout_s=1.5)
    assert live_rows(chdb_client, clickhouse_database) == before

    # once republished, the rebuild completes
    while await relay.run_once():
        pass
    report = await rebuild_clickhouse(engines, shards_of(engines), progress=seen.append)
    assert report.rows == 120
    await relay.close()


async def test_needs_the_nodes_journal(ch_settings: Settings) -> None:
    with pytest.raises(RebuildFailed, match="needs the node's journal"):
        await rebuild_clickhouse(Engines(ch_settings), [], progress=lambda _: None)
