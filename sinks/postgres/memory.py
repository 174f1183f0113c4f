"""The `memory_entries` and `memory_outbox` tables (`PostgresMemoryStore`, a
`core.memory.store.MemoryStore`) behind `core.memory.service.MemoryService`.

This module is SQL only; the rules (screening, capacity, same-key, visibility choice) live in the
service. Every read names the scope (environment, account_id, agent_id) and the caller's user:
`shared` rows, plus `private` rows whose user_id is the caller's (a NULL user sees shared only).

Writes go through `PostgresMemoryStore.writing(...)`, which yields a `MemoryWriteTx` inside one
transaction holding the agent's advisory lock (so capacity counts and same-key checks are not
raced by concurrent writers of the same agent). `MemoryWriteTx.publish` adds the outbox row of a
change in that same transaction: the entry change and its `memory.entries` record commit or roll
back together. Rows are locked (`FOR UPDATE`) before they change, and each change bumps
`version` in SQL, so concurrent writers (hygiene passes included) never reuse a version, and the
outbox order of one entry is its commit order.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from core.memory.models import MemoryEntry, Provenance, entry_key
from core.memory.store import Scope, StoredEntry

_COLUMNS = (
    "entry_id, environment, account_id, agent_id, user_id, author_user_id, key, content, category, "
    "visibility, importance, content_hash, expires_at, recall_count, last_recalled_at, created_at, "
    "updated_at, source, version"
)
_SCOPE = "environment = $1 AND account_id = $2 AND agent_id = $3"
_VISIBLE = f"{_SCOPE} AND (visibility = 'shared' OR user_id = $4)"
_LIVE = "(expires_at IS NULL OR expires_at > {now})"
_RECALLABLE = "NOT (visibility = 'shared' AND category = 'user_profile')"
"""Recall never answers with a shared user_profile entry: a profile fact is about one user and is
private to them (`MemoryService` writes no other kind since issue 9). Rows written shared before
that (e.g. by the flush of a thread without a user) stay listable for operators to clean up."""

AGENT_LOCK_PREFIX = "memstream.memory/"


def _stored(row: Any) -> StoredEntry:
    source = row["source"]
    entry = MemoryEntry(
        entry_id=str(row["entry_id"]),
        environment=row["environment"],
        account_id=row["account_id"],
        agent_id=row["agent_id"],
        user_id=row["user_id"],
        author_user_id=row["author_user_id"],
        key=row["key"],
        content=row["content"],
        category=row["category"],
        visibility=row["visibility"],
        importance=row["importance"],
        content_hash=row["content_hash"],
        expires_at=row["expires_at"],
        recall_count=row["recall_count"],
        last_recalled_at=row["last_recalled_at"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        source=None if source is None else Provenance.model_validate(source),
    )
    return StoredEntry(entry=entry, version=row["version"])


def _source(entry: MemoryEntry) -> dict[str, Any] | None:
    return None if entry.source is None else entry.source.model_dump(mode="json")


def _params(scope: Scope) -> list[Any]:
    """The 4 scope parameters of `_VISIBLE` ($1..$4)."""
    return [scope.environment, scope.account_id, scope.agent_id, scope.user_id]


class _Where:
    """Builds `AND`-ed conditions with numbered parameters after the 4 scope parameters."""

    def __init__(self, scope: Scope) -> None:
        self.params: list[Any] = _params(scope)
        self.parts: list[str] = [_VISIBLE]

    def arg(self, value: Any) -> str:
        self.params.append(value)
        return f"${len(self.params)}"

    def add(self, condition: str) -> None:
        self.parts.append(condition)

    def filters(
        self,
        *,
        now: datetime,
        category: str | None = None,
        key_prefix: str | None = None,
        visibility: str | None = None,
        include_expired: bool = False,
    ) -> None:
        if category is not None:
            self.add(f"category = {self.arg(category)}")
        if key_prefix:
            self.add(f"starts_with(key, {self.arg(key_prefix)})")
        if visibility is not None:
            self.add(f"visibility = {self.arg(visibility)}")
        if not include_expired:
            self.add(_LIVE.format(now=self.arg(now)))

    @property
    def sql(self) -> str:
        return " AND ".join(self.parts)


class MemoryWriteTx:
    """Statements of one write transaction (`core.memory.store.MemoryWrites`; see
    `PostgresMemoryStore.writing`)."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn

    async def find_by_key(self, scope: Scope, key: str, visibility: str) -> StoredEntry | None:
        """The entry with `key` in one visibility scope (the agent's shared keys, or the private keys
        of `scope.user_id`), locked for update; expired entries included."""
        if visibility == "private":
            sql = f"{_SCOPE} AND visibility = 'private' AND user_id = $5 AND key = $4"
            params = [scope.environment, scope.account_id, scope.agent_id, key, scope.user_id]
        else:
            sql = f"{_SCOPE} AND visibility = 'shared' AND key = $4"
            params = [scope.environment, scope.account_id, scope.agent_id, key]
        row = await self.conn.fetchrow(
            f"SELECT {_COLUMNS} FROM memory_entries WHERE {sql} FOR UPDATE", *params
        )
        return None if row is None else _stored(row)

    async def get_visible(self, scope: Scope, entry_id: uuid.UUID) -> StoredEntry | None:
        """The entry `entry_id` when `scope` may see it, locked for update; expired entries included."""
        row = await self.conn.fetchrow(
            f"SELECT {_COLUMNS} FROM memory_entries WHERE {_VISIBLE} AND entry_id = $5 FOR UPDATE",
            *_params(scope),
            entry_id,
        )
        return None if row is None else _stored(row)

    async def counts(
        self, scope: Scope, category: str, author_user_id: str | None, now: datetime
    ) -> tuple[int, int]:
        """(live entries of the agent in `category`, live ones written by `author_user_id` in it)."""
        row = await self.conn.fetchrow(
            f"""SELECT count(*) AS agent_count,
                       count(*) FILTER (WHERE author_user_id = $5) AS user_count
                FROM memory_entries
                WHERE {_SCOPE} AND category = $4 AND (expires_at IS NULL OR expires_at > $6)""",
            scope.environment,
            scope.account_id,
            scope.agent_id,
            category,
            author_user_id,
            now,
        )
        assert row is not None
        return int(row["agent_count"]), int(row["user_count"])

    async def insert(self, entry: MemoryEntry) -> StoredEntry:
        row = await self.conn.fetchrow(
            f"""INSERT INTO memory_entries (entry_id, environment, account_id, agent_id, user_id,
                    author_user_id, key, content, category, visibility, importance, content_hash,
                    expires_at, recall_count, last_recalled_at, created_at, updated_at, source, version)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, 1)
                RETURNING {_COLUMNS}""",
            uuid.UUID(entry.entry_id),
            entry.environment,
            entry.account_id,
            entry.agent_id,
            entry.user_id,
            entry.author_user_id,
            entry.key,
            entry.content,
            entry.category,
            entry.visibility,
            entry.importance,
            entry.content_hash,
            entry.expires_at,
            entry.recall_count,
            entry.last_recalled_at,
            entry.created_at,
            entry.updated_at,
            _source(entry),
        )
        return _stored(row)

    async def update(self, entry: MemoryEntry) -> StoredEntry:
        """Write the mutable fields of `entry` (not the recall counters) and bump its version."""
        row = await self.conn.fetchrow(
            f"""UPDATE memory_entries SET user_id = $2, key = $3, content = $4, category = $5,
                    visibility = $6, importance = $7, content_hash = $8, expires_at = $9,
                    updated_at = $10, source = $11, version = version + 1
                WHERE entry_id = $1
                RETURNING {_COLUMNS}""",
            uuid.UUID(entry.entry_id),
            entry.user_id,
            entry.key,
            entry.content,
            entry.category,
            entry.visibility,
            entry.importance,
            entry.content_hash,
            entry.expires_at,
            entry.updated_at,
            _source(entry),
        )
        if row is None:
            raise LookupError(f"memory entry {entry.entry_id} vanished inside its write transaction")
        return _stored(row)

    async def delete(self, entry_id: str) -> None:
        await self.conn.execute("DELETE FROM memory_entries WHERE entry_id = $1", uuid.UUID(entry_id))

    async def publish(self, changes: Sequence[StoredEntry | MemoryEntry]) -> None:
        """Outbox rows, in order: an upsert for a `StoredEntry`, a tombstone for a deleted `MemoryEntry`."""
        rows: list[tuple[str, Any]] = []
        for change in changes:
            if isinstance(change, StoredEntry):
                e = change.entry
                rows.append(
                    (
                        entry_key(e.environment, e.account_id, e.entry_id),
                        change.event().model_dump(mode="json"),
                    )
                )
            else:
                rows.append((entry_key(change.environment, change.account_id, change.entry_id), None))
        if rows:
            await self.conn.executemany("INSERT INTO memory_outbox (record_key, value) VALUES ($1, $2)", rows)

    async def expire_due(self, now: datetime, limit: int) -> list[MemoryEntry]:
        """Delete up to `limit` entries with expires_at <= now; returns them."""
        rows = await self.conn.fetch(
            f"""DELETE FROM memory_entries WHERE entry_id IN (
                    SELECT entry_id FROM memory_entries WHERE expires_at <= $1
                    ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)
                RETURNING {_COLUMNS}""",
            now,
            limit,
        )
        return [_stored(row).entry for row in rows]

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
        """Lower importance by `step` (not below `floor`) of up to `limit` live entries in `categories`
        not recalled (else not created) within `idle` and not decayed within `spacing`."""
        rows = await self.conn.fetch(
            f"""UPDATE memory_entries
                SET importance = greatest($3::float8, round((importance - $4::float8)::numeric, 6)::float8),
                    decayed_at = $1, updated_at = $1, version = version + 1
                WHERE entry_id IN (
                    SELECT entry_id FROM memory_entries
                    WHERE category = ANY($2::text[]) AND importance > $3::float8
                      AND coalesce(last_recalled_at, created_at) <= $1::timestamptz - $5::interval
                      AND (decayed_at IS NULL OR decayed_at <= $1::timestamptz - $6::interval)
                      AND (expires_at IS NULL OR expires_at > $1)
                    ORDER BY entry_id LIMIT $7 FOR UPDATE SKIP LOCKED)
                RETURNING {_COLUMNS}""",
            now,
            list(categories),
            floor,
            step,
            idle,
            spacing,
            limit,
        )
        return [_stored(row) for row in rows]


