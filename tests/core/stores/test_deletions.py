"""The deletion register's contract (`core.stores.deletions.DeletionRegister`) on the in-memory fake
and Postgres: one incomplete deletion per thread, the journal outcome kept once set, step reports,
completion, and the tombstones a projection loads."""

from __future__ import annotations

import pytest

from core.stores.deletions import DeletionRegister, JournalDeletion, Tombstone, Tombstones, seq_ranges
from sinks.postgres.deletions import PostgresDeletions
from tests.fakes.deletions import InMemoryDeletions


@pytest.fixture(params=["memory", pytest.param("postgres", marks=pytest.mark.engine)])
def register(request: pytest.FixtureRequest) -> DeletionRegister:
    if request.param == "memory":
        return InMemoryDeletions()
    return PostgresDeletions(request.getfixturevalue("pool"))


@pytest.mark.unit
def test_seq_ranges_and_tombstones() -> None:
    assert seq_ranges([5, 1, 2, 3, 9, 5]) == ((1, 3), (5, 5), (9, 9))
    known = Tombstones([Tombstone("dev", "a", "t", 10)])
    assert known.deleted("dev", "a", "t", 10) and not known.deleted("dev", "a", "t", 11)
    assert not known.deleted("dev", "b", "t", 1)
    assert known.add(Tombstone("dev", "a", "t", 5)) is False
    assert known.add(Tombstone("dev", "a", "t", 20)) is True and known.deleted("dev", "a", "t", 15)


async def test_open_returns_the_incomplete_deletion_until_it_completes(register: DeletionRegister) -> None:
    first = await register.open("dev", "acme", "t1", "bot", None)
    assert (first.up_to_seq, first.seqs, dict(first.report), first.completed_at) == (None, None, {}, None)
    assert (await register.open("dev", "acme", "t1", "bot", None)).deletion_id == first.deletion_id
    other = await register.open("dev", "other", "t1", "bot", None)
    assert other.deletion_id != first.deletion_id
    done = await register.complete(first.deletion_id)
    assert done.completed_at is not None
    assert (await register.complete(first.deletion_id)).completed_at == done.completed_at
    again = await register.open("dev", "acme", "t1", "bot", "u1")
    assert again.deletion_id not in (first.deletion_id, other.deletion_id)
    assert (await register.latest("dev", "acme", "t1")) == again
    assert await register.latest("dev", "acme", "t2") is None
    assert [r.deletion_id for r in await register.incomplete()] == [other.deletion_id, again.deletion_id]


async def test_the_journal_outcome_is_kept_once_set(register: DeletionRegister) -> None:
    record = await register.open("dev", "acme", "t1", "bot", None)
    assert await register.tombstones() == []
    stored = await register.record_journal(record.deletion_id, JournalDeletion(3, 7, ((1, 2), (7, 7))))
    assert (stored.up_to_seq, stored.seqs) == (7, ((1, 2), (7, 7)))
    assert stored.report["journal"] == {"messages": 3, "up_to_seq": 7}
    rerun = await register.record_journal(record.deletion_id, JournalDeletion(0, 0, ()))
    assert (rerun.up_to_seq, rerun.report["journal"]["messages"]) == (7, 3)
    stepped = await register.record_step(record.deletion_id, "event", {"published": True})
    assert stepped.report == {"journal": {"messages": 3, "up_to_seq": 7}, "event": {"published": True}}
    assert await register.tombstones() == [Tombstone("dev", "acme", "t1", 7)]
    assert await register.deleted_seqs() == {("dev", "acme", "t1"): ((1, 2), (7, 7))}
    assert (await register.get(record.deletion_id)) == stepped
    # another run of the step that deleted more (two DELETEs racing an append): both count
    raced = await register.record_journal(record.deletion_id, JournalDeletion(2, 9, ((8, 9),)))
    assert (raced.up_to_seq, raced.seqs, raced.report["journal"]) == (
        9,
        ((1, 2), (7, 9)),
        {"messages": 5, "up_to_seq": 9},
    )
