"""MemoryService: the one write path of agent memory, and the reads the other parts need.

Both writers (the agent's Memory tools and the pre-compaction flush) call `store`/`forget`; the
HTTP browse/edit endpoints call `list`/`get`/`edit`/`forget_entry`; recall calls `by_ids`,
`keyword_search` and `record_recall`; pinning calls `pinned_candidates`; hygiene calls
`expire_due` and `decay`.

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

import base64
import builtins
import hashlib
import math
import unicodedata
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict

from core.errors import Conflict, InvalidInput, NotFound
from core.ids import require_environment, require_id
from core.inputs import check_text
from core.memory.clock import Clock, utc_now
from core.memory.models import (
    CATEGORIES,
    DECAY_AFTER_DAYS,
    DECAY_FLOOR,
    DECAY_STEP,
    DEFAULT_IMPORTANCE,
    LIMITS,
    OBSERVATION_TTL_DAYS,
    PIN_MAX,
    PIN_MIN_IMPORTANCE,
    PROFILE_CATEGORY,
    RECALL_DEFAULT_LIMIT,
    Category,
    MemoryEntry,
    Provenance,
    Visibility,
)
from core.memory.pinned import MemoryScope
from core.memory.screening import Screening, SensitiveWithoutUser, screen
from core.memory.store import MemoryStore, MemoryWrites, Scope

Outcome = Literal["created", "replaced", "unchanged"]

MAX_KEY_CHARS = 200
MAX_LIST_LIMIT = 500
MAX_SEARCH_LIMIT = 100
MAX_QUERY_CHARS = 2_000
HYGIENE_BATCH = 1_000
DECAY_MIN_SPACING = timedelta(hours=20)
"""An entry is decayed at most once per daily pass, even when the pass runs twice in a day."""
DECAY_CATEGORIES: tuple[Category, ...] = ("project_fact", "observation")
MAX_KEY_PREFIX_CHARS = MAX_KEY_CHARS


def content_hash(content: str) -> str:
    """sha256 hex of the UTF-8 content (byte identity is what `store` compares)."""
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


class CapacityExceeded(InvalidInput):
    """A new entry would exceed a capacity limit; nothing was written.

    `limit_name` is `per_agent` or `per_user`; `limit` the limit, `count` the live entries counted.
    """

    code = "capacity_exceeded"

    def __init__(self, message: str, *, category: str, limit_name: str, limit: int, count: int) -> None:
        super().__init__(message, field="category")
        self.category = category
        self.limit_name = limit_name
        self.limit = limit
        self.count = count


class ContentTooLong(InvalidInput):
    """Content longer than its category's `max_chars`; nothing was written."""

    code = "content_too_long"

    def __init__(self, message: str, *, category: str, limit: int, length: int) -> None:
        super().__init__(message, field="content")
        self.category = category
        self.limit = limit
        self.length = length


class ProfileWithoutUser(InvalidInput):
    """A `user_profile` entry with no user to own it (a call or thread without a user); nothing
    was written."""

    code = "user_profile_without_user"


def _profile_without_user(action: str) -> ProfileWithoutUser:
    return ProfileWithoutUser(
        f"{action}: user_profile entries are facts about one user and this call has no user to own "
        "them; send the call for the user (user_id, or a thread that has one), or store the fact as "
        "project_fact if it is about the agent or the project",
        field="category",
    )


def _profile_private_note(user_id: str) -> str:
    return f"stored as private to user {user_id!r} instead of shared: user_profile entries describe one user"


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


class EntryPage(BaseModel):
    model_config = ConfigDict(frozen=True)

    entries: list[MemoryEntry]
    next_cursor: str | None
    """Pass back as `cursor` for the next page; None when this is the last page."""


class ScoredEntry(BaseModel):
    """A keyword-search hit: the entry and its raw `ts_rank`."""

    model_config = ConfigDict(frozen=True)

    entry: MemoryEntry
    score: float


