"""`LazyJournalViews` over real SlateDB journals in the test's directory: a shard's view opens when
one of its threads is first read (a shard nobody wrote yet is unavailable, not an error of the
processors' input), follows its writer, and refuses writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.config import Settings
from core.errors import JournalReadOnly, JournalUnavailable
from core.journal.models import NewMessage, ThreadRef
from core.sharding.shards import shard_of
from memstream.sharding.journal_views import LazyJournalViews
from sinks.slatedb.journal import SlateJournal

SHARDS = 2


def thread_in(settings: Settings, shard: int) -> ThreadRef:
    i = 0
    while shard_of(settings.environment, "acme", f"t-{i}", SHARDS) != shard:
        i += 1
    return ThreadRef(environment=settings.environment, account_id="acme", thread_id=f"t-{i}")


async def test_views_open_on_first_use_and_follow_their_writers(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, journal_shards=SHARDS, journal_reader_poll_ms=10)
    views = LazyJournalViews(settings)
    on_0, on_1 = thread_in(settings, 0), thread_in(settings, 1)
    writer = await SlateJournal.open(settings.shard_journal(1), shard=1, shards=SHARDS, flush_interval_ms=1)
    try:
        with pytest.raises(JournalUnavailable):
            await views.last(on_0, 5)  # shard 0 was never written: nothing to open yet
        assert views.local() == {}
        stored = await writer.append(on_1, "bot", None, [NewMessage(role="user", content="one")])
        await views.wait_visible(on_1, stored[0].offset)
        assert list(views.local()) == [1]
        assert [m.content for m in await views.last(on_1, 5)] == ["one"]
        more = await writer.append(on_1, "bot", None, [NewMessage(role="user", content="two")])
        await views.wait_visible(on_1, more[0].offset)
        assert [m.content for m in await views.after(on_1, 0)] == ["two"]
        with pytest.raises(JournalReadOnly):
            await views.append(on_1, "bot", None, [NewMessage(role="user", content="no")])
    finally:
        await views.close()
        await writer.close()
