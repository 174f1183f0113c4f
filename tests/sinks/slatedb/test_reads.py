"""SlateJournal cursors survive reopening (reads are in the `Journal` contract,
tests/core/stores/test_journal.py)."""

from __future__ import annotations

from sinks.slatedb.journal import SlateJournal


async def test_cursors_default_to_zero_and_persist(journal_url: str) -> None:
    journal = await SlateJournal.open(journal_url)
    assert await journal.get_cursor("relay") == 0
    await journal.set_cursor("relay", 42)
    await journal.set_cursor("other", 7)
    await journal.set_cursor("relay", 43)
    await journal.close()
    reopened = await SlateJournal.open(journal_url)
    try:
        assert await reopened.get_cursor("relay") == 43
        assert await reopened.get_cursor("other") == 7
    finally:
        await reopened.close()