# ---- input checks -----------------------------------------------------------------------------------


def _check_id(value: str | None, field: str) -> None:
    if value is not None:
        require_id(value, field)


def _scope(scope: MemoryScope) -> Scope:
    require_environment(scope.environment)
    _check_id(scope.account_id, "account_id")
    _check_id(scope.agent_id, "agent_id")
    _check_id(scope.user_id, "user_id")
    return Scope(scope.environment, scope.account_id, scope.agent_id, scope.user_id)


def check_key(key: object) -> str:
    if not isinstance(key, str):
        raise InvalidInput("key must be a string", field="key")
    if not key or not key.strip():
        raise InvalidInput("key must not be empty", field="key")
    if len(key) > MAX_KEY_CHARS:
        raise InvalidInput(f"key is {len(key)} characters; the limit is {MAX_KEY_CHARS}", field="key")
    if key != key.strip():
        raise InvalidInput("key must not start or end with whitespace", field="key")
    if any(unicodedata.category(c) in ("Cc", "Cs", "Zl", "Zp") for c in key):
        raise InvalidInput("key must not contain control characters or line breaks", field="key")
    return key


def check_key_prefix(key_prefix: object) -> str | None:
    """A key prefix filter (None: no filter): 1..MAX_KEY_PREFIX_CHARS characters of storable text."""
    if key_prefix is None:
        return None
    if not isinstance(key_prefix, str):
        raise InvalidInput("key_prefix must be a string", field="key_prefix")
    if not 1 <= len(key_prefix) <= MAX_KEY_PREFIX_CHARS:
        raise InvalidInput(
            f"key_prefix is {len(key_prefix)} characters; it must be 1..{MAX_KEY_PREFIX_CHARS}",
            field="key_prefix",
        )
    return check_text(key_prefix, "key_prefix")


def check_category(category: object) -> Category:
    if category not in CATEGORIES:
        raise InvalidInput(
            f"category must be one of {', '.join(CATEGORIES)}, got {category!r}", field="category"
        )
    return category


def check_content(content: object, category: Category) -> str:
    if not isinstance(content, str):
        raise InvalidInput("content must be a string", field="content")
    if not content.strip():
        raise InvalidInput("content must not be empty", field="content")
    check_text(content, "content")
    limit = LIMITS[category].max_chars
    if len(content) > limit:
        raise ContentTooLong(
            f"content is {len(content)} characters; the limit for {category} entries is {limit} characters",
            category=category,
            limit=limit,
            length=len(content),
        )
    return content


def check_importance(importance: object) -> float:
    if isinstance(importance, bool) or not isinstance(importance, int | float):
        raise InvalidInput(
            f"importance must be a number from 0.0 to 1.0, got {importance!r}", field="importance"
        )
    value = float(importance)
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise InvalidInput(f"importance must be from 0.0 to 1.0, got {importance!r}", field="importance")
    return value


def check_visibility(visibility: object, field: str = "scope") -> Visibility:
    if visibility not in get_args(Visibility):
        raise InvalidInput(f"{field} must be 'private' or 'shared', got {visibility!r}", field=field)
    return visibility  # type: ignore[return-value]


def _check_expires_at(expires_at: datetime | None, now: datetime) -> None:
    if expires_at is None:
        return
    if expires_at.tzinfo is None:
        raise InvalidInput("expires_at must carry a timezone", field="expires_at")
    if expires_at <= now:
        raise InvalidInput(f"expires_at {expires_at.isoformat()} is not in the future", field="expires_at")


def _entry_uuid(entry_id: str) -> uuid.UUID:
    try:
        return uuid.UUID(entry_id)
    except (ValueError, AttributeError, TypeError):
        raise InvalidInput(f"entry_id {entry_id!r} is not a UUID", field="entry_id") from None


