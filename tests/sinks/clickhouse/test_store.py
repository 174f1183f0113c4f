"""ClickHouseTranscriptStore against the real embedded engine (chdb): what only this adapter does
(columns, the dedup view, ranking scores, bound SQL, tokenizer, rebuild tables, instance ids, the
chdb thread). The `TranscriptStore` contract it shares with the fake is
`tests/core/stores/test_transcripts.py`."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from core.stores.transcripts import TranscriptScope, TranscriptUnavailable
from core.transcripts.bm25 import scores
from core.transcripts.terms import query_terms
from processors.transcript_context import with_context
from sinks.clickhouse.schema import create_database, create_table
from sinks.clickhouse.store import ClickHouseTranscriptStore
from tests.sinks.clickhouse.rows import BASE_TIME, row

SCOPE = TranscriptScope(environment="test", account_id="acct", agent_id="agent")


async def test_insert_then_read_back_every_column(
    transcript_store: ClickHouseTranscriptStore, chdb_client: Any
) -> None:
    stored = row(
        "t1",
        0,
        "hello",
        role="assistant",
        user_id="u1",
        reasoning="thinking",
        tool_call_id="call-1",
        tool_name="lookup",
        tool_arguments='{"q": 1}',
        created_at=BASE_TIME,
    )
    await transcript_store.insert([stored])
    rows = chdb_client.query(
        f"SELECT environment, account_id, agent_id, user_id, thread_id, message_id, offset, seq, role, "
        f"content, reasoning, tool_call_id, tool_name, tool_arguments, tool_result, created_at, token_count "
        f"FROM {transcript_store.database}.messages"
    ).result_rows
    assert len(rows) == 1
    values = list(rows[0])
    assert values[:15] == [
        "test", "acct", "agent", "u1", "t1", "t1-m0", 0, 1, "assistant",
        "hello", "thinking", "call-1", "lookup", '{"q": 1}', None,
    ]  # fmt: skip
    assert values[15].replace(tzinfo=None) == BASE_TIME.replace(tzinfo=None)
    assert values[16] == 1


async def test_one_insert_may_span_more_months_than_the_default_partition_limit(
    transcript_store: ClickHouseTranscriptStore, chdb_client: Any
) -> None:
    """Imported history keeps its `created_at`: 15 years of monthly messages (180 partitions of
    `toYYYYMM(created_at)`) in one batch are one insert, not an error."""
    rows = [
        row("old", i, f"month {i}", created_at=datetime(2010 + i // 12, i % 12 + 1, 1, tzinfo=UTC))
        for i in range(180)
    ]
    await transcript_store.insert(rows)
    found = chdb_client.query(
        f"SELECT count(), uniqExact(toYYYYMM(created_at)), min(created_at) "
        f"FROM {transcript_store.database}.messages"
    ).result_rows[0]
    assert found[:2] == (180, 180)
    assert found[2].replace(tzinfo=None) == datetime(2010, 1, 1)


async def test_terms_are_stored(transcript_store: ClickHouseTranscriptStore, chdb_client: Any) -> None:
    await transcript_store.insert(
        [row("t1", 0, "Caroline's support groups"), row("t1", 1, "the", role="assistant")]
    )
    db = transcript_store.database
    stored = chdb_client.query(f"SELECT offset, terms FROM {db}.messages ORDER BY offset").result_rows
    assert [tuple(r) for r in stored] == [(0, "carolin support group"), (1, "")]


async def test_ensure_schema_upgrades_a_table_made_before_terms(
    clickhouse_dsn: str, clickhouse_database: str, chdb_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A live table of an earlier version keeps its rows (with empty terms until a rebuild) and
    takes the new columns and new rows."""
    db = clickhouse_database
    old_ddl = create_table(db).replace("    terms String,\n    context_terms String,\n", "")
    assert "terms" not in old_ddl
    chdb_client.command(create_database(db))
    chdb_client.command(old_ddl)
    chdb_client.command(
        f"INSERT INTO {db}.messages (environment, account_id, agent_id, thread_id, message_id, offset, "
        "seq, role, content, created_at, token_count) "
        "VALUES ('test', 'acct', 'agent', 't1', 'm0', 0, 1, 'user', 'old groups', now64(6), 2)"
    )
    store = ClickHouseTranscriptStore(clickhouse_dsn, database=db)
    try:
        with caplog.at_level(logging.WARNING, logger="memstream.clickhouse"):
            await store.ensure_schema()
            await store.ensure_schema()  # idempotent, and warns only while the columns are missing
        warnings = [r.getMessage() for r in caplog.records if "earlier version" in r.getMessage()]
        assert len(warnings) == 1 and "its 1 rows" in warnings[0]
        assert "memstream rebuild clickhouse" in warnings[0]
        await store.insert([replace(row("t1", 1, "new groups"), context_terms=("old", "group"))])
        stored = chdb_client.query(
            f"SELECT offset, terms, context_terms FROM {db}.messages ORDER BY offset"
        ).result_rows
        assert [tuple(r) for r in stored] == [(0, "", ""), (1, "new group", "old group")]
        assert await store.row_count() == 2
    finally:
        await store.close()


