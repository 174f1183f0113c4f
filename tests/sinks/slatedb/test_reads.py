"""Reads: last, after, read_from_seq, cursors, tenancy isolation."""

from __future__ import annotations

import pytest

from core.errors import InvalidInput
from sinks.slatedb.journal import SlateJournal

from .helpers import thread, user


async def fill(journal: SlateJournal, count: int, thread_id: str = "t1", account_id: str = "acc1") -> None:
    t = thread(thread_id, account_id)
    for start in range(0, count, 1000):
        chunk = range(start, min(count, start + 1000))
        await journal.append(t, "a", None, [user(f"{thread_id}-{i}") for i in chunk])


async def test_last_returns_the_newest_oldest_first(journal: SlateJournal) -> None:
    await fill(journal, 30)
    await fill(journal, 5, "t2")
    last = await journal.last(thread(), 20)
    assert [m.offset for m in last] == list(range(10, 30))
    assert [m.content for m in await journal.last(thread(), 1)] == ["t1-29"]


async def test_last_edge_cases(journal: SlateJournal) -> None:
    assert await journal.last(thread(), 5) == []  # empty thread
    await fill(journal, 3)
    assert await journal.last(thread(), 0) == []
    assert [m.offset for m in await journal.last(thread(), 100)] == [0, 1, 2]
    with pytest.raises(InvalidInput):
        await journal.last(thread(), -1)


async def test_after_edge_cases(journal: SlateJournal) -> None:
    assert await journal.after(thread(), -1) == []
    await fill(journal, 2500)
    assert [m.offset for m in await journal.after(thread(), -1, 3)] == [0, 1, 2]
    assert [m.offset for m in await journal.after(thread(), 10, 2)] == [11, 12]
    assert len(await journal.after(thread(), -1)) == 1000  # default limit
    assert len(await journal.after(thread(), -1, 2400)) == 2400  # more than one scan batch
    assert [m.offset for m in await journal.after(thread(), 2498, 10)] == [2499]
    assert await journal.after(thread(), 2499) == []
    assert await journal.after(thread(), 10**6) == []
    assert await journal.after(thread(), 5, 0) == []
    with pytest.raises(InvalidInput):
        await journal.after(thread(), -2)
    with pytest.raises(InvalidInput):
        await journal.after(thread(), 0, -1)


async def test_read_from_seq_spans_threads_in_seq_order(journal: SlateJournal) -> None:
    for i in range(6):
        await fill(journal, 2, f"t{i % 3}")
    relayed = await journal.read_from_seq(0, 100)
    assert [m.seq for m in relayed] == list(range(1, 13))
    assert [m.thread_id for m in relayed[:6]] == ["t0", "t0", "t1", "t1", "t2", "t2"]
    assert [m.seq for m in await journal.read_from_seq(4, 3)] == [5, 6, 7]
    assert await journal.read_from_seq(0, 0) == []
    with pytest.raises(InvalidInput):
        await journal.read_from_seq(-1, 10)


async def test_threads_of_other_accounts_and_environments_are_invisible(journal: SlateJournal) -> None:
    await journal.append(thread("shared", "acc1"), "a", None, [user("for acc1")])
    await journal.append(thread("shared", "acc2"), "a", None, [user("for acc2"), user("more acc2")])
    await journal.append(thread("shared", "acc1", "prod"), "a", None, [user("prod acc1")])
    await journal.append(thread("shared1", "acc1"), "a", None, [user("longer thread id")])
    assert [m.content for m in await journal.last(thread("shared", "acc1"), 10)] == ["for acc1"]
    assert [m.content for m in await journal.after(thread("shared", "acc2"), -1)] == ["for acc2", "more acc2"]
    assert [m.content for m in await journal.last(thread("shared", "acc1", "prod"), 10)] == ["prod acc1"]
    assert [m.offset for m in await journal.last(thread("shared", "acc2"), 10)] == [0, 1]


async def test_cursors_default_to_zero_and_persist(journal_url: str) -> None:
    journal = await SlateJournal.open(journal_url)
    assert await journal.get_cursor("relay") == 0
    await journal.set_cursor("relay", 42)
    await journal.set_cursor("other", 7)
    await journal.set_cursor("relay", 43)
    with pytest.raises(InvalidInput):
        await journal.set_cursor("relay", -1)
    with pytest.raises(InvalidInput):
        await journal.get_cursor("bad/name")
    await journal.close()
    reopened = await SlateJournal.open(journal_url)
    try:
        assert await reopened.get_cursor("relay") == 43
        assert await reopened.get_cursor("other") == 7
    finally:
        await reopened.close()
