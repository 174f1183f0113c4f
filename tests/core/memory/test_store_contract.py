"""Agent memory's store contract (`core.memory.store`: `MemoryStore` and its `MemoryWrites`), on
every store: the in-memory fake and Postgres. Visibility, liveness and recallability of reads,
orders and paging, pinning, recall counters, write blocks that commit or roll back with their
outbox records, one writer per agent, expiry and decay. The rules on top (screening, capacity,
same-key) are `MemoryService`'s (`test_service_*.py`); what only Postgres does (constraints, the
generated search column, NOTIFY) is in `tests/sinks/postgres/test_memory.py`."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest

from core.memory.models import EntryEvent, MemoryEntry, Provenance, entry_key
from core.memory.store import MemoryStore, MemoryWrites, Scope, StoredEntry
from sinks.postgres.memory import PostgresMemoryStore
from tests.fakes.memory import InMemoryMemoryStore

from .entries import T0, make_entry, minutes
from .helpers import outbox

ALICE = Scope("test", "acme", "bot", "alice")
BOB = Scope("test", "acme", "bot", "bob")
NOBODY = Scope("test", "acme", "bot", None)

Published = list[tuple[str, dict[str, Any] | None]]


@dataclass
class Subject:
    store: MemoryStore
    published: Callable[[], Awaitable[Published]]
    """The outbox records committed so far, in order."""


@pytest.fixture(params=["memory", pytest.param("postgres", marks=pytest.mark.engine)])
def subject(request: pytest.FixtureRequest) -> Subject:
    """The store under test, empty, and its outbox."""
    if request.param == "memory":
        fake = InMemoryMemoryStore()

        async def in_memory() -> Published:
            return list(fake.outbox)

        return Subject(fake, in_memory)
    pool = request.getfixturevalue("pool")

    async def in_postgres() -> Published:
        return [(row["record_key"], row["value"]) for row in await outbox(pool)]

    return Subject(PostgresMemoryStore(pool), in_postgres)


def entry(**fields: Any) -> MemoryEntry:
    """A shared project fact of test/acme/bot unless told otherwise, with a fresh UUID."""
    values: dict[str, Any] = {"category": "project_fact", "key": f"k.{uuid.uuid4().hex[:8]}"}
    values.update(fields)
    return make_entry(str(uuid.uuid4()), **values)


async def insert(store: MemoryStore, *entries: MemoryEntry) -> list[StoredEntry]:
    async with store.transaction() as tx:
        return [await tx.insert(e) for e in entries]


def ids(entries: list[StoredEntry]) -> list[str]:
    return [s.entry.entry_id for s in entries]


async def listed(
    store: MemoryStore,
    scope: Scope,
    *,
    now: datetime = T0,
    category: str | None = None,
    key_prefix: str | None = None,
    visibility: str | None = None,
    include_expired: bool = False,
    after: tuple[datetime, uuid.UUID] | None = None,
    limit: int = 10,
) -> list[StoredEntry]:
    """`list_page`, with no filter unless given."""
    return await store.list_page(
        scope,
        now=now,
        category=category,
        key_prefix=key_prefix,
        visibility=visibility,
        include_expired=include_expired,
        after=after,
        limit=limit,
    )


async def decayed(tx: MemoryWrites, now: datetime, limit: int = 10) -> list[StoredEntry]:
    """The hygiene pass's decay (`MemoryService.decay`'s rule) at `now`."""
    return await tx.decay(
        now,
        idle=timedelta(days=90),
        spacing=timedelta(hours=20),
        step=0.1,
        floor=0.1,
        categories=["project_fact", "observation"],
        limit=limit,
    )


async def test_reads_see_the_agents_shared_entries_and_the_users_private_ones(subject: Subject) -> None:
    store = subject.store
    shared, mine, bobs = await insert(
        store,
        entry(),
        entry(visibility="private", user_id="alice"),
        entry(visibility="private", user_id="bob"),
    )
    await insert(
        store,
        entry(agent_id="other-bot"),
        entry(account_id="globex"),
        entry(environment="prod"),
    )
    assert set(ids(await listed(store, ALICE))) == set(ids([shared, mine]))
    assert set(ids(await listed(store, BOB))) == set(ids([shared, bobs]))
    assert ids(await listed(store, NOBODY)) == ids([shared])
    mine_id = uuid.UUID(mine.entry.entry_id)
    assert await store.get(ALICE, mine_id, now=T0, include_expired=False) == mine
    assert await store.get(BOB, mine_id, now=T0, include_expired=False) is None
    assert await store.get(NOBODY, mine_id, now=T0, include_expired=False) is None
    assert await store.get(ALICE, uuid.uuid4(), now=T0, include_expired=False) is None


async def test_expired_entries_are_left_out_unless_asked_for(subject: Subject) -> None:
    store = subject.store
    (gone,) = await insert(store, entry(expires_at=T0 + minutes(5)))
    gone_id = uuid.UUID(gone.entry.entry_id)
    later = T0 + minutes(5)
    assert await store.get(ALICE, gone_id, now=T0, include_expired=False) == gone
    assert await store.get(ALICE, gone_id, now=later, include_expired=False) is None
    assert await store.get(ALICE, gone_id, now=later, include_expired=True) == gone
    assert await listed(store, ALICE, now=later) == []
    assert ids(await listed(store, ALICE, now=later, include_expired=True)) == ids([gone])
    assert (
        await store.by_ids(ALICE, [gone_id], now=later, category=None, key_prefix=None, include_expired=False)
        == {}
    )


async def test_pages_are_newest_first_filtered_and_strictly_after_the_position(subject: Subject) -> None:
    store = subject.store
    stored = await insert(
        store,
        *(entry(created_at=T0 + minutes(i), key=f"pref.{i}", category="observation") for i in range(4)),
        entry(created_at=T0 + minutes(9), key="other", visibility="private", user_id="alice"),
    )
    both = [e for e in stored if e.entry.created_at == T0 + minutes(1)]
    twin = await insert(store, entry(created_at=T0 + minutes(1), key="pref.twin", category="observation"))
    newest = await listed(store, ALICE)
    assert [s.entry.created_at for s in newest] == sorted((s.entry.created_at for s in newest), reverse=True)
    tied = [s for s in newest if s.entry.created_at == T0 + minutes(1)]
    assert [uuid.UUID(s.entry.entry_id) for s in tied] == sorted(
        (uuid.UUID(s.entry.entry_id) for s in both + twin), reverse=True
    )
    filtered = await listed(
        store, ALICE, category="observation", key_prefix="pref.", visibility="shared", limit=2
    )
    assert ids(filtered) == ids(newest[1:3])
    last = filtered[-1].entry
    rest = await listed(
        store,
        ALICE,
        category="observation",
        key_prefix="pref.",
        visibility="shared",
        after=(last.created_at, uuid.UUID(last.entry_id)),
    )
    assert ids(rest) == ids(newest[3:])
    private = await listed(store, ALICE, key_prefix="", visibility="private")
    assert [s.entry.key for s in private] == ["other"]


async def test_recall_reads_never_answer_a_shared_profile_fact(subject: Subject) -> None:
    store = subject.store
    legacy, private, fact = await insert(
        store,
        entry(category="user_profile", content="Alice likes tea"),
        entry(category="user_profile", visibility="private", user_id="alice", content="Alice likes tea"),
        entry(category="project_fact", content="The repo likes tea", key="repo.tea"),
    )
    wanted = [uuid.UUID(s.entry.entry_id) for s in (legacy, private, fact)]
    found = await store.by_ids(ALICE, wanted, now=T0, category=None, key_prefix=None, include_expired=False)
    assert set(found) == set(wanted[1:]) and found[wanted[1]] == private
    only = await store.by_ids(
        ALICE, wanted, now=T0, category="project_fact", key_prefix="repo.", include_expired=False
    )
    assert set(only) == {wanted[2]}
    hits = await store.keyword_search(ALICE, "tea", now=T0, category=None, key_prefix=None, limit=10)
    assert {s.entry.entry_id for s, _ in hits} == {private.entry.entry_id, fact.entry.entry_id}
    assert len(await listed(store, ALICE)) == 3  # listable still


async def test_keyword_search_matches_any_term_best_first(subject: Subject) -> None:
    store = subject.store
    both, one, stemmed, none, low = await insert(
        store,
        entry(content="Deploys run on Kubernetes clusters", importance=0.5),
        entry(content="Kubernetes is the platform", importance=0.5),
        entry(content="She is running a marathon", importance=0.5),
        entry(content="Nothing to see here", importance=0.9),
        entry(content="Kubernetes again", importance=0.2),
    )
    hits = await store.keyword_search(
        ALICE, "kubernetes deploys", now=T0, category=None, key_prefix=None, limit=10
    )
    assert [s.entry.entry_id for s, _ in hits] == ids([both, one, low])  # 2 terms; then importance
    assert hits[0][1] > hits[1][1] > 0
    limited = await store.keyword_search(ALICE, "kubernetes", now=T0, category=None, key_prefix=None, limit=1)
    tied = min(ids([both, one]), key=uuid.UUID)  # same rank and importance, same update: by entry id
    assert [s.entry.entry_id for s, _ in limited] == [tied]
    runs = await store.keyword_search(ALICE, "runs", now=T0, category=None, key_prefix=None, limit=10)
    assert {s.entry.entry_id for s, _ in runs} == {both.entry.entry_id, stemmed.entry.entry_id}
    for query in ("", "the and of", "kubernetes & !deploys | (x"):  # plain text, never operators
        found = await store.keyword_search(ALICE, query, now=T0, category=None, key_prefix=None, limit=10)
        assert none.entry.entry_id not in {s.entry.entry_id for s, _ in found}
    keyed = await insert(store, entry(key="tools.kubectl_version", content="1.31"))
    by_key = await store.keyword_search(ALICE, "kubectl", now=T0, category=None, key_prefix=None, limit=10)
    assert [s.entry.entry_id for s, _ in by_key] == ids(keyed)


async def test_pinned_is_the_users_private_profile_by_importance_then_recency(subject: Subject) -> None:
    store = subject.store
    top, recent, older, _low, _shared, _bobs = await insert(
        store,
        entry(category="user_profile", visibility="private", user_id="alice", importance=0.9),
        entry(
            category="user_profile",
            visibility="private",
            user_id="alice",
            importance=0.7,
            updated_at=T0 + minutes(2),
        ),
        entry(category="user_profile", visibility="private", user_id="alice", importance=0.7),
        entry(category="user_profile", visibility="private", user_id="alice", importance=0.3),
        entry(category="user_profile", importance=0.95),
        entry(category="user_profile", visibility="private", user_id="bob", importance=0.95),
    )
    pinned = await store.pinned(ALICE, now=T0, min_importance=0.5, limit=10)
    assert ids(pinned) == ids([top, recent, older])
    assert ids(await store.pinned(ALICE, now=T0, min_importance=0.5, limit=2)) == ids([top, recent])
    assert await store.pinned(NOBODY, now=T0, min_importance=0.0, limit=10) == []


async def test_record_recall_counts_visible_entries_and_never_moves_back(subject: Subject) -> None:
    store = subject.store
    shared, bobs = await insert(store, entry(), entry(visibility="private", user_id="bob"))
    wanted = [uuid.UUID(shared.entry.entry_id), uuid.UUID(bobs.entry.entry_id), uuid.uuid4()]
    assert await store.record_recall(ALICE, wanted, T0 + minutes(10)) == 1
    assert await store.record_recall(ALICE, wanted, T0 + minutes(5)) == 1  # an older recall
    after = await store.get(ALICE, wanted[0], now=T0, include_expired=False)
    assert after is not None and after.version == 1  # not a change: same version
    assert (after.entry.recall_count, after.entry.last_recalled_at) == (2, T0 + minutes(10))
    untouched = await store.get(BOB, wanted[1], now=T0, include_expired=False)
    assert untouched is not None and untouched.entry.recall_count == 0
    assert await subject.published() == []


async def test_a_write_block_commits_with_its_outbox_records_or_not_at_all(subject: Subject) -> None:
    store = subject.store
    new = entry(key="pref.lang", visibility="private", user_id="alice", content="French")
    async with store.writing("test", "acme", "bot") as tx:
        stored = await tx.insert(new)
        assert stored == StoredEntry(entry=new, version=1)
        await tx.publish([stored])
    assert await subject.published() == [
        (entry_key("test", "acme", new.entry_id), EntryEvent(version=1, entry=new).model_dump(mode="json"))
    ]
    entry_id = uuid.UUID(new.entry_id)
    with pytest.raises(RuntimeError, match="boom"):
        async with store.writing("test", "acme", "bot") as tx:
            found = await tx.find_by_key(ALICE, "pref.lang", "private")
            assert found == stored
            changed = await tx.update(
                new.model_copy(update={"content": "German", "updated_at": T0 + minutes(1)})
            )
            assert changed.version == 2 and changed.entry.content == "German"
            await tx.publish([changed])
            raise RuntimeError("boom")
    assert await store.get(ALICE, entry_id, now=T0, include_expired=False) == stored
    assert len(await subject.published()) == 1

    async with store.transaction() as tx:
        current = await tx.get_visible(ALICE, entry_id)
        assert current == stored and await tx.get_visible(BOB, entry_id) is None
        changed = await tx.update(
            new.model_copy(update={"content": "German", "recall_count": 99, "updated_at": T0 + minutes(1)})
        )
        await tx.delete(new.entry_id)
        await tx.publish([changed, new])
    assert changed.version == 2 and changed.entry.recall_count == 0  # the counters are not written
    assert await store.get(ALICE, entry_id, now=T0, include_expired=True) is None
    records = await subject.published()
    assert [value is None for _, value in records] == [False, False, True]
    assert records[1][1] == EntryEvent(version=2, entry=changed.entry).model_dump(mode="json")


async def test_keys_are_found_per_visibility_scope_and_counted_live(subject: Subject) -> None:
    store = subject.store
    await insert(
        store,
        entry(key="k", author_user_id="alice"),
        entry(key="k", visibility="private", user_id="alice", author_user_id="alice"),
        entry(key="k", visibility="private", user_id="bob", author_user_id="bob"),
        entry(key="old", author_user_id="alice", expires_at=T0),
        entry(key="k2", category="observation", author_user_id="alice"),
    )
    async with store.writing("test", "acme", "bot") as tx:
        shared = await tx.find_by_key(ALICE, "k", "shared")
        mine = await tx.find_by_key(ALICE, "k", "private")
        assert (
            shared is not None
            and shared.entry.visibility == "shared"
            and shared.entry.category == "project_fact"
        )
        assert mine is not None and mine.entry.user_id == "alice"
        assert await tx.find_by_key(Scope("test", "acme", "bot", "carol"), "k", "private") is None
        assert await tx.find_by_key(ALICE, "old", "shared") is not None  # expired ones included
        assert await tx.counts(ALICE, "project_fact", "alice", T0) == (3, 2)
        assert await tx.counts(ALICE, "project_fact", None, T0) == (3, 0)
        assert await tx.counts(ALICE, "observation", "bob", T0) == (1, 0)


async def test_one_writer_per_agent_at_a_time(subject: Subject) -> None:
    store = subject.store
    order: list[str] = []
    inside = asyncio.Event()

    async def first() -> None:
        async with store.writing("test", "acme", "bot") as tx:
            inside.set()
            await tx.counts(ALICE, "project_fact", None, T0)
            await asyncio.sleep(0.1)
            order.append("first done")

    async def second() -> None:
        await inside.wait()
        async with store.writing("test", "acme", "bot"):
            order.append("second in")

    await asyncio.gather(first(), second())
    assert order == ["first done", "second in"]


async def test_hygiene_expires_due_entries_and_decays_idle_ones(subject: Subject) -> None:
    store = subject.store
    now = T0 + timedelta(days=100)
    due, later, idle, recalled, profile, floor = await insert(
        store,
        entry(category="observation", expires_at=now - minutes(1)),
        entry(category="observation", expires_at=now + timedelta(days=2), importance=0.5),
        entry(importance=0.5),
        entry(importance=0.5, last_recalled_at=now - timedelta(days=1)),
        entry(category="user_profile", visibility="private", user_id="alice", importance=0.5),
        entry(importance=0.1),
    )
    async with store.transaction() as tx:
        assert await tx.expire_due(now, 10) == [due.entry]
        assert await tx.expire_due(now, 10) == []
    async with store.transaction() as tx:
        changed = await decayed(tx, now)
    assert sorted(ids(changed)) == sorted(ids([later, idle]))
    assert {(s.entry.importance, s.version, s.entry.updated_at) for s in changed} == {(0.4, 2, now)}
    async with store.transaction() as tx:
        assert await decayed(tx, now + timedelta(hours=1)) == []
        again = await decayed(tx, now + timedelta(days=1), limit=1)
    first = min(ids([later, idle]), key=uuid.UUID)
    assert ids(again) == [first] and again[0].entry.importance == 0.3
    for stored in (recalled, profile, floor):  # recalled lately, never decayed, at the floor
        current = await store.get(ALICE, uuid.UUID(stored.entry.entry_id), now=now, include_expired=False)
        assert current == stored


async def test_delete_from_thread_takes_the_entries_of_that_thread_only(subject: Subject) -> None:
    mine = entry(
        source=Provenance(thread_id="t1", message_ids=("m1",)), user_id="alice", visibility="private"
    )
    shared = entry(source=Provenance(thread_id="t1"))
    other_thread = entry(source=Provenance(thread_id="t10"))
    no_source = entry()
    other_account = entry(source=Provenance(thread_id="t1"), account_id="other")
    await insert(subject.store, mine, shared, other_thread, no_source, other_account)
    async with subject.store.transaction() as tx:
        gone, quarantined = await tx.delete_from_thread("test", "acme", "t1")
    assert sorted(e.entry_id for e in gone) == sorted([mine.entry_id, shared.entry_id])
    assert quarantined == 0
    left = await listed(subject.store, ALICE) + await listed(
        subject.store, Scope("test", "other", "bot", None)
    )
    assert sorted(ids(left)) == sorted([other_thread.entry_id, no_source.entry_id, other_account.entry_id])