async def test_a_table_made_before_journal_shards_takes_the_shard_column(
    clickhouse_dsn: str, clickhouse_database: str, chdb_client: Any
) -> None:
    """Rows projected before shards existed are of shard 0; new rows keep their shard."""
    db = clickhouse_database
    old_ddl = create_table(db).replace("    shard UInt16 DEFAULT 0,\n", "")
    assert "shard" not in old_ddl
    chdb_client.command(create_database(db))
    chdb_client.command(old_ddl)
    chdb_client.command(
        f"INSERT INTO {db}.messages (environment, account_id, agent_id, thread_id, message_id, offset, "
        "seq, role, content, created_at, token_count, terms, context_terms) "
        "VALUES ('test', 'acct', 'agent', 't1', 'm0', 0, 1, 'user', 'old', now64(6), 1, 'old', '')"
    )
    store = ClickHouseTranscriptStore(clickhouse_dsn, database=db)
    try:
        await store.ensure_schema()
        await store.ensure_schema()  # idempotent
        await store.insert([replace(row("t2", 0, "new", seq=1), shard=2)])
        columns = [c[0] for c in chdb_client.query(f"DESCRIBE TABLE {db}.messages").result_rows]
        assert columns[columns.index("seq") + 1] == "shard"  # where a new table has it
        stored = chdb_client.query(
            f"SELECT thread_id, seq, shard FROM {db}.messages ORDER BY thread_id"
        ).result_rows
        assert [tuple(r) for r in stored] == [("t1", 1, 0), ("t2", 1, 2)]
    finally:
        await store.close()


async def test_dedup_view_shows_one_row_per_message(
    transcript_store: ClickHouseTranscriptStore, chdb_client: Any
) -> None:
    rows = [row("t1", i, "x") for i in range(3)]
    await transcript_store.insert(rows)
    await transcript_store.insert(rows)
    db = transcript_store.database
    assert chdb_client.query(f"SELECT count() FROM {db}.messages").result_rows[0][0] == 6
    assert chdb_client.query(f"SELECT count() FROM {db}.messages_dedup").result_rows[0][0] == 3


async def test_search_ranks_by_bm25_of_the_scope_then_recency(
    transcript_store: ClickHouseTranscriptStore,
) -> None:
    rows = [
        row("t1", 0, "The red apple fell."),
        row("t1", 1, "A red APPLE and a green pear", role="assistant"),
        row("t2", 0, "apple apple apple apple"),
        row("t2", 1, "nothing relevant here"),
        row("t2", 2, "red"),
        row("t3", 0, "red"),  # same document as t2/2, older (BASE_TIME + 0 min)
        row("t3", 1, "a pear tree in the system prompt", role="system"),  # not a document
    ]
    # documents here are the terms alone; `context_terms` add to them (next test)
    await transcript_store.insert(rows)
    await transcript_store.insert(rows)  # copies not merged yet count once, in results and statistics
    query = "Apples, red pear?"
    hits = await transcript_store.search(SCOPE, query, limit=10)
    documents = [r.terms for r in rows if r.role != "system"]
    keys = [(r.thread_id, r.offset) for r in rows if r.role != "system"]
    expected = dict(zip(keys, scores(query_terms(query), documents), strict=True))
    assert [(h.thread_id, h.offset) for h in hits] == [("t1", 1), ("t1", 0), ("t2", 0), ("t2", 2), ("t3", 0)]
    for h in hits:
        assert h.score == pytest.approx(expected[(h.thread_id, h.offset)], rel=1e-9)
    assert hits[3].score == hits[4].score  # a tie: the newer first
    assert hits[0].role == "assistant" and hits[0].message_id == "t1-m1"
    assert hits[0].created_at.tzinfo is not None
    limited = await transcript_store.search(SCOPE, "apple red pear", limit=2)
    assert [(h.thread_id, h.offset) for h in limited] == [("t1", 1), ("t1", 0)]
    # within one thread, the statistics are the thread's (the same filter as the search)
    in_thread = await transcript_store.search(SCOPE, "apple red", thread_id="t2")
    t2 = [r for r in rows if r.thread_id == "t2"]
    t2_scores = scores(query_terms("apple red"), [r.terms for r in t2])
    assert [(h.offset, h.score) for h in in_thread] == [
        (t2[0].offset, pytest.approx(t2_scores[0])),
        (t2[2].offset, pytest.approx(t2_scores[2])),
    ]


