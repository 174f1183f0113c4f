"""The context of projected messages (`processors.transcript_context`) and its use by
clickhouse-projection: the same rows whatever the batching, redeliveries, restarts or cache size."""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from core.journal.models import ToolCall
from core.stores.transcripts import TranscriptRow, thread_key
from core.transcripts.terms import terms
from processors.clickhouse_projection import ClickHouseProjection, row_of, rows
from processors.transcript_context import ContextCache, entry_of, first_offsets, with_context
from streams.runtime.processor import Record
from tests.fakes.transcripts import InMemoryTranscriptStore
from tests.processors.transcript_support import message, record_of, tool_result

CONVERSATION = [
    ("user", "When did Caroline go to the support group?"),
    ("assistant", "She went yesterday."),
    ("tool", ""),
    ("assistant", "It was powerful, she said."),
    ("system", "A system note about apples"),
    ("user", "Thanks!"),
]


def thread_rows(thread: str, **changes: Any) -> list[TranscriptRow]:
    out = []
    for offset, (role, content) in enumerate(CONVERSATION):
        call = ToolCall(id="c1", result="result words") if role == "tool" else None
        out.append(row_of(message(thread, offset, content, role=role, tool_call=call, **changes)))
    return out


def contexts(rows: list[TranscriptRow]) -> list[tuple[int, str, tuple[str, ...]]]:
    return [(r.offset, r.role, r.context_terms) for r in rows]


def test_a_message_gets_the_terms_of_the_user_or_assistant_message_before_it() -> None:
    rows = with_context(thread_rows("a"), {})
    assert contexts(rows) == [
        (0, "user", ()),
        (1, "assistant", tuple(terms(CONVERSATION[0][1]))),
        (2, "tool", ()),  # other roles have neither terms nor context
        (3, "assistant", tuple(terms(CONVERSATION[1][1]))),  # the tool message is skipped
        (4, "system", ()),
        (5, "user", tuple(terms(CONVERSATION[3][1]))),  # and the system message
    ]
    assert [r.terms for r in rows] == [r.terms for r in thread_rows("a")]  # own terms untouched


def test_messages_without_terms_get_no_context_and_are_skipped() -> None:
    """A pure tool call (no content) or a reply of stop words only is never a result on its
    predecessor's words alone; the answer after it takes the question's terms."""
    call = ToolCall(id="c1", name="book", arguments="{}")
    rows = with_context(
        [
            row_of(message("a", 0, "Book the lighthouse tour")),
            row_of(message("a", 1, "", role="assistant", tool_call=call)),
            row_of(message("a", 2, "What about you?", role="assistant")),
            row_of(message("a", 3, "The tour is booked", role="assistant")),
        ],
        {},
    )
    assert contexts(rows) == [
        (0, "user", ()),
        (1, "assistant", ()),
        (2, "assistant", ()),
        (3, "assistant", tuple(terms("Book the lighthouse tour"))),
    ]
    assert first_offsets(map(entry_of, rows[1:3])) == {}


def test_the_first_message_of_a_batch_takes_the_prior_and_threads_stay_apart() -> None:
    a, b = thread_rows("a"), thread_rows("b")
    batch = [a[3], b[1], a[5], b[0]]  # two threads interleaved, b out of order
    prior = {thread_key(a[3]): ("earlier",)}
    assert contexts(with_context(batch, prior)) == [
        (3, "assistant", ("earlier",)),
        (1, "assistant", tuple(terms(CONVERSATION[0][1]))),
        (5, "user", a[3].terms),
        (0, "user", ()),
    ]
    assert first_offsets(map(entry_of, batch)) == {thread_key(a[3]): 3, thread_key(b[0]): 0}


def test_copies_of_one_message_get_the_same_context() -> None:
    a = thread_rows("a")
    stored = with_context([a[0], a[1], a[0], a[1]], {})
    assert contexts(stored) == contexts([stored[0], stored[1]]) * 2


