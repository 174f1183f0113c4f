"""The last durable messages kept in memory for the relay's reads (`sinks.slatedb.recent`): what
`read_from_seq` answers from them is exactly what storage answers, and anything they do not cover
is read from storage."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from core.errors import JournalUnavailable
from core.journal.models import Message
from sinks.slatedb.journal import SlateJournal
from sinks.slatedb.recent import RecentMessages
from streams.codecs import journal_messages

from .helpers import thread, tool_call_pair, user


def message(seq: int) -> Message:
    return Message(
        message_id=f"m{seq}",
        environment="test",
        account_id="acc1",
        agent_id="a",
        user_id=None,
        thread_id="t1",
        offset=seq - 1,
        seq=seq,
        role="user",
        content="hello",
        created_at=datetime(2026, 12, 1, tzinfo=UTC),
        token_count=1,
    )


def kept(*seqs: int) -> list[tuple[Message, int]]:
    return [(message(seq), 10) for seq in seqs]


def seqs(messages: list[Message] | None) -> list[int] | None:
    return None if messages is None else [m.seq for m in messages]


def test_reads_are_answered_only_when_covered_up_to_the_durable_end() -> None:
    recent = RecentMessages()
    assert recent.read(0, 10, durable_seq=0) is None  # nothing kept (e.g. after a restart)
    recent.add(kept(5, 6))
    recent.add(kept(7, 8, 9))
    assert seqs(recent.read(4, 10, durable_seq=9)) == [5, 6, 7, 8, 9]
    assert seqs(recent.read(6, 2, durable_seq=9)) == [7, 8]
    assert recent.read(9, 10, durable_seq=9) == []
    assert recent.read(3, 10, durable_seq=9) is None  # seq 4 is not kept
    assert recent.read(6, 10, durable_seq=11) is None  # durable messages past the kept ones


def test_a_hole_replaces_what_was_kept() -> None:
    recent = RecentMessages()
    recent.add(kept(1, 2))
    recent.add(kept(5))  # 3 and 4: a failed group that may yet become durable
    assert len(recent) == 1
    assert recent.read(2, 10, durable_seq=5) is None
    assert seqs(recent.read(4, 10, durable_seq=5)) == [5]


def test_the_oldest_go_first_past_the_count_or_the_size() -> None:
    by_count = RecentMessages(max_messages=3)
    by_count.add(kept(1, 2, 3, 4))
    assert seqs(by_count.read(1, 10, durable_seq=4)) == [2, 3, 4]
    assert by_count.read(0, 10, durable_seq=4) is None
    by_size = RecentMessages(max_bytes=25)
    by_size.add(kept(1, 2, 3))
    assert seqs(by_size.read(1, 10, durable_seq=3)) == [2, 3]


async def test_the_relay_read_is_what_storage_holds(journal: SlateJournal, journal_url: str) -> None:
    await asyncio.gather(
        *(journal.append(thread(f"t{i % 3}"), "a", "u1", [user(f"hello {i}", f"m{i}")]) for i in range(40))
    )
    await journal.append(thread("t1"), "a", None, tool_call_pair())
    reads = [(0, 1000), (0, 7), (13, 5), (41, 10), (42, 10)]
    from_memory = [await journal.read_from_seq(after, limit) for after, limit in reads]
    assert len(journal._commits._recent) == 42  # every read above was answered from memory
    await journal.close()
    reopened = await SlateJournal.open(journal_url)
    try:
        assert reopened._commits.read_recent(0, 10) is None  # a new writer knows nothing yet
        from_storage = [await reopened.read_from_seq(after, limit) for after, limit in reads]
    finally:
        await reopened.close()
    assert from_memory == from_storage
    assert [[journal_messages.encode(m) for m in read] for read in from_memory] == [
        [journal_messages.encode(m) for m in read] for read in from_storage
    ]
    assert [len(read) for read in from_memory] == [42, 7, 5, 1, 0]


async def test_after_a_failed_group_the_reads_before_it_come_from_storage(journal: SlateJournal) -> None:
    await journal.append(thread(), "a", None, [user("first")])
    journal._commits.write_timeout_s = 0
    with pytest.raises(JournalUnavailable):
        await journal.append(thread(), "a", None, [user("lost?", "m1")])
    journal._commits.write_timeout_s = 30
    later = await journal.append(thread(), "a", None, [user("next")])
    assert journal._commits.read_recent(0, 10) is None  # seq 2 (the failed group) may be durable
    assert journal._commits.read_recent(later[0].seq - 1, 10) == later
    read = await journal.read_from_seq(0, 10)
    assert [m.seq for m in read] == list(range(1, later[0].seq + 1))