async def test_a_document_is_the_terms_and_the_context_terms(
    transcript_store: ClickHouseTranscriptStore,
) -> None:
    rows = with_context(
        [
            row("t1", 0, "Where did Melanie go camping?"),
            row("t1", 1, "To the redwoods.", role="assistant"),
            row("t1", 2, "", role="tool", tool_call_id="c1", tool_result="camping"),
            row("t1", 3, "Camping again next year", role="assistant"),
            row("t2", 0, "melanie melanie"),
        ],
        {},
    )
    await transcript_store.insert(rows)
    query = "melanie camping"
    searched = [r for r in rows if r.role != "tool"]
    expected = scores(query_terms(query), [r.terms + r.context_terms for r in searched])
    hits = await transcript_store.search(SCOPE, query)
    assert {(h.thread_id, h.offset): h.score for h in hits} == {
        (r.thread_id, r.offset): pytest.approx(score) for r, score in zip(searched, expected, strict=True)
    }
    assert ("t1", 1) in {(h.thread_id, h.offset) for h in hits}  # found by its context alone
    assert not set(query_terms(query)) & set(rows[1].terms)


async def test_statistics_never_cross_scopes(transcript_store: ClickHouseTranscriptStore) -> None:
    """N, avgdl and df come from the caller's scope only: another account, agent, user or
    environment filling the table with the query's terms changes neither the scores nor the order."""
    mine = [row("t1", 0, "mango smoothie recipe"), row("t1", 1, "banana bread", role="assistant")]
    await transcript_store.insert(mine)
    before = await transcript_store.search(SCOPE, "mango banana")
    crowd = [
        row(
            f"x{i}",
            0,
            "mango mango banana",
            account_id=account,
            agent_id=agent,
            user_id=user,
            environment=env,
        )
        for i, (env, account, agent, user) in enumerate(
            [("test", "other", "agent", None), ("test", "acct", "agent-2", None)] * 20
            + [("test", "acct", "agent", "u1"), ("prod", "acct", "agent", None)] * 20
        )
    ]
    await transcript_store.insert(crowd)
    after = await transcript_store.search(SCOPE, "mango banana")
    assert [(h.thread_id, h.offset, h.score) for h in after] == [
        (h.thread_id, h.offset, h.score) for h in before
    ]
    expected = scores(["mango", "banana"], [r.terms for r in mine])
    assert sorted(h.score for h in after) == pytest.approx(sorted(expected))
    # and the crowded user's own scope sees only its own 20 messages
    u1 = TranscriptScope(environment="test", account_id="acct", agent_id="agent", user_id="u1")
    theirs = await transcript_store.search(u1, "mango", limit=50)
    assert len(theirs) == 20 and {h.thread_id for h in theirs} == {f"x{i}" for i in range(40, 80, 2)}


