"""The `TranscriptStore` contract (`core.stores.transcripts`), on every store: the in-memory fake
and ClickHouse (chdb). Writes are dedup-safe, reads are scoped to one tenant, search returns user
and assistant messages only and treats query text as data, tool calls are paired and read in
pages. Search is asserted by membership (and order only where both rank alike: distinct tokens,
BM25 then recency), never by score. ClickHouse-only details (SQL binding, the dedup view, ranking
scores, tokenizer edges) are in `tests/sinks/clickhouse/test_store.py`."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from core.stores.transcripts import Period, TranscriptScope, TranscriptStore
from core.transcripts.terms import query_terms
from processors.transcript_context import with_context
from tests.fakes.transcripts import InMemoryTranscriptStore
from tests.sinks.clickhouse.rows import BASE_TIME, row, tool_exchange

SCOPE = TranscriptScope(environment="test", account_id="acct", agent_id="agent")


@pytest.fixture(params=["memory", pytest.param("clickhouse", marks=pytest.mark.engine)])
def store(request: pytest.FixtureRequest) -> TranscriptStore:
    """The store under test, empty, its schema created."""
    if request.param == "memory":
        return InMemoryTranscriptStore()
    store: TranscriptStore = request.getfixturevalue("transcript_store")
    return store


async def test_rebuild_table_swap_replaces_the_live_table(store: TranscriptStore) -> None:
    await store.insert([row("t1", 0, "old kiwi")])
    table = await store.create_rebuild_table()
    await store.insert([row("t1", 0, "new kiwi"), row("t1", 1, "more kiwi")], table=table)
    assert await store.row_count(table=table) == 2
    assert await store.row_count() == 1
    await store.swap_in(table)
    assert await store.row_count() == 2
    assert sorted(h.content for h in await store.search(SCOPE, "kiwi")) == ["more kiwi", "new kiwi"]
    dropped = await store.create_rebuild_table()
    await store.drop_table(dropped)
    await store.drop_table(dropped)  # idempotent
    with pytest.raises(ValueError):
        await store.drop_table("messages")
    with pytest.raises(ValueError):
        await store.insert([row("t", 0, "x")], table="messages; DROP TABLE x")


async def test_the_instance_id_is_stable(store: TranscriptStore) -> None:
    one = await store.instance_id()
    assert one and one == await store.instance_id()


async def test_double_insert_counts_once(store: TranscriptStore) -> None:
    rows = [row("t1", i, f"message number {i} about apples") for i in range(5)]
    await store.insert(rows)
    await store.insert(rows[2:])  # redelivery of part of the batch
    await store.insert(list(reversed(rows)))  # replay, any order
    assert await store.row_count() == 5
    counts = await store.thread_counts("test")
    assert [(c.account_id, c.thread_id, c.messages, c.max_offset) for c in counts] == [("acct", "t1", 5, 4)]
    hits = await store.search(SCOPE, "apples", limit=50)
    assert sorted(h.offset for h in hits) == [0, 1, 2, 3, 4]


async def test_search_matches_case_insensitively_and_non_ascii(
    store: TranscriptStore,
) -> None:
    await store.insert([row("t1", 0, "Réunion à l'ÉCOLE demain"), row("t1", 1, "Kubernetes-Cluster v2")])
    assert [h.offset for h in await store.search(SCOPE, "école")] == [0]
    assert [h.offset for h in await store.search(SCOPE, "KUBERNETES")] == [1]
    assert [h.offset for h in await store.search(SCOPE, "cluster")] == [1]


async def test_search_never_returns_system_or_tool_rows_nor_reasoning(
    store: TranscriptStore,
) -> None:
    await store.insert(
        [
            row("t1", 0, "secret system prompt zebra", role="system"),
            row("t1", 1, "answer", role="assistant", reasoning="hidden zebra reasoning"),
            row("t1", 2, "zebra tool output", role="tool", tool_call_id="c1", tool_result="zebra result"),
            row("t1", 3, "zebra from the user", role="user"),
        ]
    )
    hits = await store.search(SCOPE, "zebra")
    assert [(h.offset, h.role) for h in hits] == [(3, "user")]
    assert await store.search(SCOPE, "hidden reasoning") == []


async def test_search_is_scoped_to_one_tenant(store: TranscriptStore) -> None:
    await store.insert(
        [
            row("t1", 0, "shared word mango", user_id="u1"),
            row("t2", 0, "shared word mango", user_id="u2"),
            row("t3", 0, "shared word mango", user_id=None),
            row("t1", 0, "shared word mango", account_id="other"),
            row("t1", 0, "shared word mango", environment="prod"),
            row("t9", 0, "shared word mango", agent_id="agent-2"),
        ]
    )
    without_user = await store.search(SCOPE, "mango")
    assert [h.thread_id for h in without_user] == ["t3"]  # no user: only the threads without one
    one_user = await store.search(
        TranscriptScope(environment="test", account_id="acct", agent_id="agent", user_id="u2"), "mango"
    )
    assert [h.thread_id for h in one_user] == ["t2"]
    other_agent = await store.search(
        TranscriptScope(environment="test", account_id="acct", agent_id="agent-2"), "mango"
    )
    assert [h.thread_id for h in other_agent] == ["t9"]
    nobody = await store.search(
        TranscriptScope(environment="test", account_id="nobody", agent_id="agent"), "mango"
    )
    assert nobody == []


async def test_a_scope_without_user_never_reads_a_users_thread(
    store: TranscriptStore,
) -> None:
    """Search, tool-call lookup and byte reads: a scope without a user sees only the threads
    without a user, even when it names a user's thread or holds that thread's call."""
    await store.insert(
        [
            row("u1-t", 0, "papaya order for Mallory", user_id="u1"),
            row("u1-t", 1, "", role="tool", user_id="u1", tool_call_id="c-u1", tool_result="u1 secret"),
            row("anon-t", 0, "papaya order without a user"),
        ]
    )
    hits = await store.search(SCOPE, "papaya")
    assert [(h.thread_id, h.content) for h in hits] == [("anon-t", "papaya order without a user")]
    assert await store.search(SCOPE, "papaya", thread_id="u1-t") == []
    assert await store.tool_call(SCOPE, "c-u1") == []
    assert await store.tool_call(SCOPE, "c-u1", thread_id="u1-t") == []
    u1 = TranscriptScope(environment="test", account_id="acct", agent_id="agent", user_id="u1")
    [call] = await store.tool_call(u1, "c-u1")
    assert await store.tool_call_bytes(u1, call, "result", 0, 100) == b"u1 secret"
    assert await store.tool_call_bytes(SCOPE, call, "result", 0, 100) == b""


@pytest.mark.parametrize(
    "hostile",
    ["') OR 1=1 --", "' OR '1'='1", "x'); DROP TABLE messages; --", "{tokens:Array(String)}", "\\' OR 1=1"],
)
async def test_hostile_query_text_is_only_data(store: TranscriptStore, hostile: str) -> None:
    await store.insert([row("t1", 0, "ordinary text"), row("t2", 0, "or drop table messages")])
    other = TranscriptScope(environment="test", account_id="someone-else", agent_id="agent")
    assert await store.search(other, hostile) == []
    hits = await store.search(SCOPE, hostile)
    # matches only by its tokens (or, drop, table, messages, ...), never by SQL
    assert all(h.thread_id == "t2" for h in hits)
    assert await store.row_count() == 2


async def test_empty_token_list_returns_nothing(store: TranscriptStore) -> None:
    await store.insert([row("t1", 0, "something")])
    assert await store.search(SCOPE, " ,.;!? ") == []


async def test_previous_terms_are_the_latest_searched_message_below_an_offset(store: TranscriptStore) -> None:
    rows = [
        row("t1", 0, "first question"),
        row("t1", 1, "an answer", role="assistant"),
        row("t1", 2, "", role="tool", tool_call_id="c1", tool_result="tool words"),
        row("t1", 3, "system words", role="system"),
        row("t1", 4, "later question"),
        row("t1", 5, "what about you?", role="assistant"),  # stop words only: no terms
        row("t2", 0, "other thread"),
        row("t1", 0, "same thread id, other account", account_id="acct2"),
    ]
    await store.insert(rows)
    await store.insert(rows[:2])  # copies count once
    t1, t2, t3 = (("test", "acct", "agent", t) for t in ("t1", "t2", "t3"))
    other = ("test", "acct2", "agent", "t1")
    found = await store.previous_terms({t1: 4, t2: 0, t3: 9, other: 1})
    assert found == {t1: rows[1].terms, other: rows[7].terms}  # tool/system skipped; none below 0
    assert await store.previous_terms({t1: 1}) == {t1: rows[0].terms}
    assert await store.previous_terms({t1: 99}) == {t1: rows[4].terms}  # 5 has no terms
    assert await store.previous_terms({}) == {}
    table = await store.create_rebuild_table()
    assert await store.previous_terms({t1: 4}, table=table) == {}
    await store.insert(rows[:1], table=table)
    assert await store.previous_terms({t1: 4}, table=table) == {t1: rows[0].terms}


async def test_a_reply_is_found_by_the_words_of_the_message_it_answers(store: TranscriptStore) -> None:
    """A message's document holds the terms of the one before it (`context_terms`)."""
    conversation = with_context(
        [
            row("t1", 0, "Where did Melanie go camping last summer?"),
            row("t1", 1, "To the redwoods, with her kids.", role="assistant"),
            row("t1", 2, "Nice weather there?"),
        ],
        {},
    )
    await store.insert(conversation)
    hits = await store.search(SCOPE, "Melanie camping")
    assert [h.offset for h in hits] == [0, 1]  # the question, then its answer (longer document)
    assert sorted(h.offset for h in await store.search(SCOPE, "redwoods")) == [1, 2]  # its reply too


