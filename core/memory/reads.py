"""The reads of agent memory (`MemoryReads`, the base of `core.memory.service.MemoryService`): the
HTTP browse endpoints call `list`/`get`; recall calls `by_ids`, `keyword_search` and
`record_recall`; pinning calls `pinned_candidates`.

Every call is scoped by a `MemoryScope`: an entry of another environment, account or agent, or a
private entry of another user, is never returned or counted. Bad input raises `InvalidInput` (or a
subclass) before the store is asked.
"""

from __future__ import annotations

import base64
import builtins
import uuid
from collections.abc import Sequence
from datetime import datetime

from pydantic import BaseModel, ConfigDict

from core.errors import InvalidInput, NotFound
from core.inputs import check_text
from core.memory.checks import (
    MAX_LIST_LIMIT,
    MAX_QUERY_CHARS,
    MAX_SEARCH_LIMIT,
    check_category,
    check_key_prefix,
    check_visibility,
    entry_uuid,
    store_scope,
    uuids,
)
from core.memory.clock import Clock, utc_now
from core.memory.models import PIN_MAX, PIN_MIN_IMPORTANCE, RECALL_DEFAULT_LIMIT, MemoryEntry, MemoryScope
from core.memory.store import MemoryStore


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


class MemoryReads:
    """Agent memory's reads over a `MemoryStore`. `clock` gives the current time (aware),
    injectable for tests."""

    def __init__(self, store: MemoryStore, clock: Clock = utc_now) -> None:
        self._store = store
        self._clock = clock

    def now(self) -> datetime:
        """The service clock's current time (aware)."""
        return self._now()

    def _now(self) -> datetime:
        now = self._clock()
        if now.tzinfo is None:
            raise ValueError("the memory clock must return timezone-aware datetimes")
        return now

    async def get(self, scope: MemoryScope, entry_id: str, *, include_expired: bool = False) -> MemoryEntry:
        """The entry when visible to the caller (and live, unless `include_expired`); NotFound otherwise."""
        s = store_scope(scope)
        found = await self._store.get(
            s, entry_uuid(entry_id), now=self._now(), include_expired=include_expired
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
        s = store_scope(scope)
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
        s = store_scope(scope)
        if category is not None:
            check_category(category)
        check_key_prefix(key_prefix)
        wanted = uuids(ids)
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
        s = store_scope(scope)
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
        s = store_scope(scope)
        ids = uuids(entry_ids)
        if not ids:
            return 0
        return await self._store.record_recall(s, ids, at or self._now())

    async def pinned_candidates(self, scope: MemoryScope, limit: int = PIN_MAX) -> builtins.list[MemoryEntry]:
        """Entries to pin now (the service clock): live `user_profile` entries private to the
        scope's user (none without a user), importance >= PIN_MIN_IMPORTANCE, by importance then
        recency (updated_at), at most `limit` (1..PIN_MAX)."""
        s = store_scope(scope)
        if not 1 <= limit <= PIN_MAX:
            raise InvalidInput(f"limit must be from 1 to {PIN_MAX}, got {limit}", field="limit")
        if s.user_id is None:
            return []
        rows = await self._store.pinned(s, now=self._now(), min_importance=PIN_MIN_IMPORTANCE, limit=limit)
        return [row.entry for row in rows]
