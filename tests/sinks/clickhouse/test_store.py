"""ClickHouseTranscriptStore against the real embedded engine (chdb): writes, dedup-safe reads,
tenancy, role filtering, bound query text, byte paging of large tool results, rebuild swaps."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from sinks.clickhouse.base import TranscriptScope, TranscriptUnavailable
from sinks.clickhouse.store import ClickHouseTranscriptStore, query_tokens
from tests.sinks.clickhouse.rows import BASE_TIME, row, tool_exchange

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


async def test_double_insert_counts_once(transcript_store: ClickHouseTranscriptStore) -> None:
    rows = [row("t1", i, f"message number {i} about apples") for i in range(5)]
    await transcript_store.insert(rows)
    await transcript_store.insert(rows[2:])  # redelivery of part of the batch
    await transcript_store.insert(list(reversed(rows)))  # replay, any order
    assert await transcript_store.row_count() == 5
    counts = await transcript_store.thread_counts("test")
    assert [(c.account_id, c.thread_id, c.messages, c.max_offset) for c in counts] == [("acct", "t1", 5, 4)]
    hits = await transcript_store.search(SCOPE, "apples", limit=50)
    assert sorted(h.offset for h in hits) == [0, 1, 2, 3, 4]


async def test_dedup_view_shows_one_row_per_message(
    transcript_store: ClickHouseTranscriptStore, chdb_client: Any
) -> None:
    rows = [row("t1", i, "x") for i in range(3)]
    await transcript_store.insert(rows)
    await transcript_store.insert(rows)
    db = transcript_store.database
    assert chdb_client.query(f"SELECT count() FROM {db}.messages").result_rows[0][0] == 6
    assert chdb_client.query(f"SELECT count() FROM {db}.messages_dedup").result_rows[0][0] == 3


async def test_search_ranks_by_distinct_tokens_matched_then_recency(
    transcript_store: ClickHouseTranscriptStore,
) -> None:
    await transcript_store.insert(
        [
            row("t1", 0, "The red apple fell."),
            row("t1", 1, "A red APPLE and a green pear", role="assistant"),
            row("t2", 0, "apple apple apple apple"),
            row("t2", 1, "nothing relevant here"),
            row("t2", 2, "red"),
        ]
    )
    hits = await transcript_store.search(SCOPE, "Apple, red pear?", limit=10)
    assert [(h.thread_id, h.offset, h.score) for h in hits] == [
        ("t1", 1, 3.0),  # apple + red + pear
        ("t1", 0, 2.0),  # apple + red
        ("t2", 2, 1.0),  # red, newer than ...
        ("t2", 0, 1.0),  # ... apple (repetition does not count)
    ]
    assert hits[0].role == "assistant" and hits[0].message_id == "t1-m1"
    assert hits[0].created_at.tzinfo is not None
    limited = await transcript_store.search(SCOPE, "apple red pear", limit=2)
    assert [(h.thread_id, h.offset) for h in limited] == [("t1", 1), ("t1", 0)]
    in_thread = await transcript_store.search(SCOPE, "apple red", thread_id="t2")
    assert [(h.thread_id, h.offset) for h in in_thread] == [("t2", 2), ("t2", 0)]


async def test_search_matches_case_insensitively_and_non_ascii(
    transcript_store: ClickHouseTranscriptStore,
) -> None:
    await transcript_store.insert(
        [row("t1", 0, "Réunion à l'ÉCOLE demain"), row("t1", 1, "Kubernetes-Cluster v2")]
    )
    assert [h.offset for h in await transcript_store.search(SCOPE, "école")] == [0]
    assert [h.offset for h in await transcript_store.search(SCOPE, "KUBERNETES")] == [1]
    assert [h.offset for h in await transcript_store.search(SCOPE, "cluster")] == [1]


async def test_search_never_returns_system_or_tool_rows_nor_reasoning(
    transcript_store: ClickHouseTranscriptStore,
) -> None:
    await transcript_store.insert(
        [
            row("t1", 0, "secret system prompt zebra", role="system"),
            row("t1", 1, "answer", role="assistant", reasoning="hidden zebra reasoning"),
            row("t1", 2, "zebra tool output", role="tool", tool_call_id="c1", tool_result="zebra result"),
            row("t1", 3, "zebra from the user", role="user"),
        ]
    )
    hits = await transcript_store.search(SCOPE, "zebra")
    assert [(h.offset, h.role) for h in hits] == [(3, "user")]
    assert await transcript_store.search(SCOPE, "hidden reasoning") == []


async def test_search_is_scoped_to_one_tenant(transcript_store: ClickHouseTranscriptStore) -> None:
    await transcript_store.insert(
        [
            row("t1", 0, "shared word mango", user_id="u1"),
            row("t2", 0, "shared word mango", user_id="u2"),
            row("t3", 0, "shared word mango", user_id=None),
            row("t1", 0, "shared word mango", account_id="other"),
            row("t1", 0, "shared word mango", environment="prod"),
            row("t9", 0, "shared word mango", agent_id="agent-2"),
        ]
    )
    every_thread = await transcript_store.search(SCOPE, "mango")
    assert sorted(h.thread_id for h in every_thread) == ["t1", "t2", "t3"]
    one_user = await transcript_store.search(
        TranscriptScope(environment="test", account_id="acct", agent_id="agent", user_id="u2"), "mango"
    )
    assert [h.thread_id for h in one_user] == ["t2"]
    other_agent = await transcript_store.search(
        TranscriptScope(environment="test", account_id="acct", agent_id="agent-2"), "mango"
    )
    assert [h.thread_id for h in other_agent] == ["t9"]
    nobody = await transcript_store.search(
        TranscriptScope(environment="test", account_id="nobody", agent_id="agent"), "mango"
    )
    assert nobody == []


@pytest.mark.parametrize(
    "hostile",
    ["') OR 1=1 --", "' OR '1'='1", "x'); DROP TABLE messages; --", "{tokens:Array(String)}", "\\' OR 1=1"],
)
async def test_hostile_query_text_is_only_data(
    transcript_store: ClickHouseTranscriptStore, hostile: str
) -> None:
    await transcript_store.insert([row("t1", 0, "ordinary text"), row("t2", 0, "or drop table messages")])
    other = TranscriptScope(environment="test", account_id="someone-else", agent_id="agent")
    assert await transcript_store.search(other, hostile) == []
    hits = await transcript_store.search(SCOPE, hostile)
    # matches only by its tokens (or, drop, table, messages, ...), never by SQL
    assert all(h.thread_id == "t2" for h in hits)
    assert await transcript_store.row_count() == 2


def test_bound_parameters_never_enter_the_sql_text() -> None:
    """Over HTTP clickhouse-connect sends `{name:Type}` values as `param_name` query parameters
    (server-side binding); chdb receives the same mapping through its own params argument."""
    from clickhouse_connect.driver.binding import bind_query

    sql = "SELECT 1 WHERE hasAnyTokens(content, {tokens:Array(String)}) AND account_id = {a:String}"
    bound, params = bind_query(sql, {"tokens": ["x') OR 1=1 --"], "a": "') OR 1=1 --"})
    assert bound == sql
    assert set(params) == {"param_tokens", "param_a"}


async def test_empty_token_list_returns_nothing(transcript_store: ClickHouseTranscriptStore) -> None:
    await transcript_store.insert([row("t1", 0, "something")])
    assert await transcript_store.search(SCOPE, " ,.;!? ") == []
    assert query_tokens("Hello, HELLO wörld-42 x_y") == ["hello", "wörld", "42", "x", "y"]


async def test_tool_call_info_and_byte_paging_of_a_200_kb_result(
    transcript_store: ClickHouseTranscriptStore,
) -> None:
    result = ("é" + "abc" * 10 + "\n") * 6200  # multi-byte characters: pages cut through them
    data = result.encode("utf-8")
    assert len(data) > 200_000
    arguments = json.dumps({"path": "/var/log", "lines": 5000})
    exchange = tool_exchange("t1", "read the log", "call-9", "read_file", arguments, result)
    await transcript_store.insert(exchange)
    await transcript_store.insert(exchange[2:])  # the result redelivered
    [info] = await transcript_store.tool_call(SCOPE, "call-9")
    assert (info.thread_id, info.tool_name, info.call_offset, info.result_offset) == ("t1", "read_file", 1, 2)
    assert (info.arguments_bytes, info.result_bytes) == (len(arguments.encode()), len(data))
    page = 32 * 1024
    pieces = []
    offset = 0
    while True:
        chunk = await transcript_store.tool_call_bytes(SCOPE, "t1", "call-9", "result", offset, page)
        if not chunk:
            break
        assert len(chunk) <= page
        pieces.append(chunk)
        offset += len(chunk)
    assert b"".join(pieces) == data
    assert len(pieces) == -(-len(data) // page)
    tail = await transcript_store.tool_call_bytes(SCOPE, "t1", "call-9", "result", len(data) - 3, 100)
    assert tail == data[-3:]
    assert await transcript_store.tool_call_bytes(SCOPE, "t1", "call-9", "result", len(data) + 5, 10) == b""
    args = await transcript_store.tool_call_bytes(SCOPE, "t1", "call-9", "arguments", 0, 10_000)
    assert args == arguments.encode()


async def test_tool_call_is_scoped_and_unknown_ids_find_nothing(
    transcript_store: ClickHouseTranscriptStore,
) -> None:
    await transcript_store.insert(
        [
            row("t1", 0, "", role="tool", tool_call_id="c1", tool_result="mine"),
            row("t1", 0, "", role="tool", tool_call_id="c1", tool_result="theirs", account_id="other"),
            row(
                "t2",
                5,
                "",
                role="tool",
                tool_call_id="c1",
                tool_result="later",
                created_at=BASE_TIME.replace(year=2027),
            ),
        ]
    )
    infos = await transcript_store.tool_call(SCOPE, "c1")
    assert [(i.thread_id, i.call_offset, i.result_offset, i.tool_name) for i in infos] == [
        ("t2", None, 5, None),  # most recent first
        ("t1", None, 0, None),
    ]
    assert [i.thread_id for i in await transcript_store.tool_call(SCOPE, "c1", thread_id="t1")] == ["t1"]
    assert await transcript_store.tool_call(SCOPE, "nope") == []
    other = TranscriptScope(environment="test", account_id="other", agent_id="agent")
    assert await transcript_store.tool_call_bytes(other, "t1", "c1", "result", 0, 100) == b"theirs"
    assert await transcript_store.tool_call_bytes(SCOPE, "t1", "c1", "result", 0, 100) == b"mine"
    assert await transcript_store.tool_call_bytes(SCOPE, "t1", "c1", "arguments", 0, 100) == b""


async def test_thread_counts_per_environment(transcript_store: ClickHouseTranscriptStore) -> None:
    await transcript_store.insert(
        [row("t1", i, "a") for i in range(3)]
        + [row("t2", 0, "b", account_id="acct2")]
        + [row("t1", 0, "c", environment="prod")]
    )
    counts = await transcript_store.thread_counts("test")
    assert [(c.environment, c.account_id, c.thread_id, c.messages, c.max_offset) for c in counts] == [
        ("test", "acct", "t1", 3, 2),
        ("test", "acct2", "t2", 1, 0),
    ]
    assert await transcript_store.row_count() == 5


async def test_rebuild_table_swap_replaces_the_live_table(
    transcript_store: ClickHouseTranscriptStore, chdb_client: Any
) -> None:
    await transcript_store.insert([row("t1", 0, "old kiwi")])
    table = await transcript_store.create_rebuild_table()
    await transcript_store.insert([row("t1", 0, "new kiwi"), row("t1", 1, "more kiwi")], table=table)
    assert await transcript_store.row_count(table=table) == 2
    assert await transcript_store.row_count() == 1
    await transcript_store.swap_in(table)
    assert await transcript_store.row_count() == 2
    assert sorted(h.content for h in await transcript_store.search(SCOPE, "kiwi")) == [
        "more kiwi",
        "new kiwi",
    ]
    db = transcript_store.database
    tables = {r[0] for r in chdb_client.query(f"SHOW TABLES FROM {db}").result_rows}
    assert tables == {"messages", "messages_dedup"}
    assert chdb_client.query(f"SELECT count() FROM {db}.messages_dedup").result_rows[0][0] == 2
    dropped = await transcript_store.create_rebuild_table()
    await transcript_store.drop_table(dropped)
    await transcript_store.drop_table(dropped)  # idempotent
    with pytest.raises(ValueError):
        await transcript_store.drop_table("messages")
    with pytest.raises(ValueError):
        await transcript_store.insert([row("t", 0, "x")], table="messages; DROP TABLE x")


async def test_ensure_schema_is_idempotent(transcript_store: ClickHouseTranscriptStore) -> None:
    await transcript_store.insert([row("t1", 0, "kept")])
    await transcript_store.ensure_schema()
    assert await transcript_store.row_count() == 1


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