async def test_a_query_of_stop_words_only_returns_nothing(store: TranscriptStore) -> None:
    """No word of it says what to look for: [] rather than every message of the scope."""
    await store.insert([row("t1", 0, "what is it that they were doing"), row("t1", 1, "something")])
    assert await store.search(SCOPE, "What is it that they were doing?") == []
    assert [h.offset for h in await store.search(SCOPE, "what were they doing with something")] == [1]


async def test_search_keeps_to_a_period_of_created_at(store: TranscriptStore) -> None:
    """`period`: since inclusive, until exclusive, either open; times compared as instants."""
    may, june = datetime(2024, 5, 1, tzinfo=UTC), datetime(2024, 6, 1, tzinfo=UTC)
    await store.insert(
        [
            row("t1", 0, "the trip to Lisbon", created_at=may - timedelta(microseconds=1)),
            row("t1", 1, "the trip to Lisbon again", created_at=may),
            row("t2", 0, "Lisbon trip photos", created_at=june - timedelta(microseconds=1)),
            row("t2", 1, "Lisbon trip, one more time", created_at=june),
        ]
    )

    async def found(period: Period | None) -> set[tuple[str, int]]:
        return {(h.thread_id, h.offset) for h in await store.search(SCOPE, "Lisbon trip", period=period)}

    everything = {("t1", 0), ("t1", 1), ("t2", 0), ("t2", 1)}
    assert await found(None) == everything == await found(Period())
    assert await found(Period(since=may, until=june)) == {("t1", 1), ("t2", 0)}
    assert await found(Period(since=june)) == {("t2", 1)}
    assert await found(Period(until=may)) == {("t1", 0)}
    paris = timezone(timedelta(hours=2))
    assert await found(Period(since=datetime(2024, 6, 1, 2, tzinfo=paris))) == {("t2", 1)}
    assert await found(Period(since=june, until=june)) == set()


