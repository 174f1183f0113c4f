"""`SlateJournalReader` (`sinks.slatedb.reader`): what only the read-only view of a journal does.
Its reads are in the journal contract (`tests/core/stores/test_journal.py`, `reads`). Here: writes
are refused, a read right after an append waits for it instead of coming back short, the wait is
bounded, cursors and closing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from core.errors import InvalidInput, JournalReadOnly, JournalUnavailable, StoreUnavailable, ThreadDeleted
from core.journal.reading import Follower, messages_between
from sinks.slatedb.journal import SlateJournal
from sinks.slatedb.reader import JournalNotFound, SlateJournalReader
from tests.sinks.slatedb.helpers import eventually, thread, user


@pytest.fixture
async def reader(journal: SlateJournal, journal_url: str) -> AsyncIterator[SlateJournalReader]:
    """A reader of `journal` that polls for new writes every 300 ms (so it lags after an append)."""
    opened = await SlateJournalReader.open(journal_url, poll_interval_ms=300, visibility_timeout_s=5)
    yield opened
    await opened.close()


async def test_writes_are_refused_with_a_typed_error(
    journal: SlateJournal, reader: SlateJournalReader
) -> None:
    with pytest.raises(JournalReadOnly, match="read-only"):
        await reader.append(thread(), "a", None, [user("x")])
    with pytest.raises(JournalReadOnly):
        await reader.set_cursor("relay", 1)
    with pytest.raises(JournalReadOnly):
        reader.add_append_listener(lambda: None)
    assert await journal.last_seq() == 0


async def test_a_range_read_right_after_an_append_waits_for_it(
    journal: SlateJournal, reader: SlateJournalReader
) -> None:
    assert isinstance(reader, Follower)
    t = thread("lagging")
    for attempt in range(10):  # until an append is caught before the reader saw it
        appended = await journal.append(t, "a", None, [user(f"m{attempt}")])
        offset = appended[0].offset
        if len(await reader.after(t, -1)) <= offset:
            break
    else:
        pytest.fail("the reader saw every append at once: nothing to wait for")
    found = await messages_between(reader, t, after=-1, up_to=offset)
    assert [m.offset for m in found] == list(range(offset + 1))
    # a range that ends before the thread's visible end needs no wait
    assert [m.offset for m in await messages_between(reader, t, after=-1, up_to=0)] == [0]


async def test_the_wait_is_bounded_and_is_an_outage(journal: SlateJournal, journal_url: str) -> None:
    await journal.append(thread(), "a", None, [user("only")])
    reader = await SlateJournalReader.open(journal_url, poll_interval_ms=20, visibility_timeout_s=0.3)
    try:
        await reader.wait_visible(thread(), 0)
        with pytest.raises(StoreUnavailable, match="offset 1 of thread t1 is not visible"):
            await messages_between(reader, thread(), after=-1, up_to=1)
    finally:
        await reader.close()


async def test_a_wait_for_a_deleted_threads_messages_says_so(journal: SlateJournal, journal_url: str) -> None:
    await journal.append(thread("gone"), "a", None, [user("one"), user("two")])
    await journal.delete_thread(thread("gone"))
    reader = await SlateJournalReader.open(journal_url, poll_interval_ms=20, visibility_timeout_s=0.3)
    try:
        with pytest.raises(ThreadDeleted, match="the thread was deleted"):
            await messages_between(reader, thread("gone"), after=-1, up_to=1)
        with pytest.raises(JournalReadOnly):
            await reader.delete_thread(thread("gone"))
    finally:
        await reader.close()


async def test_cursors_become_visible(journal: SlateJournal, reader: SlateJournalReader) -> None:
    assert await reader.get_cursor("relay") == 0
    await journal.set_cursor("relay", 42)

    async def shown() -> bool:
        return await reader.get_cursor("relay") == 42

    await eventually(shown)


async def test_a_closed_reader_refuses_reads(reader: SlateJournalReader) -> None:
    await reader.close()
    await reader.close()  # idempotent
    with pytest.raises(JournalUnavailable, match="closed"):
        await reader.last(thread(), 1)


async def test_a_journal_nobody_created_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(JournalNotFound, match="no writer created it yet"):
        await SlateJournalReader.open(f"file://{tmp_path / 'never-written'}")


async def test_arguments_are_checked(reader: SlateJournalReader) -> None:
    with pytest.raises(InvalidInput):
        await reader.after(thread(), -2)
    with pytest.raises(InvalidInput):
        await reader.read_from_seq(-1, 1)
    with pytest.raises(ValueError):
        await SlateJournalReader.open("file:///nowhere", poll_interval_ms=0)
