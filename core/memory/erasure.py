"""The deletions agent memory makes for a thread deletion and a user erasure (`MemoryErasure`, a
base of `core.memory.service.MemoryService`), and the change listeners every write calls.

- `forget_thread`: the entries whose provenance is a deleted thread (`source.thread_id`: what the
  flush extracted from it), any visibility, and their quarantine rows.
- `erase_user`: every entry private to the user in the account (every agent) and their quarantine
  rows are deleted; the entries they wrote that are not theirs (shared ones, or ones made private
  to another user) keep their content and lose the author (`author_user_id` None: the per-user
  capacity count no longer counts them).
- `user_rows`: what the account still holds of a user (an erasure's 404 and `memstream verify`).

Each runs in one transaction with the `memory.entries` outbox records of its changes (a tombstone
for a deleted entry, so the index drops it; an upsert for an unlinked one, so the topic's copy
loses the author too); the pinned-fact caches of every node are evicted by NOTIFY (the
entries' trigger) and this process's at once by the listeners.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from core.ids import require_id
from core.memory.clock import Clock, utc_now
from core.memory.models import MemoryEntry
from core.memory.reads import MemoryReads
from core.memory.store import MemoryStore, UserRows


@dataclass(frozen=True)
class UserMemoryErased:
    """What `erase_user` did, in counts (the erasure's report)."""

    private_entries: int
    unlinked_entries: int
    quarantine_deleted: int
    quarantine_unlinked: int


class MemoryErasure(MemoryReads):
    """See the module doc. Callbacks given to `listen` are called after each committed write with
    the entries it changed (e.g. to evict this process's caches at once; other processes learn of
    it from the store)."""

    def __init__(self, store: MemoryStore, clock: Clock = utc_now) -> None:
        super().__init__(store, clock)
        self._listeners: list[Callable[[Sequence[MemoryEntry]], None]] = []

    def listen(self, on_change: Callable[[Sequence[MemoryEntry]], None]) -> None:
        """Call `on_change(entries)` after every committed write from now on."""
        self._listeners.append(on_change)

    def _changed(self, entries: Sequence[MemoryEntry]) -> None:
        if entries:
            for on_change in self._listeners:
                on_change(entries)

    async def forget_thread(self, environment: str, account_id: str, thread_id: str) -> tuple[int, int]:
        """Delete every entry of the account whose provenance is the thread, and its quarantined
        ones (module doc); returns (entries, quarantine rows)."""
        async with self._store.transaction() as tx:
            gone, quarantined = await tx.delete_from_thread(environment, account_id, thread_id)
            await tx.publish(gone)
        self._changed(gone)
        return len(gone), quarantined

    async def erase_user(self, environment: str, account_id: str, user_id: str) -> UserMemoryErased:
        """Erase the user from the account's memory (module doc). InvalidInput on a bad user id."""
        require_id(user_id, "user_id")
        async with self._store.transaction() as tx:
            erased = await tx.erase_user(environment, account_id, user_id)
            await tx.publish([*erased.deleted, *erased.unlinked])
        self._changed([*erased.deleted, *(stored.entry for stored in erased.unlinked)])
        return UserMemoryErased(
            private_entries=len(erased.deleted),
            unlinked_entries=len(erased.unlinked),
            quarantine_deleted=erased.quarantine_deleted,
            quarantine_unlinked=erased.quarantine_unlinked,
        )

    async def user_rows(
        self, environment: str, account_id: str, user_id: str, *, created_before: datetime | None = None
    ) -> UserRows:
        """What the account's memory holds of the user (`core.memory.store.UserRows`), only what was
        created before `created_before` when given."""
        require_id(user_id, "user_id")
        return await self._store.user_rows(environment, account_id, user_id, created_before=created_before)