def _uuids(ids: Sequence[str]) -> list[uuid.UUID]:
    """The UUIDs among `ids`, in order, each once; what is not a UUID is dropped."""
    wanted: list[uuid.UUID] = []
    for raw in ids:
        try:
            uid = uuid.UUID(raw)
        except (ValueError, AttributeError, TypeError):
            continue
        if uid not in wanted:
            wanted.append(uid)
    return wanted


def _live(entry: MemoryEntry, now: datetime) -> bool:
    return entry.expires_at is None or entry.expires_at > now


def _encode_cursor(entry: MemoryEntry) -> str:
    raw = f"{entry.created_at.isoformat()}|{entry.entry_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        created, entry_id = raw.split("|")
        when = datetime.fromisoformat(created)
        if when.tzinfo is None:
            raise ValueError("naive")
        return when, uuid.UUID(entry_id)
    except (ValueError, UnicodeDecodeError):
        raise InvalidInput(f"cursor {cursor!r} is not a cursor returned by list", field="cursor") from None


def _sensitive_note(screening: Screening) -> str:
    return f"stored as private instead of shared: the content contains {screening.describe()}"


def _private_fallback_note() -> str:
    return (
        "scope 'private' needs an authenticated user and this call has none: the entry is shared with "
        "every user of the agent"
    )


