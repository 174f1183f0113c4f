"""The `user_erasures` table (migration 0015) behind `core.stores.erasures.ErasureRegister`.

SQL only. What it shares with the thread deletions' register (one incomplete erasure per user,
steps, completion) is `sinks.postgres.request_register.RequestTable`; the deletions an erasure
ran are its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import asyncpg

from core.stores.erasures import ErasureRecord
from sinks.postgres.request_register import RequestTable

_COLUMNS = "erasure_id, environment, account_id, user_id, requested_at, deletions, report, completed_at"


def _record(row: Any) -> ErasureRecord:
    return ErasureRecord(
        erasure_id=row["erasure_id"],
        environment=row["environment"],
        account_id=row["account_id"],
        user_id=row["user_id"],
        requested_at=row["requested_at"],
        deletions=tuple(int(d) for d in row["deletions"]),
        report=row["report"],
        completed_at=row["completed_at"],
    )


class PostgresErasures:
    """The register of user erasures in PostgreSQL (module doc)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self._table = RequestTable(
            pool,
            table="user_erasures",
            id_column="erasure_id",
            subject_column="user_id",
            columns=_COLUMNS,
            record=_record,
            what="user erasure",
        )

    async def open(self, environment: str, account_id: str, user_id: str) -> ErasureRecord:
        return await self._table.open((environment, account_id, user_id))

    async def latest(self, environment: str, account_id: str, user_id: str) -> ErasureRecord | None:
        return await self._table.latest((environment, account_id, user_id))

    async def get(self, erasure_id: int) -> ErasureRecord | None:
        return await self._table.get(erasure_id)

    async def add_deletion(self, erasure_id: int, deletion_id: int) -> ErasureRecord:
        row = await self._pool.fetchrow(
            f"""UPDATE user_erasures SET deletions = CASE WHEN $2 = ANY(deletions) THEN deletions
                    ELSE array_append(deletions, $2) END
                WHERE erasure_id = $1 RETURNING {_COLUMNS}""",
            erasure_id,
            deletion_id,
        )
        return self._table.found(row, erasure_id)

    async def record_step(self, erasure_id: int, step: str, report: Mapping[str, Any]) -> ErasureRecord:
        return await self._table.record_step(erasure_id, step, report)

    async def complete(self, erasure_id: int) -> ErasureRecord:
        return await self._table.complete(erasure_id)

    async def incomplete(self) -> list[ErasureRecord]:
        return await self._table.incomplete()

    async def completed(self, environment: str) -> list[ErasureRecord]:
        rows = await self._pool.fetch(
            f"""SELECT {_COLUMNS} FROM user_erasures WHERE environment = $1 AND completed_at IS NOT NULL
                ORDER BY erasure_id""",
            environment,
        )
        return [_record(row) for row in rows]
