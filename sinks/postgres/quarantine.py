"""The `memory_quarantine` table (`PostgresQuarantineStore`, a `core.memory.quarantine.QuarantineStore`)
behind retroactive screening (`core.memory.rescreen`). SQL only.

A quarantine is a move: the entry's row is copied into `memory_quarantine` (with the reason, rule,
field and detail) and deleted from `memory_entries` in the caller's transaction, which also writes
the tombstone (`MemoryWriteTx.publish`); the DELETE fires `pinned_notify` (migration 0010), so the
nodes' pinned-fact caches forget it. A release inserts the row back (version + 1, same NOTIFY) and
stamps `released_at`; quarantine rows are never deleted.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import asyncpg

from core.memory.quarantine import QuarantineRecord
from core.memory.store import StoredEntry
from sinks.postgres.memory import AGENT_LOCK_PREFIX
from sinks.postgres.memory_writes import ENTRY_COLUMNS, MemoryWriteTx, entry_row

_RECORD_COLUMNS = f"{ENTRY_COLUMNS}, decayed_at, reason, rule, field, detail, quarantined_at, released_at"
_COPIED = (
    "entry_id, environment, account_id, agent_id, user_id, author_user_id, key, content, category, "
    "visibility, importance, content_hash, expires_at, recall_count, last_recalled_at, decayed_at, "
    "created_at, updated_at, source"
)
"""The columns of an entry copied both ways (`version` is set apart)."""


def _record(row: Any) -> QuarantineRecord:
    return QuarantineRecord(
        stored=entry_row(row),
        reason=row["reason"],
        rule=row["rule"],
        field=row["field"],
        detail=row["detail"],
        quarantined_at=row["quarantined_at"],
        released_at=row["released_at"],
    )


def _scope(environment: str, account_id: str | None, after: uuid.UUID | None) -> tuple[str, list[Any]]:
    """Conditions (and parameters $1..) of an environment, an optional account and a keyset start."""
    params: list[Any] = [environment]
    parts = ["environment = $1"]
    if account_id is not None:
        params.append(account_id)
        parts.append(f"account_id = ${len(params)}")
    if after is not None:
        params.append(after)
        parts.append(f"entry_id > ${len(params)}")
    return " AND ".join(parts), params


class QuarantineTx(MemoryWriteTx):
    """`MemoryWriteTx` plus the quarantine statements (`core.memory.quarantine.QuarantineWrites`)."""

    async def lock(self, entry_id: uuid.UUID) -> StoredEntry | None:
        row = await self.conn.fetchrow(
            f"SELECT {ENTRY_COLUMNS} FROM memory_entries WHERE entry_id = $1 FOR UPDATE", entry_id
        )
        return None if row is None else entry_row(row)

    async def quarantine(self, record: QuarantineRecord) -> None:
        """Copy the entry's row (as stored now) into `memory_quarantine` and delete it."""
        moved = await self.conn.fetchval(
            f"""WITH gone AS (DELETE FROM memory_entries WHERE entry_id = $1 RETURNING *)
                INSERT INTO memory_quarantine
                    ({_COPIED}, version, reason, rule, field, detail, quarantined_at)
                SELECT {_COPIED}, version, $2, $3, $4, $5, $6 FROM gone
                RETURNING quarantine_id""",
            uuid.UUID(record.stored.entry.entry_id),
            record.reason,
            record.rule,
            record.field,
            record.detail,
            record.quarantined_at,
        )
        if moved is None:
            raise LookupError(
                f"memory entry {record.stored.entry.entry_id} vanished inside its write transaction"
            )

    async def open_record(self, environment: str, entry_id: uuid.UUID) -> QuarantineRecord | None:
        row = await self.conn.fetchrow(
            f"""SELECT {_RECORD_COLUMNS} FROM memory_quarantine
                WHERE environment = $1 AND entry_id = $2 AND released_at IS NULL FOR UPDATE""",
            environment,
            entry_id,
        )
        return None if row is None else _record(row)

    async def restore(self, record: QuarantineRecord, at: datetime) -> StoredEntry:
        """Insert the open record's entry back (version + 1) and mark the record released."""
        row = await self.conn.fetchrow(
            f"""WITH released AS (
                    UPDATE memory_quarantine SET released_at = $2
                    WHERE entry_id = $1 AND released_at IS NULL RETURNING *)
                INSERT INTO memory_entries ({_COPIED}, version)
                SELECT {_COPIED}, version + 1 FROM released
                RETURNING {ENTRY_COLUMNS}""",
            uuid.UUID(record.stored.entry.entry_id),
            at,
        )
        if row is None:
            raise LookupError(f"quarantined entry {record.stored.entry.entry_id} was released meanwhile")
        return entry_row(row)


class PostgresQuarantineStore:
    """Quarantined entries in PostgreSQL (`core.memory.quarantine.QuarantineStore`; pool from
    `sinks.postgres.pool.create_pool`, schema migrated)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    @asynccontextmanager
    async def writing(self, environment: str, account_id: str, agent_id: str) -> AsyncIterator[QuarantineTx]:
        """One transaction holding the agent's write lock (the lock of `PostgresMemoryStore.writing`)."""
        async with self._pool.acquire() as conn, conn.transaction():
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
                f"{AGENT_LOCK_PREFIX}{environment}/{account_id}/{agent_id}",
            )
            yield QuarantineTx(conn)

    async def count(self, environment: str, account_id: str | None, *, after: uuid.UUID | None) -> int:
        where, params = _scope(environment, account_id, after)
        return int(await self._pool.fetchval(f"SELECT count(*) FROM memory_entries WHERE {where}", *params))

    async def scan(
        self, environment: str, account_id: str | None, *, after: uuid.UUID | None, limit: int
    ) -> list[StoredEntry]:
        where, params = _scope(environment, account_id, after)
        rows = await self._pool.fetch(
            f"SELECT {ENTRY_COLUMNS} FROM memory_entries WHERE {where} ORDER BY entry_id LIMIT {int(limit)}",
            *params,
        )
        return [entry_row(row) for row in rows]

    async def open_records(
        self, environment: str, account_id: str | None, *, after: uuid.UUID | None, limit: int
    ) -> list[QuarantineRecord]:
        where, params = _scope(environment, account_id, after)
        rows = await self._pool.fetch(
            f"""SELECT {_RECORD_COLUMNS} FROM memory_quarantine WHERE {where} AND released_at IS NULL
                ORDER BY entry_id LIMIT {int(limit)}""",
            *params,
        )
        return [_record(row) for row in rows]

    async def find_open(self, environment: str, entry_id: uuid.UUID) -> QuarantineRecord | None:
        row = await self._pool.fetchrow(
            f"""SELECT {_RECORD_COLUMNS} FROM memory_quarantine
                WHERE environment = $1 AND entry_id = $2 AND released_at IS NULL""",
            environment,
            entry_id,
        )
        return None if row is None else _record(row)

    async def released(
        self, environment: str, entry_ids: Sequence[uuid.UUID]
    ) -> dict[uuid.UUID, QuarantineRecord]:
        rows = await self._pool.fetch(
            f"""SELECT DISTINCT ON (entry_id) {_RECORD_COLUMNS} FROM memory_quarantine
                WHERE environment = $1 AND entry_id = ANY($2::uuid[]) AND released_at IS NOT NULL
                ORDER BY entry_id, released_at DESC""",
            environment,
            list(entry_ids),
        )
        return {row["entry_id"]: _record(row) for row in rows}
