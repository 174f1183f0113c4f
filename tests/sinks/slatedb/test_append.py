"""SlateJournal appends: group commit, the size limit, a failed group, the protocol (the `Journal`
contract it shares with the fake is tests/core/stores/test_journal.py)."""

from __future__ import annotations

import asyncio

import pytest

from core.errors import Conflict, InvalidInput, JournalUnavailable
from core.stores.journal import Journal
from sinks.slatedb.journal import SlateJournal

from .helpers import thread, user


async def test_group_commit_batches_concurrent_appends(journal: SlateJournal) -> None:
    await journal.append(thread(), "a", None, [user("warm-up")])
    before = journal.stats
    results = await asyncio.gather(
        *(journal.append(thread(f"t{i}"), "a", None, [user("x")]) for i in range(100))
    )
    after = journal.stats
    assert after.appends - before.appends == 100
    assert after.messages - before.messages == 100
    assert after.batches - before.batches < 10  # most appends shared a WriteBatch
    assert sorted(r[0].seq for r in results) == list(range(2, 102))


async def assert_nothing_written(journal: SlateJournal, seq: int) -> None:
    assert await journal.last_seq() == seq
    assert await journal.read_from_seq(seq, 10) == []


async def test_oversized_message_is_rejected_naming_the_limit(journal_url: str) -> None:
    journal = await SlateJournal.open(journal_url, max_message_bytes=2_000)
    try:
        await journal.append(thread(), "a", None, [user("small")])
        with pytest.raises(InvalidInput, match="limit is 2000 bytes") as info:
            await journal.append(thread(), "a", None, [user("fine"), user("x" * 2_000)])
        assert info.value.field == "messages[1]"
        await assert_nothing_written(journal, 1)
    finally:
        await journal.close()


async def test_a_failed_group_fails_its_callers_and_offsets_are_not_reused(journal: SlateJournal) -> None:
    await journal.append(thread(), "a", None, [user("first", "m0")])
    journal._commits.write_timeout_s = 0  # the next group's durability wait times out at once
    with pytest.raises(JournalUnavailable, match="did not complete"):
        await journal.append(thread(), "a", None, [user("lost?", "m1"), user("lost?", "m2")])
    journal._commits.write_timeout_s = 30
    # the counters are re-derived from storage: the failed batch may still land, so it is skipped
    retried = await journal.append(thread(), "a", None, [user("lost?", "m1"), user("lost?", "m2")])
    later = await journal.append(thread(), "a", None, [user("next")])
    history = await journal.after(thread(), -1)
    assert [m.offset for m in history] == list(range(len(history)))
    assert [m.seq for m in await journal.read_from_seq(0, 100)] == list(range(1, len(history) + 1))
    assert [m.message_id for m in history[1:3]] == ["m1", "m2"]
    assert retried == history[1:3]
    assert later[0] == history[-1]


async def test_slate_journal_implements_the_journal_protocol(journal: SlateJournal) -> None:
    as_protocol: Journal = journal  # checked by mypy
    assert as_protocol is journal


async def test_one_group_resolves_stored_and_in_group_ids(journal: SlateJournal) -> None:
    """The id-index reads of a group are issued together: stored retries, ids taken in another
    thread, ids first written earlier in the same group and fresh ids each get their answer."""
    await journal.append(thread("t1"), "a", None, [user("one", "s1"), user("two", "s2")])
    stored = await journal.last(thread("t1"), 2)
    results = await asyncio.gather(
        journal.append(thread("t1"), "a", None, [user("two", "s2"), user("three", "n1")]),
        journal.append(thread("t2"), "a", None, [user("one", "s1")]),
        journal.append(thread("t1"), "a", None, [user("three", "n1")]),
        journal.append(thread("t1"), "a", None, [user("changed", "s1")]),
        *(journal.append(thread(f"f{i}"), "a", None, [user("x", f"f{i}")]) for i in range(20)),
        return_exceptions=True,
    )
    retry, other_thread, in_group, changed, *fresh = results
    assert not isinstance(retry, BaseException) and not isinstance(in_group, BaseException)
    assert retry[0] == stored[1] and retry[1].offset == 2
    assert in_group == [retry[1]]
    assert isinstance(other_thread, Conflict) and "another thread" in other_thread.message
    assert isinstance(changed, Conflict) and "content" in changed.message
    assert all(isinstance(r, list) and r[0].offset == 0 for r in fresh)
    assert await journal.last_seq() == 3 + 20
