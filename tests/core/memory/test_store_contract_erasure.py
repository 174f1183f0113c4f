"""Agent memory's store contract for a user erasure (`MemoryWrites.erase_user`, `MemoryStore.user_rows`),
on the in-memory fake and Postgres, with quarantined rows: the user's private entries (every agent)
and quarantine rows go, the entries they wrote for others stay without an author, and nothing of
another user, account or environment changes."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from core.memory.quarantine import QuarantineRecord
from core.memory.store import Scope, StoredEntry, UserRows

from .entries import T0
from .quarantined import SUBJECTS, Subject, entry, make_subject


@pytest.fixture(params=SUBJECTS)
def subject(request: pytest.FixtureRequest) -> Subject:
    return make_subject(request)


def private(user: str, **fields: object) -> dict[str, object]:
    return {"visibility": "private", "user_id": user, "author_user_id": user, **fields}


async def quarantine(subject: Subject, stored: StoredEntry) -> None:
    e = stored.entry
    async with subject.quarantine.writing(e.environment, e.account_id, e.agent_id) as tx:
        await tx.quarantine(QuarantineRecord(stored, "screening_rejected", "r", "content", "d", T0))
        await tx.publish([e])


async def test_erase_user_takes_the_users_rows_and_unlinks_what_they_wrote(subject: Subject) -> None:
    ada = entry(**private("ada"))
    ada_other_agent = entry(**private("ada", agent_id="bot-2"))
    ada_old = entry(**private("ada", created_at=T0 - timedelta(days=30)))
    ada_shared = entry(author_user_id="ada")
    for_bob = entry(visibility="private", user_id="bob", author_user_id="ada")  # made private to bob
    bob = entry(**private("bob"))
    bob_shared = entry(author_user_id="bob")
    ada_elsewhere = entry(**private("ada", account_id="globex"))
    ada_prod = entry(**private("ada", environment="prod"))
    quarantined_ada, quarantined_by_ada, quarantined_bob = (
        entry(**private("ada")),
        entry(author_user_id="ada"),
        entry(**private("bob")),
    )
    stored = await subject.insert(
        ada,
        ada_other_agent,
        ada_old,
        ada_shared,
        for_bob,
        bob,
        bob_shared,
        ada_elsewhere,
        ada_prod,
        quarantined_ada,
        quarantined_by_ada,
        quarantined_bob,
    )
    for s in stored[-3:]:
        await quarantine(subject, s)
    rows = subject.memory.user_rows
    assert await rows("test", "acme", "ada") == UserRows(private=3, authored=2, quarantined=2)
    assert await rows("test", "acme", "ada", created_before=T0) == UserRows(1, 0, 0)
    assert await rows("test", "acme", "bob") == UserRows(private=2, authored=1, quarantined=1)
    before = len(await subject.published())

    async with subject.memory.transaction() as tx:
        erased = await tx.erase_user("test", "acme", "ada")
    assert sorted(e.entry_id for e in erased.deleted) == sorted(
        e.entry_id for e in (ada, ada_other_agent, ada_old)
    )
    assert sorted(s.entry.entry_id for s in erased.unlinked) == sorted(
        [ada_shared.entry_id, for_bob.entry_id]
    )
    assert all(s.entry.author_user_id is None and s.version == 2 for s in erased.unlinked)
    assert (erased.quarantine_deleted, erased.quarantine_unlinked) == (1, 1)
    assert len(await subject.published()) == before  # the caller publishes

    assert await rows("test", "acme", "ada") == UserRows(0, 0, 0)
    assert await rows("test", "acme", "bob") == UserRows(private=2, authored=1, quarantined=1)
    assert await rows("test", "globex", "ada") == UserRows(1, 0, 0)
    assert await rows("prod", "acme", "ada") == UserRows(1, 0, 0)
    for kept in (ada_shared, for_bob):  # content kept, author gone
        uid = uuid.UUID(kept.entry_id)
        again = await subject.memory.get(
            Scope("test", "acme", "bot", kept.user_id), uid, now=T0, include_expired=True
        )
        assert again is not None and again.entry.content == kept.content
        assert again.entry.author_user_id is None
    open_records = await subject.quarantine.open_records("test", "acme", after=None, limit=10)
    assert sorted(r.stored.entry.entry_id for r in open_records) == sorted(
        [quarantined_by_ada.entry_id, quarantined_bob.entry_id]
    )
    assert {r.stored.entry.entry_id: r.stored.entry.author_user_id for r in open_records} == {
        quarantined_by_ada.entry_id: None,
        quarantined_bob.entry_id: "bob",
    }
    async with subject.memory.transaction() as tx:  # again: nothing left to do
        twice = await tx.erase_user("test", "acme", "ada")
    assert (twice.deleted, twice.unlinked, twice.quarantine_deleted, twice.quarantine_unlinked) == (
        [],
        [],
        0,
        0,
    )


async def test_a_failed_block_erases_nothing(subject: Subject) -> None:
    (ada,) = await subject.insert(entry(**private("ada")))
    with pytest.raises(RuntimeError):
        async with subject.memory.transaction() as tx:
            await tx.erase_user("test", "acme", "ada")
            raise RuntimeError("boom")
    assert await subject.memory.user_rows("test", "acme", "ada") == UserRows(1, 0, 0)
    uid = uuid.UUID(ada.entry.entry_id)
    assert (
        await subject.memory.get(Scope("test", "acme", "bot", "ada"), uid, now=T0, include_expired=True)
        == ada
    )
