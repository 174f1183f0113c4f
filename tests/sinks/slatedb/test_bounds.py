"""Numbers beyond what a journal key holds (2^64 - 1) are InvalidInput, never a storage error
(issue 9, finding 15: `after` >= 2^64 answered 503 `journal_unavailable`)."""

from __future__ import annotations

import pytest

from core.errors import InvalidInput
from sinks.slatedb.journal import SlateJournal

from .helpers import thread, user


@pytest.mark.parametrize("offset", [2**64, 2**64 + 1, 10**30, -2])
async def test_after_an_offset_no_key_can_hold(journal: SlateJournal, offset: int) -> None:
    await journal.append(thread(), "a", None, [user("hello")])
    with pytest.raises(InvalidInput) as info:
        await journal.after(thread(), offset)
    assert info.value.field == "offset"
    assert [m.content for m in await journal.after(thread(), 2**64 - 1)] == []


@pytest.mark.parametrize("value", [2**64, -1])
async def test_counts_and_seqs_no_key_can_hold(journal: SlateJournal, value: int) -> None:
    for call, field in [
        (journal.read_from_seq(value, 10), "after_seq"),
        (journal.last(thread(), value), "n"),
        (journal.set_cursor("relay", value), "seq"),
    ]:
        with pytest.raises(InvalidInput) as info:
            await call
        assert info.value.field == field
