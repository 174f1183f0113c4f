"""The statements of one write transaction on `memory_entries` and `memory_outbox` (`MemoryWriteTx`,
a `core.memory.store.MemoryWrites`), and the row mapping the reads of `sinks.postgres.memory` share.

A `MemoryWriteTx` runs inside a transaction opened by `PostgresMemoryStore.writing(...)` (holding
the agent's advisory lock, so capacity counts and same-key checks are not raced by concurrent
writers of the same agent) or `transaction()`. `MemoryWriteTx.publish` adds the outbox row of a
change in that same transaction: the entry change and its `memory.entries` record commit or roll
back together. Rows are locked (`FOR UPDATE`) before they change, and each change bumps `version`
in SQL, so concurrent writers (hygiene passes included) never reuse a version, and the outbox order
of one entry is its commit order.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from core.memory.models import MemoryEntry, Provenance, entry_key
from core.memory.store import ErasedUser, Scope, StoredEntry

ENTRY_COLUMNS = (
    "entry_id, environment, account_id, agent_id, user_id, author_user_id, key, content, category, "
    "visibility, importance, content_hash, expires_at, recall_count, last_recalled_at, created_at, "
    "updated_at, source, version"
)
SCOPE = "environment = $1 AND account_id = $2 AND agent_id = $3"
VISIBLE = f"{SCOPE} AND (visibility = 'shared' OR user_id = $4)"


def entry_row(row: Any) -> StoredEntry:
    """A `memory_entries` row (all of `ENTRY_COLUMNS`) as a `StoredEntry`."""
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


def scope_params(scope: Scope) -> list[Any]:
    """The 4 scope parameters of `VISIBLE` ($1..$4)."""
    return [scope.environment, scope.account_id, scope.agent_id, scope.user_id]


class MemoryWriteTx:
    """Statements of one write transaction (`core.memory.store.MemoryWrites`; see
    `PostgresMemoryStore.writing`)."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn

    async def find_by_key(self, scope: Scope, key: str, visibility: str) -> StoredEntry | None:
        """The entry with `key` in one visibility scope (the agent's shared keys, or the private keys
        of `scope.user_id`), locked for update; expired entries included."""
        if visibility == "private":
            sql = f"{SCOPE} AND visibility = 'private' AND user_id = $5 AND key = $4"
            params = [scope.environment, scope.account_id, scope.agent_id, key, scope.user_id]
        else:
            sql = f"{SCOPE} AND visibility = 'shared' AND key = $4"
            params = [scope.environment, scope.account_id, scope.agent_id, key]
        row = await self.conn.fetchrow(
            f"SELECT {ENTRY_COLUMNS} FROM memory_entries WHERE {sql} FOR UPDATE", *params
        )
        return None if row is None else entry_row(row)

    async def get_visible(self, scope: Scope, entry_id: uuid.UUID) -> StoredEntry | None:
        """The entry `entry_id` when `scope` may see it, locked for update; expired entries included."""
        row = await self.conn.fetchrow(
            f"SELECT {ENTRY_COLUMNS} FROM memory_entries WHERE {VISIBLE} AND entry_id = $5 FOR UPDATE",
            *scope_params(scope),
            entry_id,
        )
        return None if row is None else entry_row(row)

    async def counts(
        self, scope: Scope, category: str, author_user_id: str | None, now: datetime
    ) -> tuple[int, int]:
        """(live entries of the agent in `category`, live ones written by `author_user_id` in it)."""
        row = await self.conn.fetchrow(
            f"""SELECT count(*) AS agent_count,
                       count(*) FILTER (WHERE author_user_id = $5) AS user_count
                FROM memory_entries
                WHERE {SCOPE} AND category = $4 AND (expires_at IS NULL OR expires_at > $6)""",
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
                RETURNING {ENTRY_COLUMNS}""",
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
        return entry_row(row)

    async def update(self, entry: MemoryEntry) -> StoredEntry:
        """Write the mutable fields of `entry` (not the recall counters) and bump its version."""
        row = await self.conn.fetchrow(
            f"""UPDATE memory_entries SET user_id = $2, key = $3, content = $4, category = $5,
                    visibility = $6, importance = $7, content_hash = $8, expires_at = $9,
                    updated_at = $10, source = $11, version = version + 1
                WHERE entry_id = $1
                RETURNING {ENTRY_COLUMNS}""",
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
        return entry_row(row)

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
                RETURNING {ENTRY_COLUMNS}""",
            now,
            limit,
        )
        return [entry_row(row).entry for row in rows]

    async def delete_from_thread(
        self, environment: str, account_id: str, thread_id: str
    ) -> tuple[list[MemoryEntry], int]:
        scope = (environment, account_id, thread_id)
        where = "environment = $1 AND account_id = $2 AND source->>'thread_id' = $3"
        rows = await self.conn.fetch(
            f"DELETE FROM memory_entries WHERE {where} RETURNING {ENTRY_COLUMNS}", *scope
        )
        status = await self.conn.execute(f"DELETE FROM memory_quarantine WHERE {where}", *scope)
        return [entry_row(row).entry for row in rows], int(status.split()[-1])

    async def erase_user(self, environment: str, account_id: str, user_id: str) -> ErasedUser:
        """The user's private entries and quarantine rows deleted, the user taken off as author of
        the others (`core.memory.store.MemoryWrites.erase_user`), rows locked by the statements."""
        scope = (environment, account_id, user_id)
        where = "environment = $1 AND account_id = $2"
        deleted = await self.conn.fetch(
            f"DELETE FROM memory_entries WHERE {where} AND user_id = $3 RETURNING {ENTRY_COLUMNS}", *scope
        )
        unlinked = await self.conn.fetch(
            f"""UPDATE memory_entries SET author_user_id = NULL, version = version + 1
                WHERE {where} AND author_user_id = $3 RETURNING {ENTRY_COLUMNS}""",
            *scope,
        )
        gone = await self.conn.execute(
            f"DELETE FROM memory_quarantine WHERE {where} AND user_id = $3", *scope
        )
        kept = await self.conn.execute(
            f"UPDATE memory_quarantine SET author_user_id = NULL WHERE {where} AND author_user_id = $3",
            *scope,
        )
        return ErasedUser(
            deleted=[entry_row(row).entry for row in deleted],
            unlinked=[entry_row(row) for row in unlinked],
            quarantine_deleted=int(gone.split()[-1]),
            quarantine_unlinked=int(kept.split()[-1]),
        )

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
                RETURNING {ENTRY_COLUMNS}""",
            now,
            list(categories),
            floor,
            step,
            idle,
            spacing,
            limit,
        )
        return [entry_row(row) for row in rows]
