"""The `thread_deletions` table (migration 0014) behind `core.stores.deletions.DeletionRegister`.

SQL only. What it shares with the user erasures' register (one incomplete deletion per thread,
steps, completion) is `sinks.postgres.request_register.RequestTable`; the journal's outcome and
the tombstones are its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import asyncpg

from core.config import Settings
from core.stores.deletions import (
    DeletionRecord,
    JournalDeletion,
    SeqRanges,
    ThreadScope,
    Tombstone,
    merge_ranges,
    merged_outcome,
)
from sinks.postgres.pool import create_pool
from sinks.postgres.request_register import RequestTable

_COLUMNS = (
    "deletion_id, environment, account_id, thread_id, agent_id, user_id, requested_at, up_to_seq, "
    "seqs, report, completed_at"
)


def _ranges(value: Any) -> SeqRanges:
    return tuple((int(lo), int(hi)) for lo, hi in value)


def _record(row: Any) -> DeletionRecord:
    return DeletionRecord(
        deletion_id=row["deletion_id"],
        environment=row["environment"],
        account_id=row["account_id"],
        thread_id=row["thread_id"],
        agent_id=row["agent_id"],
        user_id=row["user_id"],
        requested_at=row["requested_at"],
        up_to_seq=row["up_to_seq"],
        seqs=None if row["seqs"] is None else _ranges(row["seqs"]),
        report=row["report"],
        completed_at=row["completed_at"],
    )


class PostgresDeletions:
    """The register of thread deletions in PostgreSQL (module doc)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self._table = RequestTable(
            pool,
            table="thread_deletions",
            id_column="deletion_id",
            subject_column="thread_id",
            columns=_COLUMNS,
            record=_record,
            what="thread deletion",
        )

    async def open(
        self, environment: str, account_id: str, thread_id: str, agent_id: str | None, user_id: str | None
    ) -> DeletionRecord:
        return await self._table.open(
            (environment, account_id, thread_id), {"agent_id": agent_id, "user_id": user_id}
        )

    async def latest(self, environment: str, account_id: str, thread_id: str) -> DeletionRecord | None:
        return await self._table.latest((environment, account_id, thread_id))

    async def get(self, deletion_id: int) -> DeletionRecord | None:
        return await self._table.get(deletion_id)

    async def record_journal(self, deletion_id: int, deleted: JournalDeletion) -> DeletionRecord:
        async with self._pool.acquire() as conn, conn.transaction():
            row = await conn.fetchrow(
                f"SELECT {_COLUMNS} FROM thread_deletions WHERE deletion_id = $1 FOR UPDATE", deletion_id
            )
            record = self._table.found(row, deletion_id)
            merged = merged_outcome(record, deleted)
            row = await conn.fetchrow(
                f"""UPDATE thread_deletions SET up_to_seq = $2, seqs = $3::jsonb,
                        report = report || jsonb_build_object('journal', $4::jsonb)
                    WHERE deletion_id = $1 RETURNING {_COLUMNS}""",
                deletion_id,
                merged.up_to_seq,
                [list(r) for r in merged.seqs],
                {"messages": merged.messages, "up_to_seq": merged.up_to_seq},
            )
        return self._table.found(row, deletion_id)

    async def record_step(self, deletion_id: int, step: str, report: Mapping[str, Any]) -> DeletionRecord:
        return await self._table.record_step(deletion_id, step, report)

    async def complete(self, deletion_id: int) -> DeletionRecord:
        return await self._table.complete(deletion_id)

    async def incomplete(self) -> list[DeletionRecord]:
        return await self._table.incomplete()

    async def tombstones(self) -> list[Tombstone]:
        rows = await self._pool.fetch(
            """SELECT environment, account_id, thread_id, max(up_to_seq) AS up_to_seq
               FROM thread_deletions WHERE up_to_seq IS NOT NULL
               GROUP BY environment, account_id, thread_id"""
        )
        return [
            Tombstone(row["environment"], row["account_id"], row["thread_id"], row["up_to_seq"])
            for row in rows
        ]

    async def deleted_seqs(self) -> dict[ThreadScope, SeqRanges]:
        rows = await self._pool.fetch(
            "SELECT environment, account_id, thread_id, seqs FROM thread_deletions WHERE seqs IS NOT NULL"
        )
        merged: dict[ThreadScope, SeqRanges] = {}
        for row in rows:
            scope = (row["environment"], row["account_id"], row["thread_id"])
            merged[scope] = merge_ranges(merged.get(scope, ()), _ranges(row["seqs"]))
        return merged


class OwnPoolDeletions:
    """The register's tombstones read over a short-lived connection of its own (a
    `core.stores.deletions.TombstoneSource` for a process without a Postgres pool)."""

    def __init__(self, settings: Settings) -> None:
        self._dsn = settings.postgres

    async def tombstones(self) -> list[Tombstone]:
        pool = await create_pool(self._dsn, min_size=1, max_size=1)
        try:
            return await PostgresDeletions(pool).tombstones()
        finally:
            await pool.close()

    async def deleted_seqs(self) -> dict[ThreadScope, SeqRanges]:
        pool = await create_pool(self._dsn, min_size=1, max_size=1)
        try:
            return await PostgresDeletions(pool).deleted_seqs()
        finally:
            await pool.close()
