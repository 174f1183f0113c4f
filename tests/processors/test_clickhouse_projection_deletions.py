"""clickhouse-projection and thread deletions (`journal.deletions`), on the in-memory store: a
tombstone deletes the thread's rows and no deleted message is ever projected again (a replay, a
redelivery, a new processor that loads the register's tombstones before its first batch); a
thread used again after its deletion is projected. The real engines: the broker test beside it
and tests/memstream/ops/test_rebuild_clickhouse.py."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

from core.stores.deletions import SeqRanges, ThreadScope, Tombstone
from processors.clickhouse_projection import ClickHouseProjection
from streams.codecs import journal_deletions
from streams.deletion_filter import decode_tombstone
from streams.runtime.processor import InvalidMessage, Record
from tests.fakes.transcripts import InMemoryTranscriptStore
from tests.processors.transcript_support import message, record_of

THREAD = Tombstone("test", "acme", "th-1", 2)


def deletion(tombstone: Tombstone, offset: int, prefix: str = "pfx.") -> Record:
    event = journal_deletions.encode(7, tombstone, datetime(2026, 12, 2, tzinfo=UTC))
    return Record(f"{prefix}journal.deletions", 0, offset, event.key, event.value, (), None)


def history() -> list[Record]:
    """th-1 offsets 0-1 (seqs 1-2), th-2 offset 0 (seq 3)."""
    return [
        record_of(message("th-1", 0, "hello kiwi", seq=1), 0),
        record_of(message("th-1", 1, "more kiwi", seq=2), 1),
        record_of(message("th-2", 0, "other kiwi", seq=3), 2),
    ]


class Register:
    def __init__(self, known: Sequence[Tombstone]) -> None:
        self.known = list(known)

    async def tombstones(self) -> Sequence[Tombstone]:
        return self.known

    async def deleted_seqs(self) -> dict[ThreadScope, SeqRanges]:
        return {}


def threads(store: InMemoryTranscriptStore) -> list[tuple[str, int]]:
    return sorted({(r.thread_id, r.seq) for r in store.rows})  # the fake keeps copies


async def test_a_tombstone_deletes_the_rows_and_a_replay_does_not_bring_them_back() -> None:
    store = InMemoryTranscriptStore()
    projection = ClickHouseProjection(store)
    await projection.process(history())
    await projection.process([deletion(THREAD, 0)])
    assert threads(store) == [("th-2", 3)]
    await projection.process(history())  # a replay of journal.messages
    await projection.process([deletion(THREAD, 0)])  # a redelivery: idempotent
    assert threads(store) == [("th-2", 3)]
    again = record_of(message("th-1", 0, "new life", seq=9), 3)  # the id used again later
    await projection.process([again])
    assert threads(store) == [("th-1", 9), ("th-2", 3)]


async def test_in_one_batch_the_tombstone_applies_before_the_messages() -> None:
    store = InMemoryTranscriptStore()
    await ClickHouseProjection(store).process([*history(), deletion(THREAD, 0)])
    assert threads(store) == [("th-2", 3)]


async def test_a_new_processor_knows_the_registers_tombstones_before_projecting() -> None:
    store = InMemoryTranscriptStore()
    projection = ClickHouseProjection(store, tombstones=Register([THREAD]))
    await projection.start()
    await projection.process(history())  # a rebuild's replay from the beginning
    assert threads(store) == [("th-2", 3)]


async def test_a_register_away_at_start_is_read_by_the_first_batch() -> None:
    class Away(Register):
        failures = 1

        async def tombstones(self) -> Sequence[Tombstone]:
            if self.failures:
                self.failures -= 1
                raise ConnectionRefusedError("postgres away")
            return self.known

    store = InMemoryTranscriptStore()
    projection = ClickHouseProjection(store, tombstones=Away([THREAD]))
    await projection.start()  # logged, not raised
    await projection.process(history())
    assert threads(store) == [("th-2", 3)]


def test_a_bad_deletion_record_is_invalid() -> None:
    good = deletion(THREAD, 0)
    assert decode_tombstone(good) == THREAD
    with pytest.raises(InvalidMessage):
        decode_tombstone(Record(good.topic, 0, 1, b"test/acme/other", good.value, (), None))
    with pytest.raises(InvalidMessage):
        decode_tombstone(Record(good.topic, 0, 1, good.key, None, (), None))
