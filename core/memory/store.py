"""Where agent memory's entries are kept (`MemoryStore`), and the statements of one write
transaction (`MemoryWrites`). The adapter is `sinks.postgres.memory.PostgresMemoryStore`; the rules
(screening, capacity, same-key, visibility choice) live in `core.memory.service.MemoryService`.
This interface speaks in `core.memory.models` types and the memory services program against it, so
it lives in `core.memory` (in `core.stores` it would make `core.stores` and `core.memory` import
each other, which the `no-cycles` contract forbids).

Contract:
- Every read names a `Scope` and answers only what it may see: `shared` entries of the scope's
  agent, plus `private` ones whose `user_id` is the scope's (a scope without a user sees shared
  only). Expired entries (`expires_at <= now`) are left out unless `include_expired`.
- `by_ids`, `keyword_search` never answer a shared `user_profile` entry (a profile fact is private
  to its user; old shared ones stay listable for operators).
- Writes happen inside `writing(...)`, one transaction holding the agent's write lock (capacity
  counts and same-key checks are not raced by writers of the same agent), or `transaction()`
  without it (hygiene passes: they lock the rows they change). The block commits when it exits
  normally and rolls back otherwise. `MemoryWrites.publish` adds the `memory.entries` outbox record
  of a change in that same transaction: the change and its record commit or roll back together.
  Rows are locked before they change and every change bumps the entry's `version`.
- Storage errors are the adapter's and propagate.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from core.memory.models import EntryEvent, MemoryEntry


@dataclass(frozen=True)
class StoredEntry:
    """An entry as stored, with its change counter (the `version` of its `EntryEvent`)."""

    entry: MemoryEntry
    version: int

    def event(self) -> EntryEvent:
        return EntryEvent(version=self.version, entry=self.entry)


@dataclass(frozen=True)
class UserRows:
    """What agent memory holds of one user of one account: `private` entries (theirs), `authored`
    entries they wrote that are not theirs (shared, or made private to another user), and
    `quarantined` rows naming them as owner or author."""

    private: int
    authored: int
    quarantined: int

    @property
    def total(self) -> int:
        return self.private + self.authored + self.quarantined


@dataclass(frozen=True)
class ErasedUser:
    """What `MemoryWrites.erase_user` changed: the user's private entries `deleted`, the entries
    they wrote `unlinked` (kept, `author_user_id` now None, version bumped), and the quarantine
    rows deleted (theirs) or unlinked (written by them)."""

    deleted: list[MemoryEntry]
    unlinked: list[StoredEntry]
    quarantine_deleted: int
    quarantine_unlinked: int


@dataclass(frozen=True)
class Scope:
    """The entries a caller may see: one agent of one account in one environment, as `user_id`."""

    environment: str
    account_id: str
    agent_id: str
    user_id: str | None


class MemoryWrites(Protocol):
    """Statements of one write transaction (`MemoryStore.writing` / `transaction`)."""

    async def find_by_key(self, scope: Scope, key: str, visibility: str) -> StoredEntry | None:
        """The entry with `key` in one visibility scope (the agent's shared keys, or the private keys
        of `scope.user_id`), locked for update; expired entries included."""
        ...

    async def get_visible(self, scope: Scope, entry_id: uuid.UUID) -> StoredEntry | None:
        """The entry `entry_id` when `scope` may see it, locked for update; expired entries included."""
        ...

    async def counts(
        self, scope: Scope, category: str, author_user_id: str | None, now: datetime
    ) -> tuple[int, int]:
        """(live entries of the agent in `category`, live ones written by `author_user_id` in it)."""
        ...

    async def insert(self, entry: MemoryEntry) -> StoredEntry:
        """Store a new entry at version 1."""
        ...

    async def update(self, entry: MemoryEntry) -> StoredEntry:
        """Write the mutable fields of `entry` (not the recall counters) and bump its version."""
        ...

    async def delete(self, entry_id: str) -> None: ...

    async def publish(self, changes: Sequence[StoredEntry | MemoryEntry]) -> None:
        """Outbox records, in order: an upsert for a `StoredEntry`, a tombstone for a deleted
        `MemoryEntry`."""
        ...

    async def expire_due(self, now: datetime, limit: int) -> list[MemoryEntry]:
        """Delete up to `limit` entries (all tenants) with expires_at <= now; returns them."""
        ...

    async def delete_from_thread(
        self, environment: str, account_id: str, thread_id: str
    ) -> tuple[list[MemoryEntry], int]:
        """Delete every entry of the account (every agent and user) whose provenance is the thread
        (`source.thread_id`), and the quarantined ones (a thread deletion); returns the entries
        deleted and the quarantine rows deleted."""
        ...

    async def erase_user(self, environment: str, account_id: str, user_id: str) -> ErasedUser:
        """Delete every entry private to the user in the account (every agent), then take the user
        off as author of the entries they wrote (`author_user_id` set to None, content kept,
        version bumped); the same for the quarantine rows (theirs deleted, the others unlinked).
        The caller publishes the changes."""
        ...

    async def decay(
        self,
        now: datetime,
        *,
        idle: timedelta,
        spacing: timedelta,
        step: float,
        floor: float,
        categories: Sequence[str],
        limit: int,
    ) -> list[StoredEntry]:
        """Lower importance by `step` (not below `floor`) of up to `limit` live entries (all
        tenants) in `categories` not recalled (else not created) within `idle` and not decayed
        within `spacing`; returns them changed."""
        ...


class MemoryStore(Protocol):
    def writing(
        self, environment: str, account_id: str, agent_id: str
    ) -> AbstractAsyncContextManager[MemoryWrites]:
        """One transaction holding the agent's write lock (module contract)."""
        ...

    def transaction(self) -> AbstractAsyncContextManager[MemoryWrites]:
        """One transaction without an agent lock (module contract)."""
        ...

    async def get(
        self, scope: Scope, entry_id: uuid.UUID, *, now: datetime, include_expired: bool
    ) -> StoredEntry | None: ...

    async def list_page(
        self,
        scope: Scope,
        *,
        now: datetime,
        category: str | None,
        key_prefix: str | None,
        visibility: str | None,
        include_expired: bool,
        after: tuple[datetime, uuid.UUID] | None,
        limit: int,
    ) -> list[StoredEntry]:
        """Newest first (created_at, entry_id descending), strictly after the `after` position."""
        ...

    async def by_ids(
        self,
        scope: Scope,
        ids: Sequence[uuid.UUID],
        *,
        now: datetime,
        category: str | None,
        key_prefix: str | None,
        include_expired: bool,
    ) -> dict[uuid.UUID, StoredEntry]:
        """The visible, recallable entries among `ids` matching the filters, by id."""
        ...

    async def keyword_search(
        self,
        scope: Scope,
        query: str,
        *,
        now: datetime,
        category: str | None,
        key_prefix: str | None,
        limit: int,
    ) -> list[tuple[StoredEntry, float]]:
        """Full-text matches of ANY of the query's terms (the query is plain text, no operator
        syntax), with their rank, best first; at most `limit`."""
        ...

    async def pinned(
        self, scope: Scope, *, now: datetime, min_importance: float, limit: int
    ) -> list[StoredEntry]:
        """Live user_profile entries private to `scope.user_id` (never shared ones) with importance
        >= min_importance, by importance then recency; exact ties by entry_id descending, as
        `core.memory.pinned.select_pinned`."""
        ...

    async def user_rows(
        self, environment: str, account_id: str, user_id: str, *, created_before: datetime | None = None
    ) -> UserRows:
        """What the account holds of the user (`UserRows`), counting only entries created before
        `created_before` when given (expired entries included)."""
        ...

    async def record_recall(self, scope: Scope, ids: Sequence[uuid.UUID], at: datetime) -> int:
        """recall_count + 1, last_recalled_at = at (never moved back) on the visible entries among
        `ids`; returns how many were counted."""
        ...
