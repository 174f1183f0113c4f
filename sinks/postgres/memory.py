"""The `memory_entries` and `memory_outbox` tables (`PostgresMemoryStore`, a
`core.memory.store.MemoryStore`) behind `core.memory.service.MemoryService`.

This module is SQL only; the rules (screening, capacity, same-key, visibility choice) live in the
service. Every read names the scope (environment, account_id, agent_id) and the caller's user:
`shared` rows, plus `private` rows whose user_id is the caller's (a NULL user sees shared only).

Writes go through `PostgresMemoryStore.writing(...)`, which yields a `MemoryWriteTx`
(`sinks.postgres.memory_writes`, whose module doc has the write guarantees) inside one transaction
holding the agent's advisory lock.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import asyncpg

from core.memory.store import Scope, StoredEntry, UserRows
from sinks.postgres.memory_writes import ENTRY_COLUMNS, VISIBLE, MemoryWriteTx, entry_row, scope_params

_LIVE = "(expires_at IS NULL OR expires_at > {now})"
_RECALLABLE = "NOT (visibility = 'shared' AND category = 'user_profile')"
"""Recall never answers with a shared user_profile entry: a profile fact is about one user and is
private to them (`MemoryService` writes no other kind since issue 9). Rows written shared before
that (e.g. by the flush of a thread without a user) stay listable for operators to clean up."""

AGENT_LOCK_PREFIX = "memstream.memory/"


class _Where:
    """Builds `AND`-ed conditions with numbered parameters after the 4 scope parameters."""

    def __init__(self, scope: Scope) -> None:
        self.params: list[Any] = scope_params(scope)
        self.parts: list[str] = [VISIBLE]

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
            f"SELECT {ENTRY_COLUMNS} FROM memory_entries WHERE {where.sql}", *where.params
        )
        return None if row is None else entry_row(row)

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
            f"""SELECT {ENTRY_COLUMNS} FROM memory_entries WHERE {where.sql}
                ORDER BY created_at DESC, entry_id DESC LIMIT {where.arg(limit)}""",
            *where.params,
        )
        return [entry_row(row) for row in rows]

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
            f"SELECT {ENTRY_COLUMNS} FROM memory_entries WHERE {where.sql}", *where.params
        )
        return {row["entry_id"]: entry_row(row) for row in rows}

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
                SELECT {ENTRY_COLUMNS}, ts_rank(search, q.tsq) AS rank
                FROM memory_entries, q
                WHERE {where.sql} AND numnode(q.tsq) > 0 AND search @@ q.tsq
                ORDER BY rank DESC, importance DESC, updated_at DESC, entry_id
                LIMIT {where.arg(limit)}""",
            *where.params,
        )
        return [(entry_row(row), float(row["rank"])) for row in rows]

    async def pinned(
        self, scope: Scope, *, now: datetime, min_importance: float, limit: int
    ) -> list[StoredEntry]:
        """Live user_profile entries private to `scope.user_id` (never shared ones) with importance
        >= min_importance, by importance then recency; exact ties by entry_id descending, as
        `core.memory.pinned.select_pinned`."""
        where = _Where(scope)
        where.filters(now=now, category="user_profile", visibility="private")
        where.add(f"importance >= {where.arg(min_importance)}")
        rows = await self._pool.fetch(
            f"""SELECT {ENTRY_COLUMNS} FROM memory_entries WHERE {where.sql}
                ORDER BY importance DESC, updated_at DESC, entry_id DESC LIMIT {where.arg(limit)}""",
            *where.params,
        )
        return [entry_row(row) for row in rows]

    async def record_recall(self, scope: Scope, ids: Sequence[uuid.UUID], at: datetime) -> int:
        """recall_count + 1, last_recalled_at = at (never moved back) on the visible entries among ids.

        Committed without waiting for the WAL flush (`synchronous_commit = off` for this transaction
        only): the counters only steer decay, a crash may lose the last few hundred milliseconds of
        them but never leaves them inconsistent, and the recall does not wait for an fsync."""
        async with self._pool.acquire() as conn, conn.transaction():
            await conn.execute("SET LOCAL synchronous_commit = off")
            result = await conn.execute(
                f"""UPDATE memory_entries SET recall_count = recall_count + 1,
                        last_recalled_at = greatest(last_recalled_at, $6::timestamptz)
                    WHERE {VISIBLE} AND entry_id = ANY($5::uuid[])""",
                *scope_params(scope),
                list(ids),
                at,
            )
        return int(result.split()[-1])

    async def user_rows(
        self, environment: str, account_id: str, user_id: str, *, created_before: datetime | None = None
    ) -> UserRows:
        """What the account holds of the user (`core.memory.store.MemoryStore.user_rows`)."""
        scope = "environment = $1 AND account_id = $2 AND ($4::timestamptz IS NULL OR created_at < $4)"
        row = await self._pool.fetchrow(
            f"""SELECT
                  (SELECT count(*) FROM memory_entries WHERE {scope} AND user_id = $3) AS private,
                  (SELECT count(*) FROM memory_entries WHERE {scope} AND author_user_id = $3
                     AND user_id IS DISTINCT FROM $3) AS authored,
                  (SELECT count(*) FROM memory_quarantine WHERE {scope}
                     AND (user_id = $3 OR author_user_id = $3)) AS quarantined""",
            environment,
            account_id,
            user_id,
            created_before,
        )
        assert row is not None
        return UserRows(int(row["private"]), int(row["authored"]), int(row["quarantined"]))

    async def outbox_size(self) -> int:
        """Outbox rows not yet confirmed on the topic."""
        return int(await self._pool.fetchval("SELECT count(*) FROM memory_outbox"))