class MemoryService:
    """Agent memory over a `MemoryStore`. `clock` gives the current time (aware), injectable for
    tests."""

    def __init__(self, store: MemoryStore, clock: Clock = utc_now) -> None:
        self._store = store
        self._clock = clock

    def _now(self) -> datetime:
        now = self._clock()
        if now.tzinfo is None:
            raise ValueError("the memory clock must return timezone-aware datetimes")
        return now

    # ---- writes ------------------------------------------------------------------------------------

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
        s = _scope(scope)
        key = check_key(key)
        cat = check_category(category)
        content = check_content(content, cat)
        importance = check_importance(importance)
        requested = check_visibility(scope_visibility)
        now = self._now()
        _check_expires_at(expires_at, now)
        screening = screen(("key", key), ("content", content))
        effective, notes = self._effective_visibility(requested, s.user_id, screening, cat)
        owner = s.user_id if effective == "private" else None

        async with self._store.writing(s.environment, s.account_id, s.agent_id) as tx:
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
                    await self._check_capacity(tx, s, cat, existing.entry.author_user_id, now)
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
                await self._check_capacity(tx, s, cat, s.user_id, now)
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

    @staticmethod
    def _effective_visibility(
        requested: Visibility, user_id: str | None, screening: Screening, category: Category
    ) -> tuple[Visibility, list[str]]:
        notes: list[str] = []
        effective = requested
        if category == PROFILE_CATEGORY and user_id is None:
            raise _profile_without_user("content rejected")
        if screening.forces_private:
            if user_id is None:
                raise SensitiveWithoutUser(
                    f"content rejected: it contains {screening.describe()}, which may only be stored as a "
                    "private entry, and this call has no authenticated user to own it",
                    pattern=screening.sensitive[0],
                    field="content",
                )
            if requested == "shared":
                notes.append(_sensitive_note(screening))
            effective = "private"
        elif category == PROFILE_CATEGORY and requested == "shared":
            assert user_id is not None
            effective = "private"
            notes.append(_profile_private_note(user_id))
        elif requested == "private" and user_id is None:
            effective = "shared"
            notes.append(_private_fallback_note())
        return effective, notes

    @staticmethod
    async def _check_capacity(
        tx: MemoryWrites, s: Scope, category: Category, author: str | None, now: datetime
    ) -> None:
        limits = LIMITS[category]
        agent_count, user_count = await tx.counts(s, category, author, now)
        if agent_count >= limits.per_agent:
            raise CapacityExceeded(
                f"capacity exceeded: agent {s.agent_id!r} already has {agent_count} {category} entries and "
                f"the limit is {limits.per_agent} {category} entries per agent; forget or replace one first",
                category=category,
                limit_name="per_agent",
                limit=limits.per_agent,
                count=agent_count,
            )
        if author is not None and user_count >= limits.per_user:
            raise CapacityExceeded(
                f"capacity exceeded: user {author!r} already wrote {user_count} {category} entries for agent "
                f"{s.agent_id!r} and the limit is {limits.per_user} {category} entries per user; forget or "
                "replace one first",
                category=category,
                limit_name="per_user",
                limit=limits.per_user,
                count=user_count,
            )

    async def forget(self, scope: MemoryScope, key: str, *, visibility: str | None = None) -> ForgetResult:
        """Delete the entry `key` visible to the caller: with `visibility=None` the caller's private
        entry with that key when it has one, else the agent's shared one; `private`/`shared` pick
        one scope. Another user's private entries are never touched. Publishes a tombstone."""
        s = _scope(scope)
        key = check_key(key)
        wanted = None if visibility is None else check_visibility(visibility, "visibility")
        order: list[Visibility] = []
        if wanted in (None, "private") and s.user_id is not None:
            order.append("private")
        if wanted in (None, "shared"):
            order.append("shared")
        async with self._store.writing(s.environment, s.account_id, s.agent_id) as tx:
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
        s = _scope(scope)
        uid = _entry_uuid(entry_id)
        async with self._store.writing(s.environment, s.account_id, s.agent_id) as tx:
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
        s = _scope(scope)
        uid = _entry_uuid(entry_id)
        now = self._now()
        new_key = None if key is None else check_key(key)
        new_category = None if category is None else check_category(category)
        new_importance = None if importance is None else check_importance(importance)
        notes: list[str] = []
        async with self._store.writing(s.environment, s.account_id, s.agent_id) as tx:
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
                notes.append(f"the entry is now private to user {s.user_id!r}: " + _sensitive_note(screening))
            if cat == PROFILE_CATEGORY and visibility == "shared":
                if s.user_id is None:
                    raise _profile_without_user("edit rejected")
                visibility, user_id = "private", s.user_id
                notes.append(
                    f"the entry is now private to user {s.user_id!r}: user_profile entries describe one user"
                )
            expires_at = old.expires_at
            if cat != old.category:
                await self._check_capacity(tx, s, cat, old.author_user_id, now)
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

    # ---- reads -------------------------------------------------------------------------------------

    async def get(self, scope: MemoryScope, entry_id: str, *, include_expired: bool = False) -> MemoryEntry:
        """The entry when visible to the caller (and live, unless `include_expired`); NotFound otherwise."""
        s = _scope(scope)
        found = await self._store.get(
            s, _entry_uuid(entry_id), now=self._now(), include_expired=include_expired
        )
        if found is None:
            raise NotFound(f"memory entry {entry_id} does not exist or is not visible to this caller")
        return found.entry

    async def list(
        self,
        scope: MemoryScope,
        *,
        category: str | None = None,
        key_prefix: str | None = None,
        visibility: str | None = None,
        include_expired: bool = False,
        limit: int = 50,
        cursor: str | None = None,
    ) -> EntryPage:
        """Visible entries, newest first (created_at, entry_id), filtered, `limit` per page (1..500)."""
        s = _scope(scope)
        if category is not None:
            check_category(category)
        if visibility is not None:
            check_visibility(visibility, "visibility")
        check_key_prefix(key_prefix)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIST_LIMIT:
            raise InvalidInput(f"limit must be from 1 to {MAX_LIST_LIMIT}, got {limit!r}", field="limit")
        after = None if cursor is None else _decode_cursor(cursor)
        rows = await self._store.list_page(
            s,
            now=self._now(),
            category=category,
            key_prefix=key_prefix,
            visibility=visibility,
            include_expired=include_expired,
            after=after,
            limit=limit + 1,
        )
        entries = [row.entry for row in rows[:limit]]
        more = len(rows) > limit
        return EntryPage(entries=entries, next_cursor=_encode_cursor(entries[-1]) if more else None)

    async def by_ids(
        self,
        scope: MemoryScope,
        ids: Sequence[str],
        *,
        category: str | None = None,
        key_prefix: str | None = None,
        include_expired: bool = False,
        now: datetime | None = None,
    ) -> builtins.list[MemoryEntry]:
        """The entries among `ids` that the caller may see, live at `now` (default: the clock) and
        matching the filters, in the order of `ids` (duplicates once; ids that are missing,
        invisible, expired or not UUIDs are dropped). Recall's phase 2: the index may be stale, this
        re-applies the authority."""
        s = _scope(scope)
        if category is not None:
            check_category(category)
        check_key_prefix(key_prefix)
        wanted = _uuids(ids)
        if not wanted:
            return []
        found = await self._store.by_ids(
            s,
            wanted,
            now=now or self._now(),
            category=category,
            key_prefix=key_prefix,
            include_expired=include_expired,
        )
        return [found[uid].entry for uid in wanted if uid in found]

    async def keyword_search(
        self,
        scope: MemoryScope,
        query: str,
        *,
        category: str | None = None,
        key_prefix: str | None = None,
        limit: int = RECALL_DEFAULT_LIMIT,
        now: datetime | None = None,
    ) -> builtins.list[ScoredEntry]:
        """Postgres full-text fallback of recall: entries with their ts_rank, visible and live at `now`
        matching ANY term of `query` (english stemming; words of the key count with a lower weight),
        best rank first, at most `limit` (1..100). The score is the raw ts_rank (recall applies the
        importance weighting). Empty when nothing matches or the query has only stop words. The
        query is a bound parameter parsed as plain text (`plainto_tsquery`): no operator syntax."""
        s = _scope(scope)
        if not isinstance(query, str) or not query.strip():
            raise InvalidInput("query must not be empty", field="query")
        if len(query) > MAX_QUERY_CHARS:
            raise InvalidInput(
                f"query is {len(query)} characters; the limit is {MAX_QUERY_CHARS}", field="query"
            )
        check_text(query, "query")
        if category is not None:
            check_category(category)
        check_key_prefix(key_prefix)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_SEARCH_LIMIT:
            raise InvalidInput(f"limit must be from 1 to {MAX_SEARCH_LIMIT}, got {limit!r}", field="limit")
        rows = await self._store.keyword_search(
            s, query, now=now or self._now(), category=category, key_prefix=key_prefix, limit=limit
        )
        return [ScoredEntry(entry=row.entry, score=rank) for row, rank in rows]

    async def record_recall(
        self, scope: MemoryScope, entry_ids: Sequence[str], *, at: datetime | None = None
    ) -> int:
        """Count one recall on each entry among `entry_ids` visible in `scope`: recall_count + 1,
        last_recalled_at = `at` (default: the clock; never moved backwards). Returns how many entries
        were counted. Ids that are not UUIDs or not visible are ignored. Not published (the version
        does not change): recall counters are not part of the projection's contract."""
        s = _scope(scope)
        ids = _uuids(entry_ids)
        if not ids:
            return 0
        return await self._store.record_recall(s, ids, at or self._now())

    async def pinned_candidates(self, scope: MemoryScope, limit: int = PIN_MAX) -> builtins.list[MemoryEntry]:
        """Entries to pin now (the service clock): live `user_profile` entries private to the
        scope's user (none without a user), importance >= PIN_MIN_IMPORTANCE, by importance then
        recency (updated_at), at most `limit` (1..PIN_MAX)."""
        s = _scope(scope)
        if not 1 <= limit <= PIN_MAX:
            raise InvalidInput(f"limit must be from 1 to {PIN_MAX}, got {limit}", field="limit")
        if s.user_id is None:
            return []
        rows = await self._store.pinned(s, now=self._now(), min_importance=PIN_MIN_IMPORTANCE, limit=limit)
        return [row.entry for row in rows]

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
            total += len(changed)
            if len(changed) < batch_size:
                return total