async def test_rare_terms_outrank_common_ones_and_stems_match(store: TranscriptStore) -> None:
    await store.insert(
        [row("t1", i, f"we talked about the weather again {i}") for i in range(8)]
        + [row("t2", 0, "Caroline went to the adoption agencies")]
    )
    hits = await store.search(SCOPE, "weather adoption agency", limit=3)
    assert (hits[0].thread_id, hits[0].offset) == ("t2", 0)
    assert [h.thread_id for h in hits[1:]] == ["t1", "t1"]


@pytest.mark.parametrize(
    "text",
    ["Ünïcödé ñoño 東京 🙂 \x00 \u200b", "\ufeff\u0301\u0301", "Ⅻ ½ ² ﬀ", "\U0010ffff \U000e0100x"],
)
async def test_non_english_and_odd_text_is_stored_and_searched(store: TranscriptStore, text: str) -> None:
    await store.insert([row("t1", 0, text)])
    for query in (text, text.upper(), f"{text} more"):
        await store.search(SCOPE, query)  # never raises
    if query_terms(text):
        assert [h.offset for h in await store.search(SCOPE, text)] == [0]


async def test_tool_call_info_and_byte_paging_of_a_200_kb_result(
    store: TranscriptStore,
) -> None:
    result = ("é" + "abc" * 10 + "\n") * 6200  # multi-byte characters: pages cut through them
    data = result.encode("utf-8")
    assert len(data) > 200_000
    arguments = json.dumps({"path": "/var/log", "lines": 5000})
    exchange = tool_exchange("t1", "read the log", "call-9", "read_file", arguments, result)
    await store.insert(exchange)
    await store.insert(exchange[2:])  # the result redelivered
    [info] = await store.tool_call(SCOPE, "call-9")
    assert (info.thread_id, info.tool_name, info.call_offset, info.result_offset) == ("t1", "read_file", 1, 2)
    assert info.occurrence == 1
    assert (info.arguments_bytes, info.result_bytes) == (len(arguments.encode()), len(data))
    page = 32 * 1024
    pieces = []
    offset = 0
    while True:
        chunk = await store.tool_call_bytes(SCOPE, info, "result", offset, page)
        if not chunk:
            break
        assert len(chunk) <= page
        pieces.append(chunk)
        offset += len(chunk)
    assert b"".join(pieces) == data
    assert len(pieces) == -(-len(data) // page)
    tail = await store.tool_call_bytes(SCOPE, info, "result", len(data) - 3, 100)
    assert tail == data[-3:]
    assert await store.tool_call_bytes(SCOPE, info, "result", len(data) + 5, 10) == b""
    args = await store.tool_call_bytes(SCOPE, info, "arguments", 0, 10_000)
    assert args == arguments.encode()


async def test_tool_call_is_scoped_and_unknown_ids_find_nothing(
    store: TranscriptStore,
) -> None:
    await store.insert(
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
    infos = await store.tool_call(SCOPE, "c1")
    assert [(i.thread_id, i.call_offset, i.result_offset, i.tool_name) for i in infos] == [
        ("t2", None, 5, None),  # most recent first
        ("t1", None, 0, None),
    ]
    assert [i.thread_id for i in await store.tool_call(SCOPE, "c1", thread_id="t1")] == ["t1"]
    assert await store.tool_call(SCOPE, "nope") == []
    other = TranscriptScope(environment="test", account_id="other", agent_id="agent")
    [theirs] = await store.tool_call(other, "c1")
    assert await store.tool_call_bytes(other, theirs, "result", 0, 100) == b"theirs"
    mine = infos[1]
    assert await store.tool_call_bytes(SCOPE, mine, "result", 0, 100) == b"mine"
    # the bytes are read in the scope given: another tenant's scope reads its own message
    assert await store.tool_call_bytes(other, mine, "result", 0, 100) == b"theirs"
    nobody = TranscriptScope(environment="test", account_id="nobody", agent_id="agent")
    assert await store.tool_call_bytes(nobody, mine, "result", 0, 100) == b""
    with pytest.raises(ValueError, match="no message holding its arguments"):
        await store.tool_call_bytes(SCOPE, mine, "arguments", 0, 100)


async def test_a_repeated_tool_call_id_in_one_thread_is_several_calls(
    store: TranscriptStore,
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
    await store.insert(rows)
    await store.insert(rows[4:6])  # redelivered
    calls = await store.tool_call(SCOPE, "call_0")
    shown = [(c.occurrence, c.call_offset, c.result_offset, c.arguments_bytes, c.result_bytes) for c in calls]
    assert shown == [
        (4, None, 8, 0, 5),
        (3, 6, 7, 10, 5),
        (2, 4, 5, 9, len(second)),
        (1, 1, 2, 8, len(first)),
    ]  # fmt: skip
    assert [c.tool_name for c in calls] == [None, "f", "f", "f"]
    for c, text in zip(calls, ["stray", "third", second, first], strict=True):
        whole = await store.tool_call_bytes(SCOPE, c, "result", 0, 1000)
        assert whole == text.encode() and len(whole) == c.result_bytes
        tail = await store.tool_call_bytes(SCOPE, c, "result", c.result_bytes - 2, 10)
        assert tail == text.encode()[-2:]
    assert await store.tool_call_bytes(SCOPE, calls[2], "arguments", 0, 100) == b'{"n": 22}'
    in_thread = await store.tool_call(SCOPE, "call_0", thread_id="t1")
    assert [c.occurrence for c in in_thread] == [4, 3, 2, 1]


async def test_thread_counts_per_environment(store: TranscriptStore) -> None:
    await store.insert(
        [row("t1", i, "a") for i in range(3)]
        + [row("t2", 0, "b", account_id="acct2")]
        + [row("t1", 0, "c", environment="prod")]
    )
    counts = await store.thread_counts("test")
    assert [(c.environment, c.account_id, c.thread_id, c.messages, c.max_offset) for c in counts] == [
        ("test", "acct", "t1", 3, 2),
        ("test", "acct2", "t2", 1, 0),
    ]
    assert await store.row_count() == 5


async def test_ensure_schema_is_idempotent(store: TranscriptStore) -> None:
    await store.insert([row("t1", 0, "kept")])
    await store.ensure_schema()
    assert await store.row_count() == 1


async def test_delete_thread_removes_rows_up_to_the_tombstone_only(store: TranscriptStore) -> None:
    await store.insert([row("t1", i, f"kiwi {i}", seq=10 + i) for i in range(3)])
    await store.insert([row("t1", 0, "kiwi again", seq=20)])  # the thread used again: a later seq
    await store.insert([row("t1", 0, "kiwi elsewhere", account_id="other", seq=11)])
    await store.insert([row("t2", 0, "kiwi two", seq=12)])
    table = await store.create_rebuild_table()
    await store.insert([row("t1", 5, "kiwi rebuilt", seq=12)], table=table)
    assert await store.count_thread_rows("test", "acct", "t1", 12) >= 3
    assert await store.delete_thread("test", "acct", "t1", 12) >= 3
    assert await store.count_thread_rows("test", "acct", "t1", 12) == 0
    assert await store.count_thread_rows("test", "acct", "t1", 20) == 1  # the thread used again
    assert await store.delete_thread("test", "acct", "t1", 12) == 0  # idempotent
    assert sorted(h.content for h in await store.search(SCOPE, "kiwi", limit=50)) == [
        "kiwi again",
        "kiwi two",
    ]
    assert await store.row_count() == 3
    assert await store.row_count(table=table) == 1  # another table is another table
    assert await store.delete_thread("test", "acct", "t1", 12, table=table) == 1
    assert await store.row_count(table=table) == 0
