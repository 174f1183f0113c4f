"""ClickHouseTranscriptStore against the real embedded engine (chdb): writes, dedup-safe reads,
tenancy, role filtering, bound query text, byte paging of large tool results, rebuild swaps."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

import pytest

from core.stores.transcripts import TranscriptScope, TranscriptUnavailable
from sinks.clickhouse.store import ClickHouseTranscriptStore, has_query_tokens
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
    without_user = await transcript_store.search(SCOPE, "mango")
    assert [h.thread_id for h in without_user] == ["t3"]  # no user: only the threads without one
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


async def test_a_scope_without_user_never_reads_a_users_thread(
    transcript_store: ClickHouseTranscriptStore,
) -> None:
    """Search, tool-call lookup and byte reads: a scope without a user sees only the threads
    without a user, even when it names a user's thread or holds that thread's call."""
    await transcript_store.insert(
        [
            row("u1-t", 0, "papaya order for Mallory", user_id="u1"),
            row("u1-t", 1, "", role="tool", user_id="u1", tool_call_id="c-u1", tool_result="u1 secret"),
            row("anon-t", 0, "papaya order without a user"),
        ]
    )
    hits = await transcript_store.search(SCOPE, "papaya")
    assert [(h.thread_id, h.content) for h in hits] == [("anon-t", "papaya order without a user")]
    assert await transcript_store.search(SCOPE, "papaya", thread_id="u1-t") == []
    assert await transcript_store.tool_call(SCOPE, "c-u1") == []
    assert await transcript_store.tool_call(SCOPE, "c-u1", thread_id="u1-t") == []
    u1 = TranscriptScope(environment="test", account_id="acct", agent_id="agent", user_id="u1")
    [call] = await transcript_store.tool_call(u1, "c-u1")
    assert await transcript_store.tool_call_bytes(u1, call, "result", 0, 100) == b"u1 secret"
    assert await transcript_store.tool_call_bytes(SCOPE, call, "result", 0, 100) == b""


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
    assert len(reads) == 5
    for sql, params in reads:
        assert "1=1" not in sql
        assert params and all(name.startswith("param_") for name in params)


async def test_search_lowercases_the_query_like_the_index_does(
    transcript_store: ClickHouseTranscriptStore,
) -> None:
    """The query is lower-cased by the engine's lowerUTF8, as the content index is: characters
    whose lower case Python (3.11's Unicode tables) does not know still match."""
    await transcript_store.insert(
        [
            row("t1", 0, "Trip to İstanbul"),
            row("t1", 1, "ΟΔΟΣ ΑΘΗΝΑΣ"),
            row("t1", 2, "fullwidth \uff21\uff22\uff23"),  # FULLWIDTH A B C
            row("t1", 3, "Latin letter ɤ here"),  # U+0264, the lower case of U+A7CB
            row("t1", 4, "Straße und STRASSE"),
        ]
    )
    assert "\ua7cb".lower() == "\ua7cb"  # Python 3.11 has no lower case for it
    cases = {
        "İSTANBUL": [0],
        "i̇stanbul": [0],
        "οδος": [1],
        "ΑΘΗΝΑΣ": [1],
        "\uff41\uff42\uff43": [2],  # fullwidth a b c
        "\ua7cb": [3],
        "STRAẞE": [4],
        "strasse": [4],
    }
    for query, offsets in cases.items():
        assert [h.offset for h in await transcript_store.search(SCOPE, query)] == offsets, query
    # tokens count once each after lower-casing: "Apple APPLE apple" is one token
    await transcript_store.insert([row("t2", 0, "apple pie")])
    [hit] = await transcript_store.search(SCOPE, "Apple APPLE apple")
    assert (hit.thread_id, hit.score) == ("t2", 1.0)


async def test_empty_token_list_returns_nothing(transcript_store: ClickHouseTranscriptStore) -> None:
    await transcript_store.insert([row("t1", 0, "something")])
    assert await transcript_store.search(SCOPE, " ,.;!? ") == []
    assert not has_query_tokens(" ,.;!?_ ") and has_query_tokens("_é_") and has_query_tokens("-4-")


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
    assert info.occurrence == 1
    assert (info.arguments_bytes, info.result_bytes) == (len(arguments.encode()), len(data))
    page = 32 * 1024
    pieces = []
    offset = 0
    while True:
        chunk = await transcript_store.tool_call_bytes(SCOPE, info, "result", offset, page)
        if not chunk:
            break
        assert len(chunk) <= page
        pieces.append(chunk)
        offset += len(chunk)
    assert b"".join(pieces) == data
    assert len(pieces) == -(-len(data) // page)
    tail = await transcript_store.tool_call_bytes(SCOPE, info, "result", len(data) - 3, 100)
    assert tail == data[-3:]
    assert await transcript_store.tool_call_bytes(SCOPE, info, "result", len(data) + 5, 10) == b""
    args = await transcript_store.tool_call_bytes(SCOPE, info, "arguments", 0, 10_000)
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
    [theirs] = await transcript_store.tool_call(other, "c1")
    assert await transcript_store.tool_call_bytes(other, theirs, "result", 0, 100) == b"theirs"
    mine = infos[1]
    assert await transcript_store.tool_call_bytes(SCOPE, mine, "result", 0, 100) == b"mine"
    # the bytes are read in the scope given: another tenant's scope reads its own message
    assert await transcript_store.tool_call_bytes(other, mine, "result", 0, 100) == b"theirs"
    nobody = TranscriptScope(environment="test", account_id="nobody", agent_id="agent")
    assert await transcript_store.tool_call_bytes(nobody, mine, "result", 0, 100) == b""
    with pytest.raises(ValueError, match="no message holding its arguments"):
        await transcript_store.tool_call_bytes(SCOPE, mine, "arguments", 0, 100)


async def test_a_repeated_tool_call_id_in_one_thread_is_several_calls(
    transcript_store: ClickHouseTranscriptStore,
) -> None:
    """Servers that emit `call_0` every turn: each call pairs with its own result, and the
    size and bytes of each come from the same message."""

    def call(offset: int, arguments: str) -> Any:
        return row("t1", offset, "", role="assistant", tool_call_id="call_0", tool_name="f",
                   tool_arguments=arguments)  # fmt: skip

    def result(offset: int, text: str) -> Any:
        return row("t1", offset, "", role="tool", tool_call_id="call_0", tool_result=text)

    first, second = "short", "a much longer second result with the same id"
    rows = [
        row("t1", 0, "ask"),
        call(1, '{"n": 1}'),
        result(2, first),
        row("t1", 3, "again"),
        call(4, '{"n": 22}'),
        result(5, second),
        call(6, '{"n": 333}'),
        result(7, "third"),
        result(8, "stray"),  # a second result for call 6: a call of its own, with no call message
    ]
    await transcript_store.insert(rows)
    await transcript_store.insert(rows[4:6])  # redelivered
    calls = await transcript_store.tool_call(SCOPE, "call_0")
    shown = [(c.occurrence, c.call_offset, c.result_offset, c.arguments_bytes, c.result_bytes) for c in calls]
    assert shown == [
        (4, None, 8, 0, 5),
        (3, 6, 7, 10, 5),
        (2, 4, 5, 9, len(second)),
        (1, 1, 2, 8, len(first)),
    ]  # fmt: skip
    assert [c.tool_name for c in calls] == [None, "f", "f", "f"]
    for c, text in zip(calls, ["stray", "third", second, first], strict=True):
        whole = await transcript_store.tool_call_bytes(SCOPE, c, "result", 0, 1000)
        assert whole == text.encode() and len(whole) == c.result_bytes
        tail = await transcript_store.tool_call_bytes(SCOPE, c, "result", c.result_bytes - 2, 10)
        assert tail == text.encode()[-2:]
    assert await transcript_store.tool_call_bytes(SCOPE, calls[2], "arguments", 0, 100) == b'{"n": 22}'
    in_thread = await transcript_store.tool_call(SCOPE, "call_0", thread_id="t1")
    assert [c.occurrence for c in in_thread] == [4, 3, 2, 1]


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
