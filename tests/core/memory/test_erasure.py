"""`core.memory.erasure` through `MemoryService` on the in-memory store: a user erasure publishes a
tombstone per deleted entry and an upsert (author gone) per unlinked one in its transaction, tells
the listeners, reports counts, and refuses a bad user id before anything is written."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from core.errors import InvalidInput
from core.memory.erasure import UserMemoryErased
from core.memory.models import MemoryEntry, entry_key
from core.memory.service import MemoryService
from core.memory.store import UserRows
from tests.fakes.memory import InMemoryMemoryStore

from .helpers import FakeClock, scope

pytestmark = pytest.mark.unit


async def test_erase_user_publishes_its_changes_and_tells_the_listeners() -> None:
    store = InMemoryMemoryStore()
    service = MemoryService(store, FakeClock())
    heard: list[str] = []

    def listener(entries: Sequence[MemoryEntry]) -> None:
        heard.extend(e.entry_id for e in entries)

    service.listen(listener)
    ada = scope("ada")
    mine = await service.store(ada, "user.diet", "Vegetarian.", "user_profile", scope_visibility="private")
    shared = await service.store(ada, "deploy.day", "Tuesdays.", "project_fact", scope_visibility="shared")
    bobs = await service.store(
        scope("bob"), "user.seat", "Aisle.", "user_profile", scope_visibility="private"
    )
    elsewhere = await service.store(
        scope("ada", account="globex"), "user.diet", "Vegan.", "user_profile", scope_visibility="private"
    )
    assert await service.user_rows("test", "acme", "ada") == UserRows(private=1, authored=1, quarantined=0)
    heard.clear()
    published = len(store.outbox)

    erased = await service.erase_user("test", "acme", "ada")

    assert erased == UserMemoryErased(
        private_entries=1, unlinked_entries=1, quarantine_deleted=0, quarantine_unlinked=0
    )
    records = dict(store.outbox[published:])
    assert records[entry_key("test", "acme", mine.entry.entry_id)] is None  # tombstone: the index drops it
    upsert = records[entry_key("test", "acme", shared.entry.entry_id)]
    assert upsert is not None and upsert["version"] == 2 and upsert["entry"]["author_user_id"] is None
    assert len(records) == 2
    assert sorted(heard) == sorted([mine.entry.entry_id, shared.entry.entry_id])
    assert await service.user_rows("test", "acme", "ada") == UserRows(0, 0, 0)
    kept = await service.get(scope("bob"), shared.entry.entry_id)
    assert (kept.content, kept.author_user_id) == ("Tuesdays.", None)
    assert (await service.get(scope("bob"), bobs.entry.entry_id)).user_id == "bob"
    assert (await service.get(scope("ada", account="globex"), elsewhere.entry.entry_id)).user_id == "ada"
    again = await service.erase_user("test", "acme", "ada")
    assert again == UserMemoryErased(0, 0, 0, 0) and len(store.outbox) == published + 2


@pytest.mark.parametrize("user_id", ["", "a/b", "x" * 200, "ada\n"])
async def test_a_bad_user_id_is_refused(user_id: str) -> None:
    service = MemoryService(InMemoryMemoryStore(), FakeClock())
    with pytest.raises(InvalidInput) as refused:
        await service.erase_user("test", "acme", user_id)
    assert refused.value.field == "user_id"
    with pytest.raises(InvalidInput):
        await service.user_rows("test", "acme", user_id)
