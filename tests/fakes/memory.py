"""`InMemoryMemoryStore`: agent memory's `MemoryStore` and its `MemoryWrites` (`core.memory.store`)
in memory, with the outbox of `sinks.postgres.memory`.

What the contract suite (`tests/core/memory/test_store_contract.py`) asserts of every store holds
here: reads see the scope's agent's shared entries plus the user's private ones, live ones unless
`include_expired`; recall reads never answer a shared `user_profile` entry; the orders, filters,
paging, pinning, recall counters, expiry and decay of the Postgres statements. A write block works
on a copy that replaces the store's state when the block exits normally and is dropped otherwise,
so an entry change and its outbox records commit or roll back together and readers never see a
block's changes before it ends. Blocks run one at a time (one lock for every agent: stronger than
the adapter's per-agent lock). Like the table's unique indexes, a key is stored once per
visibility scope (else ValueError).

Full-text search is approximated: lowercase words of the content and the key (split on `._:/-`),
without English stop words, stemmed by a few suffix rules (`-s`, `-ing`, `-ed`); an entry matches
when it shares a stem with the query and ranks by how many distinct query stems it has (content
counting more than key). The contract asserts membership and clear winners, not scores.

The state is public for tests: `entries` (by entry id), `outbox` (record key and value, in commit
order), `decayed_at`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from core.memory.models import MemoryEntry, entry_key
from core.memory.store import ErasedUser, Scope, StoredEntry, UserRows

STOP_WORDS = frozenset(
    "a an and are as at be but by for from has have he her his i in is it its of on or she that the "
    "their them they this to was we were will with you your".split()
)
Outbox = list[tuple[str, dict[str, Any] | None]]


def stem(word: str) -> str:
    """A few of the English stemmer's suffix rules (see the module doc)."""
    for suffix in ("ing", "ed"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "lsz":
                word = word[:-1]
            return word
    if word.endswith("s") and not word.endswith("ss") and len(word) > 3:
        return word[:-1]
    return word


def stems(text: str) -> set[str]:
    return {stem(w) for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in STOP_WORDS}


def visible(entry: MemoryEntry, scope: Scope) -> bool:
    """The scope's agent's entry, shared or private to the scope's user."""
    mine = (entry.environment, entry.account_id, entry.agent_id) == (
        scope.environment,
        scope.account_id,
        scope.agent_id,
    )
    return mine and (
        entry.visibility == "shared" or (scope.user_id is not None and entry.user_id == scope.user_id)
    )


def live(entry: MemoryEntry, now: datetime) -> bool:
    return entry.expires_at is None or entry.expires_at > now


def recallable(entry: MemoryEntry) -> bool:
    return not (entry.visibility == "shared" and entry.category == "user_profile")


def _matches(
    entry: MemoryEntry,
    now: datetime,
    *,
    category: str | None = None,
    key_prefix: str | None = None,
    visibility: str | None = None,
    include_expired: bool = False,
) -> bool:
    return (
        (category is None or entry.category == category)
        and (not key_prefix or entry.key.startswith(key_prefix))
        and (visibility is None or entry.visibility == visibility)
        and (include_expired or live(entry, now))
    )


def _uuid(entry: MemoryEntry) -> uuid.UUID:
    return uuid.UUID(entry.entry_id)


@dataclass
class _State:
    entries: dict[str, StoredEntry] = field(default_factory=dict)
    decayed_at: dict[str, datetime] = field(default_factory=dict)
    outbox: Outbox = field(default_factory=list)
    quarantine: list[Any] = field(default_factory=list)
    """`tests.fakes.quarantine`'s records (they commit and roll back with the entries)."""

    def copy(self) -> _State:
        return _State(dict(self.entries), dict(self.decayed_at), list(self.outbox), list(self.quarantine))


class InMemoryMemoryWrites:
    """The statements of one write block (`core.memory.store.MemoryWrites`) on the block's copy."""

    def __init__(self, state: _State) -> None:
        self.state = state

    async def find_by_key(self, scope: Scope, key: str, visibility: str) -> StoredEntry | None:
        for stored in self.state.entries.values():
            e = stored.entry
            same_agent = (e.environment, e.account_id, e.agent_id) == (
                scope.environment,
                scope.account_id,
                scope.agent_id,
            )
            owner_ok = visibility == "shared" or e.user_id == scope.user_id
            if same_agent and e.key == key and e.visibility == visibility and owner_ok:
                return stored
        return None

    async def get_visible(self, scope: Scope, entry_id: uuid.UUID) -> StoredEntry | None:
        stored = self.state.entries.get(str(entry_id))
        return stored if stored is not None and visible(stored.entry, scope) else None

    async def counts(
        self, scope: Scope, category: str, author_user_id: str | None, now: datetime
    ) -> tuple[int, int]:
        mine = [
            s.entry
            for s in self.state.entries.values()
            if (s.entry.environment, s.entry.account_id, s.entry.agent_id, s.entry.category)
            == (scope.environment, scope.account_id, scope.agent_id, category)
            and live(s.entry, now)
        ]
        by_author = [e for e in mine if author_user_id is not None and e.author_user_id == author_user_id]
        return len(mine), len(by_author)

    async def insert(self, entry: MemoryEntry) -> StoredEntry:
        if entry.entry_id in self.state.entries:
            raise ValueError(f"memory entry {entry.entry_id} exists")
        self._check_key(entry)
        stored = StoredEntry(entry=entry, version=1)
        self.state.entries[entry.entry_id] = stored
        return stored

    async def update(self, entry: MemoryEntry) -> StoredEntry:
        current = self.state.entries.get(entry.entry_id)
        if current is None:
            raise LookupError(f"memory entry {entry.entry_id} vanished inside its write transaction")
        self._check_key(entry)
        mutable = ("user_id", "key", "content", "category", "visibility", "importance", "content_hash")
        fields = {name: getattr(entry, name) for name in (*mutable, "expires_at", "updated_at", "source")}
        stored = StoredEntry(entry=current.entry.model_copy(update=fields), version=current.version + 1)
        self.state.entries[entry.entry_id] = stored
        return stored

    async def delete(self, entry_id: str) -> None:
        self.state.entries.pop(entry_id, None)
        self.state.decayed_at.pop(entry_id, None)

    async def publish(self, changes: Sequence[StoredEntry | MemoryEntry]) -> None:
        for change in changes:
            if isinstance(change, StoredEntry):
                e = change.entry
                value: dict[str, Any] | None = change.event().model_dump(mode="json")
            else:
                e, value = change, None
            self.state.outbox.append((entry_key(e.environment, e.account_id, e.entry_id), value))

    async def expire_due(self, now: datetime, limit: int) -> list[MemoryEntry]:
        due = sorted(
            (s.entry for s in self.state.entries.values() if s.entry.expires_at is not None),
            key=lambda e: e.expires_at or now,
        )
        expired = [e for e in due if e.expires_at is not None and e.expires_at <= now][:limit]
        for entry in expired:
            await self.delete(entry.entry_id)
        return expired

    async def delete_from_thread(
        self, environment: str, account_id: str, thread_id: str
    ) -> tuple[list[MemoryEntry], int]:
        gone = [
            s.entry
            for s in self.state.entries.values()
            if (s.entry.environment, s.entry.account_id) == (environment, account_id)
            and s.entry.source is not None
            and s.entry.source.thread_id == thread_id
        ]
        for entry in gone:
            await self.delete(entry.entry_id)
        return gone, 0

    async def erase_user(self, environment: str, account_id: str, user_id: str) -> ErasedUser:
        def of_account(e: MemoryEntry) -> bool:
            return (e.environment, e.account_id) == (environment, account_id)

        deleted = [
            s.entry for s in self.state.entries.values() if of_account(s.entry) and s.entry.user_id == user_id
        ]
        for entry in deleted:
            await self.delete(entry.entry_id)
        unlinked = []
        for stored in list(self.state.entries.values()):
            if of_account(stored.entry) and stored.entry.author_user_id == user_id:
                entry = stored.entry.model_copy(update={"author_user_id": None})
                unlinked.append(StoredEntry(entry=entry, version=stored.version + 1))
                self.state.entries[entry.entry_id] = unlinked[-1]
        kept: list[Any] = []
        gone = relinked = 0
        for record in self.state.quarantine:  # `tests.fakes.quarantine`'s records
            e = record.stored.entry
            if of_account(e) and e.user_id == user_id:
                gone += 1
                continue
            if of_account(e) and e.author_user_id == user_id:
                stored = StoredEntry(e.model_copy(update={"author_user_id": None}), record.stored.version)
                record = dataclasses.replace(record, stored=stored)
                relinked += 1
            kept.append(record)
        self.state.quarantine = kept
        return ErasedUser(deleted, unlinked, gone, relinked)

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
        def due(stored: StoredEntry) -> bool:
            e = stored.entry
            decayed = self.state.decayed_at.get(e.entry_id)
            return (
                e.category in categories
                and e.importance > floor
                and (e.last_recalled_at or e.created_at) <= now - idle
                and (decayed is None or decayed <= now - spacing)
                and live(e, now)
            )

        chosen = sorted((s for s in self.state.entries.values() if due(s)), key=lambda s: _uuid(s.entry))
        changed = []
        for stored in chosen[:limit]:
            importance = max(floor, round(stored.entry.importance - step, 6))
            entry = stored.entry.model_copy(update={"importance": importance, "updated_at": now})
            changed.append(StoredEntry(entry=entry, version=stored.version + 1))
            self.state.entries[entry.entry_id] = changed[-1]
            self.state.decayed_at[entry.entry_id] = now
        return changed

    def _check_key(self, entry: MemoryEntry) -> None:
        """The table's unique indexes: one key per agent's shared entries or per user's private ones."""
        for other in self.state.entries.values():
            o = other.entry
            if o.entry_id != entry.entry_id and (
                o.environment,
                o.account_id,
                o.agent_id,
                o.visibility,
                o.user_id,
                o.key,
            ) == (
                entry.environment,
                entry.account_id,
                entry.agent_id,
                entry.visibility,
                entry.user_id,
                entry.key,
            ):
                raise ValueError(f"key {entry.key!r} is taken in its visibility scope")


class InMemoryMemoryStore:
    """See the module doc."""

    def __init__(self) -> None:
        self._state = _State()
        self._lock = asyncio.Lock()

    @property
    def entries(self) -> dict[str, StoredEntry]:
        return self._state.entries

    @property
    def outbox(self) -> Outbox:
        return self._state.outbox

    @property
    def decayed_at(self) -> dict[str, datetime]:
        return self._state.decayed_at

    @asynccontextmanager
    async def writing(
        self, environment: str, account_id: str, agent_id: str
    ) -> AsyncIterator[InMemoryMemoryWrites]:
        async with self.transaction() as writes:
            yield writes

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[InMemoryMemoryWrites]:
        async with self._lock:
            writes = InMemoryMemoryWrites(self._state.copy())
            yield writes
            self._state = writes.state

    # ---- reads -----------------------------------------------------------------------------------

    async def get(
        self, scope: Scope, entry_id: uuid.UUID, *, now: datetime, include_expired: bool
    ) -> StoredEntry | None:
        stored = self.entries.get(str(entry_id))
        if stored is None or not visible(stored.entry, scope):
            return None
        return stored if _matches(stored.entry, now, include_expired=include_expired) else None

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
        found = [
            s
            for s in self._visible(scope)
            if _matches(
                s.entry,
                now,
                category=category,
                key_prefix=key_prefix,
                visibility=visibility,
                include_expired=include_expired,
            )
            and (after is None or (s.entry.created_at, _uuid(s.entry)) < after)
        ]
        found.sort(key=lambda s: (s.entry.created_at, _uuid(s.entry)), reverse=True)
        return found[:limit]

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
        wanted = set(ids)
        return {
            _uuid(s.entry): s
            for s in self._visible(scope)
            if _uuid(s.entry) in wanted
            and recallable(s.entry)
            and _matches(
                s.entry, now, category=category, key_prefix=key_prefix, include_expired=include_expired
            )
        }

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
        terms = stems(query)
        hits: list[tuple[StoredEntry, float]] = []
        for s in self._visible(scope):
            if not (recallable(s.entry) and _matches(s.entry, now, category=category, key_prefix=key_prefix)):
                continue
            in_content = terms & stems(s.entry.content)
            in_key = terms & stems(re.sub(r"[._:/-]", " ", s.entry.key))
            if in_content or in_key:
                hits.append((s, len(in_content) + 0.4 * len(in_key - in_content)))
        hits.sort(
            key=lambda h: (
                -h[1],
                -h[0].entry.importance,
                -h[0].entry.updated_at.timestamp(),
                _uuid(h[0].entry),
            )
        )
        return hits[:limit]

    async def pinned(
        self, scope: Scope, *, now: datetime, min_importance: float, limit: int
    ) -> list[StoredEntry]:
        found = [
            s
            for s in self._visible(scope)
            if _matches(s.entry, now, category="user_profile", visibility="private")
            and s.entry.importance >= min_importance
        ]
        found.sort(key=lambda s: (s.entry.importance, s.entry.updated_at, _uuid(s.entry)), reverse=True)
        return found[:limit]

    async def user_rows(
        self, environment: str, account_id: str, user_id: str, *, created_before: datetime | None = None
    ) -> UserRows:
        def counted(e: MemoryEntry) -> bool:
            return (e.environment, e.account_id) == (environment, account_id) and (
                created_before is None or e.created_at < created_before
            )

        entries = [s.entry for s in self.entries.values() if counted(s.entry)]
        quarantined = [r.stored.entry for r in self._state.quarantine if counted(r.stored.entry)]
        return UserRows(
            private=sum(1 for e in entries if e.user_id == user_id),
            authored=sum(1 for e in entries if e.author_user_id == user_id and e.user_id != user_id),
            quarantined=sum(1 for e in quarantined if user_id in (e.user_id, e.author_user_id)),
        )

    async def record_recall(self, scope: Scope, ids: Sequence[uuid.UUID], at: datetime) -> int:
        async with self._lock:  # one statement: after the blocks before it, never inside one
            wanted = {str(i) for i in ids}
            counted = 0
            for stored in self._visible(scope):
                e = stored.entry
                if e.entry_id in wanted:
                    last = at if e.last_recalled_at is None else max(e.last_recalled_at, at)
                    entry = e.model_copy(
                        update={"recall_count": e.recall_count + 1, "last_recalled_at": last}
                    )
                    self.entries[e.entry_id] = StoredEntry(entry=entry, version=stored.version)
                    counted += 1
            return counted

    def _visible(self, scope: Scope) -> list[StoredEntry]:
        return [s for s in self.entries.values() if visible(s.entry, scope)]