async def test_the_stores_own_statements_bind_every_value(
    transcript_store: ClickHouseTranscriptStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every statement the store's reads send carries values only as `{name:Type}` parameters
    (`param_*`: bound by the server over HTTP, by chdb's own binding in-process): the hostile text
    never appears in the SQL, and each read still finds what it should with it as plain data."""
    from clickhouse_connect.driver._backendclient import SyncBackendClient
    from clickhouse_connect.driver.query import QueryContext

    hostile = "x') OR 1=1 --"
    await transcript_store.insert(
        [row("t1", 0, f"note {hostile}"), row("t1", 1, "", role="tool", tool_call_id="c1", tool_result="r")]
    )
    sent: list[tuple[str, dict[str, Any]]] = []
    original = SyncBackendClient._query_with_context

    def recording(client: SyncBackendClient, context: QueryContext) -> Any:
        sent.append((context.final_query, dict(context.bind_params)))
        return original(client, context)

    monkeypatch.setattr(SyncBackendClient, "_query_with_context", recording)
    scope = TranscriptScope(environment=hostile, account_id=hostile, agent_id=hostile, user_id=hostile)
    assert await transcript_store.search(scope, hostile, thread_id=hostile) == []
    assert await transcript_store.tool_call(scope, hostile, thread_id=hostile) == []
    assert await transcript_store.thread_counts(hostile) == []
    [call] = await transcript_store.tool_call(SCOPE, "c1")
    hostile_call = replace(call, thread_id=hostile, tool_call_id=hostile)
    assert await transcript_store.tool_call_bytes(scope, hostile_call, "result", 0, 10) == b""
    [hit] = await transcript_store.search(SCOPE, hostile)
    assert hit.offset == 0
    # the values travel escaped for the parameter format: look for the part without quotes
    reads = [(sql, params) for sql, params in sent if "OR 1=1 --" in " ".join(map(str, params.values()))]
    assert len(reads) == 4  # the last search sends the query's terms, not its text
    for sql, params in reads:
        assert "1=1" not in sql
        assert params and all(name.startswith("param_") for name in params)


async def test_search_matches_query_and_messages_through_the_same_terms(
    transcript_store: ClickHouseTranscriptStore,
) -> None:
    """Both sides are made terms by `core.transcripts.terms` (NFKC, lower case, Snowball stems):
    inflections, case, fullwidth forms and other scripts meet."""
    await transcript_store.insert(
        [
            row("t1", 0, "Trip to İstanbul"),
            row("t1", 1, "ΟΔΟΣ ΑΘΗΝΑΣ"),
            row("t1", 2, "fullwidth \uff21\uff22\uff23"),  # FULLWIDTH A B C
            row("t1", 3, "She joined the support groups"),
            row("t1", 4, "Straße und STRASSE"),
            row("t1", 5, "नमस्ते दुनिया 東京タワー"),
        ]
    )
    cases = {
        "İSTANBUL": [0],
        "i\u0307stanbul": [0],
        "οδος": [1],
        "ΑΘΗΝΑΣ": [1],
        "abc": [2],
        "\uff41\uff42\uff43": [2],  # fullwidth a b c
        "Who joins a supporting group?": [3],
        "STRAẞE": [4],
        "strasse": [4],
        "दुनिया": [5],
        "東京タワー": [5],
    }
    for query, offsets in cases.items():
        assert [h.offset for h in await transcript_store.search(SCOPE, query)] == offsets, query


async def test_a_swap_leaves_the_live_table_and_its_dedup_view(
    transcript_store: ClickHouseTranscriptStore, chdb_client: Any
) -> None:
    """The swap itself is in the contract suite (tests/core/stores/test_transcripts.py)."""
    await transcript_store.insert([row("t1", 0, "old kiwi")])
    table = await transcript_store.create_rebuild_table()
    await transcript_store.insert([row("t1", 0, "new kiwi"), row("t1", 1, "more kiwi")], table=table)
    await transcript_store.swap_in(table)
    db = transcript_store.database
    tables = {r[0] for r in chdb_client.query(f"SHOW TABLES FROM {db}").result_rows}
    assert tables == {"messages", "messages_dedup", "message_vectors"}
    assert chdb_client.query(f"SELECT count() FROM {db}.messages_dedup").result_rows[0][0] == 2
    with pytest.raises(ValueError):
        await transcript_store.swap_in("messages")


async def test_calls_run_off_the_event_loop(transcript_store: ClickHouseTranscriptStore) -> None:
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.001)

    ticker = asyncio.create_task(tick())
    try:
        await transcript_store.insert([row("t1", i, f"text {i}") for i in range(20_000)])
        await transcript_store.row_count()
    finally:
        ticker.cancel()
    assert ticks > 5


async def test_unreachable_server_is_unavailable_and_recovers_nothing_half_done() -> None:
    from memstream.embedded.process import free_port

    store = ClickHouseTranscriptStore(f"http://127.0.0.1:{free_port()}", connect_timeout_s=1.0)
    try:
        with pytest.raises(TranscriptUnavailable):
            await store.ping()
        with pytest.raises(TranscriptUnavailable):
            await store.insert([row("t1", 0, "x")])
    finally:
        await store.close()


def test_rejects_unknown_schemes_and_bad_database_names() -> None:
    with pytest.raises(ValueError, match="DSN"):
        ClickHouseTranscriptStore("mysql://x")
    with pytest.raises(ValueError, match="identifier"):
        ClickHouseTranscriptStore("chdb:///tmp/x", database="a-b")


async def test_the_instance_id_is_stable_and_new_for_a_store_created_anew(
    clickhouse_dsn: str, clickhouse_database: str
) -> None:
    """A consumer group's progress is claimed by this id (`Processor.progress_scope`)."""
    first = ClickHouseTranscriptStore(clickhouse_dsn, database=clickhouse_database)
    one = await first.instance_id()
    assert one == await first.instance_id()
    again = ClickHouseTranscriptStore(clickhouse_dsn, database=clickhouse_database)
    assert await again.instance_id() == one  # another client of the same store
    other = ClickHouseTranscriptStore(clickhouse_dsn, database=f"{clickhouse_database}_other")
    assert await other.instance_id() != one
    await first._client.run("drop", lambda c: c.command(f"DROP DATABASE {clickhouse_database} SYNC"))
    anew = ClickHouseTranscriptStore(clickhouse_dsn, database=clickhouse_database)
    assert await anew.instance_id() not in (one, await other.instance_id())  # created anew
    await other._client.run("drop", lambda c: c.command(f"DROP DATABASE {clickhouse_database}_other SYNC"))
    for store in (first, again, other, anew):
        await store.close()
