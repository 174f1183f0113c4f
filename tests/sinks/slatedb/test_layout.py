"""`sinks.slatedb.layout` on real SlateDB journals: a journal knows which shard it is, a journal
made before shards existed is shard 0 of 1, and a writer or reader configured for another layout
is refused with what to do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from slatedb.uniffi import DbBuilder

from core.errors import JournalShardsMismatch
from sinks.slatedb import keys
from sinks.slatedb.binding import READ
from sinks.slatedb.journal import SlateJournal
from sinks.slatedb.objectstore import build_object_store
from sinks.slatedb.reader import SlateJournalReader
from tests.sinks.slatedb.helpers import thread, user


async def stored_row(url: str, key: bytes) -> bytes | None:
    """The raw value of `key` in the journal at `url` (opened as a writer, then closed)."""
    location = build_object_store(url)
    db = await DbBuilder(location.db_path, location.store).build()
    try:
        return await db.get_with_options(key, READ)
    finally:
        await db.shutdown()


async def test_a_shards_messages_carry_it_and_its_seqs_start_at_1(tmp_path: Path) -> None:
    url = f"file://{tmp_path / 'journal-shard-2'}"
    journal = await SlateJournal.open(url, shard=2, shards=3)
    try:
        assert journal.shard == 2
        [message] = await journal.append(thread(), "a", None, [user("hi")])
        assert (message.shard, message.seq) == (2, 1)
        assert await journal.last(thread(), 1) == [message]
        assert await journal.read_from_seq(0, 10) == [message]
    finally:
        await journal.close()
    reopened = await SlateJournal.open(url, shard=2, shards=3)
    try:
        assert [m.shard for m in await reopened.after(thread(), -1)] == [2]  # read from storage
    finally:
        await reopened.close()
    assert await stored_row(url, keys.LAYOUT_KEY) == b"2/3"


async def test_one_shard_stores_rows_exactly_as_before_shards(tmp_path: Path) -> None:
    url = f"file://{tmp_path / 'journal'}"
    journal = await SlateJournal.open(url, shard=0, shards=1)
    try:
        [message] = await journal.append(thread(), "a", None, [user("hi")])
    finally:
        await journal.close()
    row = await stored_row(url, keys.message_key(thread(), 0))
    assert row is not None and "shard" not in json.loads(row)
    assert message.shard == 0


async def test_a_journal_made_before_shards_is_shard_0_of_1(tmp_path: Path) -> None:
    url = f"file://{tmp_path / 'journal'}"
    old = await SlateJournal.open(url)  # no layout: as every release before shards opened it
    try:
        await old.append(thread(), "a", None, [user("from before")])
    finally:
        await old.close()
    assert await stored_row(url, keys.LAYOUT_KEY) is None
    with pytest.raises(JournalShardsMismatch) as refused:
        await SlateJournal.open(url, shard=0, shards=3)
    text = str(refused.value)
    assert "deployment of 1 journal shard(s) (MEMSTREAM_JOURNAL_SHARDS=1)" in text
    assert "configured with 3" in text and "Resharding is not supported" in text
    assert "memstream export" in text
    journal = await SlateJournal.open(url, shard=0, shards=1)  # the old count: fine, and recorded
    try:
        assert [m.content for m in await journal.after(thread(), -1)] == ["from before"]
    finally:
        await journal.close()
    assert await stored_row(url, keys.LAYOUT_KEY) == b"0/1"


async def test_an_empty_journal_takes_the_layout_of_its_first_open(tmp_path: Path) -> None:
    url = f"file://{tmp_path / 'journal'}"
    await (await SlateJournal.open(url, shard=0, shards=4)).close()
    for wrong, why in ((1, "configured with 1"), (8, "configured with 8")):
        with pytest.raises(JournalShardsMismatch, match=why):
            await SlateJournal.open(url, shard=0, shards=wrong)
    with pytest.raises(JournalShardsMismatch, match=r"is shard 0 of 4, not shard 2: .*MEMSTREAM_JOURNAL_URL"):
        await SlateJournal.open(url, shard=2, shards=4)
    await (await SlateJournal.open(url, shard=0, shards=4)).close()


async def test_a_reader_of_another_layout_is_refused(tmp_path: Path) -> None:
    url = f"file://{tmp_path / 'journal-shard-1'}"
    writer = await SlateJournal.open(url, shard=1, shards=2)
    try:
        await writer.append(thread(), "a", None, [user("hi")])
        reader = await SlateJournalReader.open(url, shard=1, shards=2)
        try:
            assert [m.shard for m in await reader.after(thread(), -1)] == [1]
        finally:
            await reader.close()
        with pytest.raises(
            JournalShardsMismatch, match="is shard 1 of 2, and this process expects shard 1 of 3"
        ):
            await SlateJournalReader.open(url, shard=1, shards=3)
    finally:
        await writer.close()


async def test_a_shard_index_must_fit_the_count(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="shard 3 is not one of the 3"):
        await SlateJournal.open(f"file://{tmp_path / 'j'}", shard=3, shards=3)