class PostgresMemoryStore:
    """Memory entries in PostgreSQL (`core.memory.store.MemoryStore`; pool from
    `sinks.postgres.pool.create_pool`, schema migrated)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    @asynccontextmanager
    async def writing(self, environment: str, account_id: str, agent_id: str) -> AsyncIterator[MemoryWriteTx]:
        """One transaction holding the agent's write lock; commits when the block exits normally."""
        async with self._pool.acquire() as conn, conn.transaction():
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
                f"{AGENT_LOCK_PREFIX}{environment}/{account_id}/{agent_id}",
            )
            yield MemoryWriteTx(conn)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[MemoryWriteTx]:
        """One transaction without an agent lock (hygiene passes: they lock the rows they change)."""
        async with self._pool.acquire() as conn, conn.transaction():
            yield MemoryWriteTx(conn)

    # ---- reads -----------------------------------------------------------------------------------

    async def get(
        self, scope: Scope, entry_id: uuid.UUID, *, now: datetime, include_expired: bool
    ) -> StoredEntry | None:
        where = _Where(scope)
        where.add(f"entry_id = {where.arg(entry_id)}")
        where.filters(now=now, include_expired=include_expired)
        row = await self._pool.fetchrow(
            f"SELECT {_COLUMNS} FROM memory_entries WHERE {where.sql}", *where.params
        )
        return None if row is None else _stored(row)

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
        where = _Where(scope)
        where.filters(
            now=now,
            category=category,
            key_prefix=key_prefix,
            visibility=visibility,
            include_expired=include_expired,
        )
        if after is not None:
            where.add(f"(created_at, entry_id) < ({where.arg(after[0])}, {where.arg(after[1])})")
        rows = await self._pool.fetch(
            f"""SELECT {_COLUMNS} FROM memory_entries WHERE {where.sql}
                ORDER BY created_at DESC, entry_id DESC LIMIT {where.arg(limit)}""",
            *where.params,
        )
        return [_stored(row) for row in rows]

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
        where = _Where(scope)
        where.add(f"entry_id = ANY({where.arg(list(ids))}::uuid[])")
        where.add(_RECALLABLE)
        where.filters(now=now, category=category, key_prefix=key_prefix, include_expired=include_expired)
        rows = await self._pool.fetch(
            f"SELECT {_COLUMNS} FROM memory_entries WHERE {where.sql}", *where.params
        )
        return {row["entry_id"]: _stored(row) for row in rows}

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
        """Full-text matches of ANY of the query's terms (english stemming), best ts_rank first.

        The query is a bound parameter: `plainto_tsquery` parses it as plain text (no operators),
        and its AND-ed lexemes are turned into an OR (`' & '` -> `' | '` between quoted lexemes).
        """
        where = _Where(scope)
        q = where.arg(query)
        where.add(_RECALLABLE)
        where.filters(now=now, category=category, key_prefix=key_prefix)
        rows = await self._pool.fetch(
            f"""WITH q AS (SELECT
                    replace(plainto_tsquery('english', {q})::text, ''' & ''', ''' | ''')::tsquery AS tsq)
                SELECT {_COLUMNS}, ts_rank(search, q.tsq) AS rank
                FROM memory_entries, q
                WHERE {where.sql} AND numnode(q.tsq) > 0 AND search @@ q.tsq
                ORDER BY rank DESC, importance DESC, updated_at DESC, entry_id
                LIMIT {where.arg(limit)}""",
            *where.params,
        )
        return [(_stored(row), float(row["rank"])) for row in rows]

    async def pinned(
        self, scope: Scope, *, now: datetime, min_importance: float, limit: int
    ) -> list[StoredEntry]:
        """Live user_profile entries private to `scope.user_id` (never shared ones) with importance
        >= min_importance, by importance then recency; exact ties by entry_id descending, as
        `core.memory.pinning.select_pinned`."""
        where = _Where(scope)
        where.filters(now=now, category="user_profile", visibility="private")
        where.add(f"importance >= {where.arg(min_importance)}")
        rows = await self._pool.fetch(
            f"""SELECT {_COLUMNS} FROM memory_entries WHERE {where.sql}
                ORDER BY importance DESC, updated_at DESC, entry_id DESC LIMIT {where.arg(limit)}""",
            *where.params,
        )
        return [_stored(row) for row in rows]

    async def record_recall(self, scope: Scope, ids: Sequence[uuid.UUID], at: datetime) -> int:
        """recall_count + 1, last_recalled_at = at (never moved back) on the visible entries among ids."""
        result = await self._pool.execute(
            f"""UPDATE memory_entries SET recall_count = recall_count + 1,
                    last_recalled_at = greatest(last_recalled_at, $6::timestamptz)
                WHERE {_VISIBLE} AND entry_id = ANY($5::uuid[])""",
            *_params(scope),
            list(ids),
            at,
        )
        return int(result.split()[-1])

    async def outbox_size(self) -> int:
        """Outbox rows not yet confirmed on the topic."""
        return int(await self._pool.fetchval("SELECT count(*) FROM memory_outbox"))
