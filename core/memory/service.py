"""MemoryService: the one write path of agent memory, on top of its reads (`core.memory.reads`).

Both writers (the agent's Memory tools and the pre-compaction flush) call `store`/`forget`; the
HTTP browse/edit endpoints call `list`/`get`/`edit`/`forget_entry`; recall calls `by_ids`,
`keyword_search` and `record_recall`; pinning calls `pinned_candidates`; hygiene calls
`expire_due` and `decay`; thread deletions and user erasures call `forget_thread`, `erase_user`
(`core.memory.erasure`).

Rules of `store` (the issue's, exactly):
- `scope_visibility="private"` with no authenticated user (`scope.user_id is None`) stores a
  **shared** entry; `StoreResult.effective_visibility` and a note say so.
- Facts about a user need a user: a `user_profile` entry is always private to the user of the
  call (`shared` asked: stored private, with a note), and a call without a user cannot write one
  (`ProfileWithoutUser`), so no thread or tool call without a user can create or overwrite a
  profile fact that would be shown to every user.
- Screening (`core.memory.screening`) runs on key and content: rejected patterns raise
  `ScreeningRejected`; sensitive content forces `private` (note), or raises
  `SensitiveWithoutUser` when there is no user to make it private.
- The same-key lookup is made in the effective visibility scope (the agent's shared keys, or the
  user's private keys). Same key + byte-identical content: nothing is written (no outbox row), the
  existing row is returned with outcome `unchanged` (importance/category/expiry are NOT updated:
  use `edit`). Same key + different content: the entry is replaced in place (same entry_id and
  created_at; content, category, importance, expiry, source replaced; recall counters kept) and
  capacity is not checked: the replacement does not add an entry. Except when it does add one to
  a category's live count - a replacement that moves the entry into another category, or that
  revives an expired entry - which is checked like a new entry (as `edit` does), so capacity
  cannot be bypassed by replacing. An expired entry with the same key is replaced whatever its
  content.
- A new entry is checked against capacity (`LIMITS`): live entries of the agent in the category
  (`per_agent`) and live entries written by the user in it (`per_user`, only when there is a
  user); `CapacityExceeded` names the limit and the numbers.
- Content is 1..`max_chars` characters of the category; importance in [0, 1]; `observation`
  entries without an explicit `expires_at` expire `OBSERVATION_TTL_DAYS` after they are written.

Every change (create, replace, edit, forget, expiry, decay) bumps the entry's `version` and writes
its `memory.entries` outbox row in the same transaction (tombstone = NULL value for deletions).
`record_recall` changes only the recall counters: it is not published and keeps the version.

Every call is scoped by a `MemoryScope`: an entry of another environment, account or agent, or a
private entry of another user, is never returned, changed or counted as visible (capacity counts
are per agent and per author, whoever can see the entries). Bad input raises `InvalidInput` (or a
subclass) before anything is written.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict

from core.errors import Conflict, NotFound
from core.memory.checks import (
    check_capacity,
    check_category,
    check_content,
    check_expires_at,
    check_importance,
    check_key,
    check_visibility,
    content_hash,
    effective_visibility,
    entry_uuid,
    profile_without_user,
    sensitive_note,
    store_scope,
)
from core.memory.erasure import MemoryErasure
from core.memory.models import (
    DECAY_AFTER_DAYS,
    DECAY_FLOOR,
    DECAY_STEP,
    DEFAULT_IMPORTANCE,
    OBSERVATION_TTL_DAYS,
    PROFILE_CATEGORY,
    Category,
    MemoryEntry,
    MemoryScope,
    Provenance,
    Visibility,
)
from core.memory.screening import SensitiveWithoutUser, screen
from core.memory.store import MemoryWrites, Scope, StoredEntry

Outcome = Literal["created", "replaced", "unchanged"]

HYGIENE_BATCH = 1_000
DECAY_MIN_SPACING = timedelta(hours=20)
"""An entry is decayed at most once per daily pass, even when the pass runs twice in a day."""
DECAY_CATEGORIES: tuple[Category, ...] = ("project_fact", "observation")


class StoreResult(BaseModel):
    """What `store` did. `notes` explain every silent-looking decision (visibility changes...)."""

    model_config = ConfigDict(frozen=True)

    entry: MemoryEntry
    outcome: Outcome
    effective_visibility: Visibility
    notes: list[str] = []


class ForgetResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    forgotten: bool
    entry: MemoryEntry | None = None
    """The entry that was deleted (None when there was none)."""


class EditResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    entry: MemoryEntry
    changed: bool
    notes: list[str] = []


def _live(entry: MemoryEntry, now: datetime) -> bool:
    return entry.expires_at is None or entry.expires_at > now


class _Recording:
    """A `MemoryWrites` that notes the entries it publishes (every change publishes its entry)."""

    def __init__(self, tx: MemoryWrites) -> None:
        self._tx = tx
        self.changed: list[MemoryEntry] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tx, name)

    async def publish(self, changes: Sequence[StoredEntry | MemoryEntry]) -> None:
        await self._tx.publish(changes)
        self.changed.extend(c.entry if isinstance(c, StoredEntry) else c for c in changes)


class MemoryService(MemoryErasure):
    """Agent memory over a `MemoryStore`: its writes (module rules) and hygiene primitives, the
    deletions of `MemoryErasure` (and its listeners: `listen`) and the reads of `MemoryReads`.
    `clock` gives the current time (aware), injectable for tests."""

    @asynccontextmanager
    async def _writing(self, s: Scope) -> AsyncIterator[MemoryWrites]:
        """`store.writing` for the scope's agent; the listeners after the commit."""
        async with self._store.writing(s.environment, s.account_id, s.agent_id) as tx:
            recording = _Recording(tx)
            yield cast(MemoryWrites, recording)
        self._changed(recording.changed)

    async def store(
        self,
        scope: MemoryScope,
        key: str,
        content: str,
        category: str,
        *,
        scope_visibility: str,
        importance: float = DEFAULT_IMPORTANCE,
        expires_at: datetime | None = None,
        source: Provenance | None = None,
    ) -> StoreResult:
        """Create, replace or keep the entry `key` (see the module rules). Raises `InvalidInput`
        (incl. `ScreeningRejected`, `SensitiveWithoutUser`, `ProfileWithoutUser`,
        `CapacityExceeded`, `ContentTooLong`)."""
        s = store_scope(scope)
        key = check_key(key)
        cat = check_category(category)
        content = check_content(content, cat)
        importance = check_importance(importance)
        requested = check_visibility(scope_visibility)
        now = self._now()
        check_expires_at(expires_at, now)
        screening = screen(("key", key), ("content", content))
        effective, notes = effective_visibility(requested, s.user_id, screening, cat)
        owner = s.user_id if effective == "private" else None

        async with self._writing(s) as tx:
            existing = await tx.find_by_key(s, key, effective)
            if existing is not None and _live(existing.entry, now) and existing.entry.content == content:
                old = existing.entry
                if (old.category, old.importance) != (cat, importance):
                    notes.append(
                        "the content is identical, so nothing was written: category and importance were "
                        "not changed (edit the entry to change them)"
                    )
                return StoreResult(
                    entry=old, outcome="unchanged", effective_visibility=effective, notes=notes
                )
            if expires_at is None and cat == "observation":
                expires_at = now + timedelta(days=OBSERVATION_TTL_DAYS)
            if existing is not None:
                live = _live(existing.entry, now)
                if not live:
                    notes.append("the previous entry with this key had expired; it was replaced")
                if not live or existing.entry.category != cat:
                    # the replacement adds one to the live count of `cat`: it needs room there
                    await check_capacity(tx, s, cat, existing.entry.author_user_id, now)
                replacement = existing.entry.model_copy(
                    update={
                        "content": content,
                        "category": cat,
                        "importance": importance,
                        "content_hash": content_hash(content),
                        "expires_at": expires_at,
                        "updated_at": now,
                        "source": source,
                    }
                )
                stored = await tx.update(replacement)
                outcome: Outcome = "replaced"
            else:
                await check_capacity(tx, s, cat, s.user_id, now)
                entry = MemoryEntry(
                    entry_id=str(uuid.uuid4()),
                    environment=s.environment,
                    account_id=s.account_id,
                    agent_id=s.agent_id,
                    user_id=owner,
                    author_user_id=s.user_id,
                    key=key,
                    content=content,
                    category=cat,
                    visibility=effective,
                    importance=importance,
                    content_hash=content_hash(content),
                    expires_at=expires_at,
                    created_at=now,
                    updated_at=now,
                    source=source,
                )
                stored = await tx.insert(entry)
                outcome = "created"
            await tx.publish([stored])
        return StoreResult(entry=stored.entry, outcome=outcome, effective_visibility=effective, notes=notes)

    async def forget(self, scope: MemoryScope, key: str, *, visibility: str | None = None) -> ForgetResult:
        """Delete the entry `key` visible to the caller: with `visibility=None` the caller's private
        entry with that key when it has one, else the agent's shared one; `private`/`shared` pick
        one scope. Another user's private entries are never touched. Publishes a tombstone."""
        s = store_scope(scope)
        key = check_key(key)
        wanted = None if visibility is None else check_visibility(visibility, "visibility")
        order: list[Visibility] = []
        if wanted in (None, "private") and s.user_id is not None:
            order.append("private")
        if wanted in (None, "shared"):
            order.append("shared")
        async with self._writing(s) as tx:
            for vis in order:
                existing = await tx.find_by_key(s, key, vis)
                if existing is not None:
                    await tx.delete(existing.entry.entry_id)
                    await tx.publish([existing.entry])
                    return ForgetResult(forgotten=True, entry=existing.entry)
        return ForgetResult(forgotten=False)

    async def forget_entry(self, scope: MemoryScope, entry_id: str) -> MemoryEntry:
        """Delete the entry `entry_id` when the caller may see it (expired or not), in one
        transaction with its tombstone; returns the deleted entry. NotFound otherwise. Deleting by
        id (not by key) never removes another entry that took the key meanwhile."""
        s = store_scope(scope)
        uid = entry_uuid(entry_id)
        async with self._writing(s) as tx:
            current = await tx.get_visible(s, uid)
            if current is None:
                raise NotFound(f"memory entry {entry_id} does not exist or is not visible to this caller")
            await tx.delete(current.entry.entry_id)
            await tx.publish([current.entry])
        return current.entry

    async def edit(
        self,
        scope: MemoryScope,
        entry_id: str,
        *,
        content: str | None = None,
        importance: float | None = None,
        category: str | None = None,
        key: str | None = None,
    ) -> EditResult:
        """Change fields of a visible entry, through the same screening and capacity rules as `store`.

        - content/key are screened; sensitive content makes a shared entry private (owned by the
          caller; `SensitiveWithoutUser` when there is no caller user);
        - a `user_profile` entry is private: a shared one (moved into the category, or written
          before this rule) becomes private to the caller (`ProfileWithoutUser` when the caller
          has no user: move it to another category or forget it instead);
        - a new category must have room (`CapacityExceeded`, per agent and per the entry's author)
          and fit its `max_chars`; moving into `observation` sets the default expiry when there is
          none, moving out of it clears the expiry;
        - a new key already used in the entry's visibility scope raises `Conflict`.
        NotFound when the caller cannot see the entry. Nothing changes -> `changed=False`, no write.
        """
        s = store_scope(scope)
        uid = entry_uuid(entry_id)
        now = self._now()
        new_key = None if key is None else check_key(key)
        new_category = None if category is None else check_category(category)
        new_importance = None if importance is None else check_importance(importance)
        notes: list[str] = []
        async with self._writing(s) as tx:
            current = await tx.get_visible(s, uid)
            if current is None:
                raise NotFound(f"memory entry {entry_id} does not exist or is not visible to this caller")
            old = current.entry
            cat = new_category or old.category
            final_content = check_content(old.content if content is None else content, cat)
            final_key = new_key or old.key
            screening = screen(("key", final_key), ("content", final_content))
            visibility, user_id = old.visibility, old.user_id
            if screening.forces_private and visibility == "shared":
                if s.user_id is None:
                    raise SensitiveWithoutUser(
                        f"edit rejected: the entry would contain {screening.describe()}, which may only be "
                        "stored privately, and this call has no authenticated user to own it",
                        pattern=screening.sensitive[0],
                        field="content",
                    )
                visibility, user_id = "private", s.user_id
                notes.append(f"the entry is now private to user {s.user_id!r}: " + sensitive_note(screening))
            if cat == PROFILE_CATEGORY and visibility == "shared":
                if s.user_id is None:
                    raise profile_without_user("edit rejected")
                visibility, user_id = "private", s.user_id
                notes.append(
                    f"the entry is now private to user {s.user_id!r}: user_profile entries describe one user"
                )
            expires_at = old.expires_at
            if cat != old.category:
                await check_capacity(tx, s, cat, old.author_user_id, now)
                if cat == "observation" and expires_at is None:
                    expires_at = now + timedelta(days=OBSERVATION_TTL_DAYS)
                    notes.append(f"observation entries expire after {OBSERVATION_TTL_DAYS} days")
                elif old.category == "observation":
                    expires_at = None
                    notes.append("the entry left the observation category, so it no longer expires")
            final = old.model_copy(
                update={
                    "key": final_key,
                    "content": final_content,
                    "category": cat,
                    "importance": old.importance if new_importance is None else new_importance,
                    "content_hash": content_hash(final_content),
                    "visibility": visibility,
                    "user_id": user_id,
                    "expires_at": expires_at,
                }
            )
            if (final_key, visibility) != (old.key, old.visibility):
                probe = Scope(s.environment, s.account_id, s.agent_id, user_id)
                clash = await tx.find_by_key(probe, final_key, visibility)
                if clash is not None and clash.entry.entry_id != old.entry_id:
                    raise Conflict(
                        f"key {final_key!r} is already used by another {visibility} entry "
                        f"({clash.entry.entry_id})"
                    )
            if final == old:
                return EditResult(entry=old, changed=False, notes=notes)
            stored = await tx.update(final.model_copy(update={"updated_at": now}))
            await tx.publish([stored])
        return EditResult(entry=stored.entry, changed=True, notes=notes)

    # ---- hygiene primitives ---------------------------------------------------------------------

    async def expire_due(self, now: datetime | None = None, *, batch_size: int = HYGIENE_BATCH) -> int:
        """Delete every entry (all tenants) with expires_at <= now, a tombstone each in the outbox, in
        transactions of `batch_size`; returns how many were deleted."""
        when = now or self._now()
        total = 0
        while True:
            async with self._store.transaction() as tx:
                gone = await tx.expire_due(when, batch_size)
                await tx.publish(gone)
            self._changed(gone)
            total += len(gone)
            if len(gone) < batch_size:
                return total

    async def decay(self, now: datetime | None = None, *, batch_size: int = HYGIENE_BATCH) -> int:
        """Lower importance by DECAY_STEP (floor DECAY_FLOOR) of live project_fact/observation entries
        (all tenants) not recalled in DECAY_AFTER_DAYS (never recalled: since creation) and not
        decayed in the last DECAY_MIN_SPACING (so one daily pass decays an entry once however often
        it runs). user_profile entries are never decayed. Each change is published. Returns the count."""
        when = now or self._now()
        total = 0
        while True:
            async with self._store.transaction() as tx:
                changed = await tx.decay(
                    when,
                    idle=timedelta(days=DECAY_AFTER_DAYS),
                    spacing=DECAY_MIN_SPACING,
                    step=DECAY_STEP,
                    floor=DECAY_FLOOR,
                    categories=DECAY_CATEGORIES,
                    limit=batch_size,
                )
                await tx.publish(changed)
            self._changed([stored.entry for stored in changed])
            total += len(changed)
            if len(changed) < batch_size:
                return total
