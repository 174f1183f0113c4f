"""MemoryService reads against real Postgres: tenancy, private isolation, expiry, search, pinning."""

from __future__ import annotations

import uuid
from datetime import timedelta

import asyncpg
import pytest

from core.errors import InvalidInput, NotFound
from core.memory.reads import EntryPage
from core.memory.service import MemoryService

from .helpers import FakeClock, outbox, scope


async def _seed(service: MemoryService) -> dict[str, str]:
    """Entries of two accounts and two users; returns name -> entry_id."""
    ids: dict[str, str] = {}
    cases = [
        ("shared", scope("alice"), "shared"),
        ("alice", scope("alice"), "private"),
        ("bob", scope("bob"), "private"),
        ("other_agent", scope("alice", agent="bot2"), "shared"),
        ("other_account", scope("alice", account="globex"), "shared"),
        ("other_env", scope("alice", env="prod"), "shared"),
    ]
    for name, sc, vis in cases:
        result = await service.store(
            sc, f"k.{name}", f"fact about {name}", "project_fact", scope_visibility=vis
        )
        ids[name] = result.entry.entry_id
    return ids


async def test_get_respects_tenancy_and_private_visibility(service: MemoryService) -> None:
    ids = await _seed(service)
    assert (await service.get(scope("alice"), ids["alice"])).content == "fact about alice"
    assert (await service.get(scope("bob"), ids["shared"])).visibility == "shared"
    for sc, name in [
        (scope("bob"), "alice"),
        (scope(None), "alice"),
        (scope("alice"), "other_agent"),
        (scope("alice"), "other_account"),
        (scope("alice"), "other_env"),
    ]:
        with pytest.raises(NotFound):
            await service.get(sc, ids[name])
    with pytest.raises(InvalidInput):
        await service.get(scope(), "not-a-uuid")


async def test_list_shows_only_visible_entries(service: MemoryService) -> None:
    await _seed(service)

    def keys(page: EntryPage) -> list[str]:
        return sorted(e.key for e in page.entries)

    assert keys(await service.list(scope("alice"))) == ["k.alice", "k.shared"]
    assert keys(await service.list(scope("bob"))) == ["k.bob", "k.shared"]
    assert keys(await service.list(scope(None))) == ["k.shared"]
    assert keys(await service.list(scope("alice"), visibility="private")) == ["k.alice"]
    assert keys(await service.list(scope("alice", account="globex"))) == ["k.other_account"]


async def test_list_filters_and_pages(service: MemoryService, clock: FakeClock) -> None:
    for i in range(7):
        clock.advance(seconds=1)
        category = "user_profile" if i % 2 else "project_fact"
        await service.store(scope(), f"proj.{i}", f"fact {i}", category, scope_visibility="shared")
    await service.store(scope(), "other", "x", "project_fact", scope_visibility="shared")
    seen: list[str] = []
    cursor = None
    while True:
        page = await service.list(scope(), key_prefix="proj.", limit=3, cursor=cursor)
        seen += [e.key for e in page.entries]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == [f"proj.{i}" for i in reversed(range(7))]  # newest first, no gaps or repeats
    profile = await service.list(scope(), category="user_profile")
    assert sorted(e.key for e in profile.entries) == ["proj.1", "proj.3", "proj.5"]
    with pytest.raises(InvalidInput):
        await service.list(scope(), cursor="garbage!")
    with pytest.raises(InvalidInput):
        await service.list(scope(), limit=0)


async def test_expired_entries_are_hidden_unless_asked(service: MemoryService, clock: FakeClock) -> None:
    obs = await service.store(scope(), "o", "transient", "observation", scope_visibility="shared")
    clock.advance(days=30)
    assert (await service.list(scope())).entries == []
    assert len((await service.list(scope(), include_expired=True)).entries) == 1
    with pytest.raises(NotFound):
        await service.get(scope(), obs.entry.entry_id)
    assert (await service.get(scope(), obs.entry.entry_id, include_expired=True)).key == "o"
    assert await service.by_ids(scope(), [obs.entry.entry_id]) == []


