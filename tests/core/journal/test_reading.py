"""Reading a range of a thread's journal in pages (`messages_between`)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from core.journal.models import Message, ThreadRef
from core.journal.reading import messages_between

THREAD = ThreadRef(environment="test", account_id="acme", thread_id="th-1")
T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


def message(offset: int, agent: str = "bot") -> Message:
    return Message(
        message_id=f"m{offset}",
        environment=THREAD.environment,
        account_id=THREAD.account_id,
        agent_id=agent,
        user_id=None,
        thread_id=THREAD.thread_id,
        offset=offset,
        seq=offset + 1,
        role="user",
        content="hello",
        created_at=T0,
        token_count=1,
    )


class PagedJournal:
    """The `after` read of a journal holding `messages` of THREAD; records every read."""

    def __init__(self, messages: list[Message]) -> None:
        self.messages = messages
        self.reads: list[tuple[int, int]] = []

    async def after(self, thread: ThreadRef, offset: int, limit: int = 1000) -> list[Message]:
        assert thread == THREAD
        self.reads.append((offset, limit))
        return [m for m in self.messages if m.offset > offset][:limit]


async def between(
    journal: PagedJournal, *, after: int, up_to: int, agent_id: str | None = None, page_size: int = 1000
) -> list[int]:
    found = await messages_between(
        journal, THREAD, after=after, up_to=up_to, agent_id=agent_id, page_size=page_size
    )
    return [m.offset for m in found]


async def test_the_range_excludes_after_and_includes_up_to() -> None:
    journal = PagedJournal([message(i) for i in range(10)])
    assert await between(journal, after=2, up_to=6) == [3, 4, 5, 6]
    assert await between(journal, after=-1, up_to=0) == [0]
    assert await between(journal, after=-1, up_to=100) == list(range(10))


async def test_an_empty_range_reads_nothing() -> None:
    journal = PagedJournal([message(i) for i in range(3)])
    assert await between(journal, after=5, up_to=5) == []
    assert await between(journal, after=5, up_to=2) == []
    assert journal.reads == []


async def test_pages_are_read_until_up_to_is_passed() -> None:
    journal = PagedJournal([message(i) for i in range(10)])
    assert await between(journal, after=0, up_to=6, page_size=3) == [1, 2, 3, 4, 5, 6]
    assert journal.reads == [(0, 3), (3, 3)]  # the page reaching offset 6 is the last read


async def test_no_read_asks_for_more_than_is_left_up_to_up_to() -> None:
    """Offsets are gap-free, so the messages past `up_to` (appended since) are not read."""
    journal = PagedJournal([message(i) for i in range(500)])
    assert await between(journal, after=49, up_to=59) == list(range(50, 60))
    assert journal.reads == [(49, 10)]
    journal.reads.clear()
    assert await between(journal, after=-1, up_to=7, page_size=3) == list(range(8))
    assert journal.reads == [(-1, 3), (2, 3), (5, 2)]


async def test_reading_stops_at_the_end_of_the_thread() -> None:
    journal = PagedJournal([message(i) for i in range(4)])
    assert await between(journal, after=-1, up_to=50, page_size=2) == [0, 1, 2, 3]
    assert journal.reads == [(-1, 2), (1, 2), (3, 2)]


async def test_only_the_agents_messages_when_an_agent_is_given() -> None:
    agents = ["bot", "other", "bot", "other", "bot", "bot"]
    journal = PagedJournal([message(i, agent) for i, agent in enumerate(agents)])
    assert await between(journal, after=-1, up_to=4, agent_id="bot", page_size=2) == [0, 2, 4]
    assert await between(journal, after=-1, up_to=4) == [0, 1, 2, 3, 4]


async def test_offsets_with_holes_are_paged_by_the_last_offset_read() -> None:
    journal = PagedJournal([message(i) for i in (0, 5, 9, 20, 21)])
    assert await between(journal, after=0, up_to=20, page_size=1) == [5, 9, 20]
    assert [offset for offset, _ in journal.reads] == [0, 5, 9]


async def test_a_page_size_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="page_size"):
        await between(PagedJournal([]), after=-1, up_to=3, page_size=0)
