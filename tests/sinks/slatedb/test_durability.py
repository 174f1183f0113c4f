"""Durability across reopen, and fencing of a second writer."""

from __future__ import annotations

import asyncio

import pytest

from core.errors import JournalFenced
from core.journal.models import Message
from sinks.slatedb.journal import SlateJournal

from .helpers import every_call_is_fenced, thread, user


async def test_everything_acknowledged_is_there_after_reopening(journal_url: str) -> None:
    journal = await SlateJournal.open(journal_url)
    acked = [
        m
        for chunk in await asyncio.gather(
            *(journal.append(thread(f"t{i % 5}"), "a", None, [user(f"m{i}", f"id{i}")]) for i in range(50))
        )
        for m in chunk
    ]
    await journal.close()

    reopened = await SlateJournal.open(journal_url)
    try:
        assert await reopened.last_seq() == 50
        assert sorted(await reopened.read_from_seq(0, 100), key=lambda m: m.seq) == sorted(
            acked, key=lambda m: m.seq
        )
        # counters are recovered: new appends continue each thread and the global seq
        more = await reopened.append(thread("t0"), "a", None, [user("after reopen")])
        assert (more[0].offset, more[0].seq) == (10, 51)
        fresh = await reopened.append(thread("t-new"), "a", None, [user("new thread")])
        assert (fresh[0].offset, fresh[0].seq) == (0, 52)
        # message ids are still known: a retry returns the stored message
        assert await reopened.append(thread("t3"), "a", None, [user("m3", "id3")]) == [acked[3]]
    finally:
        await reopened.close()


async def test_second_writer_fences_the_first(journal_url: str) -> None:
    first = await SlateJournal.open(journal_url)
    written: list[Message] = await first.append(thread(), "a", None, [user(f"m{i}") for i in range(5)])
    await first.set_cursor("relay", 3)

    second = await SlateJournal.open(journal_url)
    try:
        with pytest.raises(JournalFenced) as info:
            await first.append(thread(), "a", None, [user("lost")])
        assert journal_url in info.value.message
        await every_call_is_fenced(first)
        await first.close()  # quiet

        # the fenced writer's acknowledged data is intact and visible to the new writer
        assert await second.last(thread(), 10) == written
        assert await second.get_cursor("relay") == 3
        assert await second.last_seq() == 5
        nxt = await second.append(thread(), "a", None, [user("from the new writer")])
        assert (nxt[0].offset, nxt[0].seq) == (5, 6)
    finally:
        await second.close()


async def test_a_reading_writer_notices_it_was_fenced(journal_url: str) -> None:
    first = await SlateJournal.open(journal_url)
    await first.append(thread(), "a", None, [user("x")])
    second = await SlateJournal.open(journal_url)
    try:
        # without writing, the first writer learns of the fence from SlateDB's manifest poll (~1 s)
        for _ in range(50):
            try:
                await first.last(thread(), 1)
            except JournalFenced:
                break
            await asyncio.sleep(0.1)
        else:
            pytest.fail("the first writer never noticed it was fenced")
        await every_call_is_fenced(first)
        await first.close()
    finally:
        await second.close()


async def test_queued_appends_fail_when_fenced(journal_url: str) -> None:
    first = await SlateJournal.open(journal_url)
    await first.append(thread(), "a", None, [user("x")])
    second = await SlateJournal.open(journal_url)
    try:
        outcomes = await asyncio.gather(
            *(first.append(thread(), "a", None, [user(f"q{i}")]) for i in range(10)), return_exceptions=True
        )
        assert all(isinstance(o, JournalFenced) for o in outcomes)
        assert [m.content for m in await second.after(thread(), -1)] == ["x"]
        await first.close()
    finally:
        await second.close()