async def test_by_ids_keeps_input_order_and_reapplies_visibility(service: MemoryService) -> None:
    ids = await _seed(service)
    order = [
        ids["alice"],
        ids["bob"],
        str(uuid.uuid4()),
        "junk",
        ids["shared"],
        ids["alice"],
        ids["other_account"],
    ]
    found = await service.by_ids(scope("alice"), order)
    assert [e.entry_id for e in found] == [ids["alice"], ids["shared"]]
    only_shared = await service.by_ids(scope("alice"), order, key_prefix="k.sh")
    assert [e.entry_id for e in only_shared] == [ids["shared"]]
    assert await service.by_ids(scope("alice"), order, category="user_profile") == []


async def test_keyword_search_ranks_and_scopes(service: MemoryService) -> None:
    await service.store(
        scope(), "lang", "The user prefers answers in French", "user_profile", scope_visibility="private"
    )
    await service.store(
        scope(), "db", "The project database is PostgreSQL 18", "project_fact", scope_visibility="shared"
    )
    await service.store(
        scope(),
        "db2",
        "Database backups run nightly; PostgreSQL dumps",
        "project_fact",
        scope_visibility="shared",
    )
    await service.store(
        scope("bob"), "secret", "Bob's PostgreSQL password policy", "project_fact", scope_visibility="private"
    )
    hits = await service.keyword_search(scope(), "which postgresql database do we use?")
    assert [h.entry.key for h in hits][:2] in (["db", "db2"], ["db2", "db"])
    assert all(h.entry.key != "secret" for h in hits)  # bob's private entry never appears
    assert all(h.score > 0 for h in hits)
    assert [h.entry.key for h in await service.keyword_search(scope(), "prefer french")] == ["lang"]
    assert await service.keyword_search(scope("bob"), "french") == []
    assert await service.keyword_search(scope(), "the and of") == []  # stop words only
    assert [
        h.entry.key for h in await service.keyword_search(scope(), "database", category="user_profile")
    ] == []
    assert [h.entry.key for h in await service.keyword_search(scope(), "database", key_prefix="db2")] == [
        "db2"
    ]
    # operator characters are plain text (bound parameter, plainto_tsquery): no syntax errors
    assert await service.keyword_search(scope(), "'); DROP TABLE memory_entries; -- !&|:*") == []
    assert len(await service.keyword_search(scope(), "database", limit=1)) == 1


async def test_record_recall_counts_visible_entries_without_publishing(
    service: MemoryService, pool: asyncpg.Pool, clock: FakeClock
) -> None:
    ids = await _seed(service)
    before = await outbox(pool)
    at = clock.advance(hours=1)
    counted = await service.record_recall(
        scope("alice"), [ids["shared"], ids["alice"], ids["bob"], "junk"], at=at
    )
    assert counted == 2
    await service.record_recall(scope("alice"), [ids["shared"]], at=at - timedelta(minutes=5))
    shared = await service.get(scope("alice"), ids["shared"])
    assert (shared.recall_count, shared.last_recalled_at) == (2, at)  # never moved backwards
    assert (await service.get(scope("bob"), ids["bob"])).recall_count == 0
    assert await outbox(pool) == before


async def test_pinned_candidates_order_cap_and_visibility(service: MemoryService, clock: FakeClock) -> None:
    for i in range(12):
        clock.advance(seconds=1)
        await service.store(
            scope(),
            f"p{i}",
            f"pref {i}",
            "user_profile",
            scope_visibility="shared",
            importance=0.7 + (i % 3) * 0.1,
        )
    await service.store(scope(), "low", "low", "user_profile", scope_visibility="shared", importance=0.69)
    await service.store(scope(), "fact", "fact", "project_fact", scope_visibility="shared", importance=1.0)
    await service.store(
        scope("bob"), "bobs", "bob", "user_profile", scope_visibility="private", importance=1.0
    )
    pinned = await service.pinned_candidates(scope())
    assert len(pinned) == 10
    assert [e.key for e in pinned] == ["p11", "p8", "p5", "p2", "p10", "p7", "p4", "p1", "p9", "p6"]
    assert "bobs" in [e.key for e in await service.pinned_candidates(scope("bob"))]
    assert len(await service.pinned_candidates(scope(), limit=3)) == 3
