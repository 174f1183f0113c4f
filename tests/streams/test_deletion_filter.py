"""`streams.deletion_filter.DeletedMessages`: a batch's tombstones are learnt before its messages are
judged, the register's tombstones are loaded once before the first batch, a thread id used again
(higher seqs) is kept, and a bad record of either topic is invalid before anything is learnt."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

from core.stores.deletions import SeqRanges, ThreadScope, Tombstone
from streams.codecs import journal_deletions
from streams.deletion_filter import DeletedMessages
from streams.runtime.processor import InvalidMessage, Record
from tests.processors.transcript_support import message, raw_record, record_of

pytestmark = pytest.mark.unit


def deletion(tombstone: Tombstone, offset: int = 0) -> Record:
    event = journal_deletions.encode(1, tombstone, datetime(2026, 12, 2, tzinfo=UTC))
    return Record("x.journal.deletions", 0, offset, event.key, event.value, (), None)


class Register:
    def __init__(self, *known: Tombstone) -> None:
        self.known = list(known)
        self.loads = 0

    async def tombstones(self) -> Sequence[Tombstone]:
        self.loads += 1
        return self.known

    async def deleted_seqs(self) -> dict[ThreadScope, SeqRanges]:
        return {}


def batch() -> list[Record]:
    return [record_of(message("th-1", 0, "a", seq=1), 0), record_of(message("th-2", 0, "b", seq=2), 1)]


async def test_a_batchs_tombstone_applies_to_its_messages() -> None:
    deleted = DeletedMessages(None, "test")
    live = await deleted.live_messages([*batch(), deletion(Tombstone("test", "acme", "th-1", 1))])
    assert [m.thread_id for m in live] == ["th-2"]
    reused = record_of(message("th-1", 0, "again", seq=5), 2)
    assert [m.seq for m in await deleted.live_messages([*batch(), reused])] == [2, 5]


async def test_the_registers_tombstones_are_loaded_once_first() -> None:
    register = Register(Tombstone("test", "acme", "th-2", 2))
    deleted = DeletedMessages(register, "test")
    assert [m.thread_id for m in await deleted.live_messages(batch())] == ["th-1"]
    assert [m.thread_id for m in await deleted.live_messages(batch())] == ["th-1"]
    assert register.loads == 1


async def test_a_bad_record_is_invalid_before_anything_is_learnt() -> None:
    deleted = DeletedMessages(None, "test")
    with pytest.raises(InvalidMessage):
        await deleted.live_messages(
            [deletion(Tombstone("test", "acme", "th-1", 1)), raw_record(b"k", b"{}", 3)]
        )
    assert [m.thread_id for m in await deleted.live_messages(batch())] == ["th-1", "th-2"]
