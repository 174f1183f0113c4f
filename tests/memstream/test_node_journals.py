"""`memstream.node.open_journals`: the node opens the writer of every journal shard, shard 0 first,
each at its URL and stamped with its shard; a shard that cannot be opened fails the start."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.config import Settings
from core.errors import JournalShardsMismatch
from core.journal.models import NewMessage, ThreadRef
from memstream.node import open_journals
from sinks.slatedb.journal import SlateJournal


async def test_every_shard_is_opened_at_its_url(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, journal_shards=3)
    journals = await open_journals(settings)
    try:
        assert list(journals.local()) == [0, 1, 2]
        assert [j.url for j in journals.local().values()] == [settings.shard_journal(k) for k in range(3)]
        assert settings.shard_journal(2) == settings.journal + "-shard-2"
        for i in range(12):
            ref = ThreadRef(environment=settings.environment, account_id="acme", thread_id=f"t-{i}")
            [message] = await journals.append(ref, "bot", None, [NewMessage(role="user", content="hi")])
            assert message.shard == journals.shard_of(ref)
    finally:
        await journals.close()


async def test_a_shard_of_another_layout_fails_the_start(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, journal_shards=2)
    stray = await SlateJournal.open(settings.shard_journal(1), shard=1, shards=4)  # another deployment's
    await stray.close()
    with pytest.raises(JournalShardsMismatch, match="deployment of 4 journal shard"):
        await open_journals(settings)
    # nothing was recorded in shard 0 by the failed start: the count can still be chosen
    journals = await open_journals(Settings(data_dir=tmp_path, journal_shards=4))
    await journals.close()
    with pytest.raises(JournalShardsMismatch, match="deployment of 4 journal shard"):
        await open_journals(settings)  # now it is recorded