def test_the_pure_projection_gives_the_rows_their_context() -> None:
    batch = records(threads=2, length=3)
    with_prior = rows(batch, {("test", "acme", "bot", "t0"): ("before",)})
    assert [(r.thread_id, r.offset, r.context_terms) for r in with_prior][:2] == [
        ("t0", 0, ("before",)),
        ("t1", 0, ()),
    ]
    assert with_prior == with_context(rows(batch), {("test", "acme", "bot", "t0"): ("before",)})
    assert all(r.context_terms == () for r in rows(batch))  # no prior: no context


def test_threads_of_other_tenants_are_other_threads() -> None:
    mine, theirs = thread_rows("a"), thread_rows("a", account_id="other")
    stored = with_context([mine[0], theirs[1]], {})
    assert stored[1].context_terms == ()


def test_the_cache_knows_a_thread_only_at_the_offset_after_the_last_one_seen() -> None:
    a = thread_rows("a")
    key = thread_key(a[0])
    cache = ContextCache()
    cache.remember([entry_of(r) for r in a[:2]])
    assert cache.split({key: 2}) == ({key: a[1].terms}, {})
    assert cache.split({key: 1}) == ({}, {key: 1})  # a redelivery: looked up
    assert cache.split({key: 3}) == ({}, {key: 3})  # a gap: looked up
    cache.remember([entry_of(a[2])])  # a tool message at 2: the context carries over
    assert cache.split({key: 3}) == ({key: a[1].terms}, {})
    cache.remember([entry_of(a[5])])  # a gap before 5 (not contiguous): forgotten unless it has terms
    assert cache.split({key: 6}) == ({key: a[5].terms}, {})
    cache.remember([entry_of(replace(a[2], offset=9))])
    assert cache.split({key: 10}) == ({}, {key: 10})


def test_the_cache_keeps_the_most_recently_used_threads() -> None:
    cache = ContextCache(max_threads=2)
    rows = [thread_rows(name)[0] for name in "abc"]
    for row in rows[:2]:
        cache.remember([entry_of(row)])
    cache.split({thread_key(rows[0]): 1})  # a is used: b is the least recent
    cache.remember([entry_of(rows[2])])
    assert len(cache) == 2
    known, missing = cache.split({thread_key(row): 1 for row in rows})
    assert set(known) == {thread_key(rows[0]), thread_key(rows[2])} and set(missing) == {thread_key(rows[1])}


def records(threads: int, length: int) -> list[Record]:
    out: list[Record] = []
    for position in range(length):
        for t in range(threads):
            role = ("user", "assistant", "tool")[(position + t) % 3]
            if role == "tool":
                msg = tool_result(f"t{t}", position, f"c{position}", "r")
            else:
                msg = message(f"t{t}", position, f"word{position} thread{t} shared", role=role)
            out.append(record_of(msg, len(out)))
    return out


def distinct_rows(store: InMemoryTranscriptStore) -> dict[tuple[str, int], TranscriptRow]:
    return {(r.thread_id, r.offset): r for r in store.rows}


@settings(max_examples=40, deadline=None)
@given(
    cuts=st.lists(st.integers(min_value=1, max_value=29), max_size=8),
    redeliver=st.lists(st.tuples(st.integers(0, 29), st.integers(1, 6)), max_size=3),
    restart_at=st.none() | st.integers(0, 8),
    cache_threads=st.sampled_from([0, 1, 20_000]),
)
@example(cuts=[1, 2, 5, 6, 7, 8, 9], redeliver=[(4, 5), (26, 1)], restart_at=None, cache_threads=0)
async def test_rows_are_the_same_whatever_the_batching_redeliveries_and_restarts(
    cuts: list[int], redeliver: list[tuple[int, int]], restart_at: int | None, cache_threads: int
) -> None:
    log = records(threads=3, length=10)
    expected_store = InMemoryTranscriptStore()
    await ClickHouseProjection(expected_store).process(log)
    expected = distinct_rows(expected_store)
    # t0: user, assistant, tool, user: the context of 3 is 1
    assert expected[("t0", 3)].context_terms == expected[("t0", 1)].terms != ()

    bounds = sorted({0, *cuts, len(log)})
    spans = list(itertools.pairwise(bounds))  # (low, high) of the log, batch by batch
    for start, size in redeliver:  # an at-least-once redelivery of records already delivered
        position = min(len(spans), max(1, start % (len(spans) + 1)))
        delivered = max(high for _, high in spans[:position])
        spans.insert(position, (max(0, delivered - size), delivered))
    batches = [log[low:high] for low, high in spans]
    store = InMemoryTranscriptStore()
    processor = ClickHouseProjection(store, context_cache_threads=cache_threads)
    for index, batch in enumerate(batches):
        if index == restart_at:  # a new process: nothing but the store
            processor = ClickHouseProjection(store, context_cache_threads=cache_threads)
        await processor.process(batch)
    assert distinct_rows(store) == expected
    for row in distinct_rows(store).values():  # every copy written is identical
        assert all(
            copy == row for copy in store.rows if (copy.thread_id, copy.offset) == (row.thread_id, row.offset)
        )


def record_lookups(store: InMemoryTranscriptStore) -> list[dict[Any, int]]:
    """The arguments of every `previous_terms` call made on `store` from now on."""
    calls: list[dict[Any, int]] = []
    original = store.previous_terms

    async def recording(before: Any, *, table: str | None = None) -> Any:
        calls.append(dict(before))
        return await original(before, table=table)

    store.previous_terms = recording  # type: ignore[method-assign]
    return calls


async def test_a_restarted_projection_looks_the_context_up_once_per_batch() -> None:
    store = InMemoryTranscriptStore()
    log = records(threads=3, length=5)  # position-major: 3 records per position
    await ClickHouseProjection(store).process(log[:6])
    calls = record_lookups(store)
    processor = ClickHouseProjection(store)
    for position in (2, 3, 4):
        await processor.process(log[3 * position : 3 * position + 3])
    # position 2: t0 has only a tool message (no context needed), t1 and t2 are looked up;
    # position 3: t0 then (unknown to the cache); position 4: all known
    assert [sorted(key[3] for key in call) for call in calls] == [["t1", "t2"], ["t0"]]
    fresh = InMemoryTranscriptStore()
    await ClickHouseProjection(fresh).process(log)
    assert distinct_rows(store) == distinct_rows(fresh)


async def test_new_threads_need_no_lookup_and_a_gap_before_the_first_message_does() -> None:
    store = InMemoryTranscriptStore()
    calls = record_lookups(store)
    log = records(threads=3, length=4)
    await ClickHouseProjection(store, context_cache_threads=0).process(log)
    assert calls == []  # every thread's batch starts at its offset 0
    # t9: a system prompt at 0, offset 1 missing (dead-lettered), terms from 2 on: 2 is looked up
    gap = [message("t9", 0, "setup", role="system"), message("t9", 2, "apples and pears", role="user")]
    await ClickHouseProjection(store, context_cache_threads=0).process(
        [record_of(msg, 100 + i) for i, msg in enumerate(gap)]
    )
    assert [sorted((key[3], first) for key, first in call.items()) for call in calls] == [[("t9", 2)]]
    # the same thread whole (0, 1, 2): no lookup, and the opening prompt gives no context
    whole = [gap[0], message("t9", 1, "hello there", role="user"), gap[1]]
    fresh = InMemoryTranscriptStore()
    await ClickHouseProjection(fresh).process([record_of(msg, i) for i, msg in enumerate(whole)])
    in_order = sorted(fresh.rows, key=lambda r: r.offset)
    assert [r.context_terms for r in in_order] == [(), (), tuple(terms("hello there"))]
