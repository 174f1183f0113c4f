"""The `user_erasures` table (migration 0015) behind `core.stores.erasures.ErasureRegister`.

SQL only. `open` relies on the partial unique index `user_erasures_open` (one incomplete erasure
per user): a second, concurrent `open` of the same user gets the same row.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import asyncpg

from core.stores.erasures import ErasureRecord

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

    async def open(self, environment: str, account_id: str, user_id: str) -> ErasureRecord:
        scope = (environment, account_id, user_id)
        row = await self._pool.fetchrow(
            f"""INSERT INTO user_erasures (environment, account_id, user_id) VALUES ($1, $2, $3)
                ON CONFLICT (environment, account_id, user_id) WHERE completed_at IS NULL DO NOTHING
                RETURNING {_COLUMNS}""",
            *scope,
        )
        if row is None:  # an incomplete one exists
            row = await self._pool.fetchrow(
                f"""SELECT {_COLUMNS} FROM user_erasures WHERE environment = $1 AND account_id = $2
                    AND user_id = $3 AND completed_at IS NULL""",
                *scope,
            )
            if row is None:  # completed in between: start a new one
                return await self.open(environment, account_id, user_id)
        return _record(row)

    async def latest(self, environment: str, account_id: str, user_id: str) -> ErasureRecord | None:
        row = await self._pool.fetchrow(
            f"""SELECT {_COLUMNS} FROM user_erasures WHERE environment = $1 AND account_id = $2
                AND user_id = $3 ORDER BY erasure_id DESC LIMIT 1""",
            environment,
            account_id,
            user_id,
        )
        return None if row is None else _record(row)

    async def get(self, erasure_id: int) -> ErasureRecord | None:
        row = await self._pool.fetchrow(
            f"SELECT {_COLUMNS} FROM user_erasures WHERE erasure_id = $1", erasure_id
        )
        return None if row is None else _record(row)

    async def add_deletion(self, erasure_id: int, deletion_id: int) -> ErasureRecord:
        row = await self._pool.fetchrow(
            f"""UPDATE user_erasures SET deletions = CASE WHEN $2 = ANY(deletions) THEN deletions
                    ELSE array_append(deletions, $2) END
                WHERE erasure_id = $1 RETURNING {_COLUMNS}""",
            erasure_id,
            deletion_id,
        )
        return self._found(row, erasure_id)

    async def record_step(self, erasure_id: int, step: str, report: Mapping[str, Any]) -> ErasureRecord:
        row = await self._pool.fetchrow(
            f"""UPDATE user_erasures SET report = report || jsonb_build_object($2::text, $3::jsonb)
                WHERE erasure_id = $1 RETURNING {_COLUMNS}""",
            erasure_id,
            step,
            dict(report),
        )
        return self._found(row, erasure_id)

    async def complete(self, erasure_id: int) -> ErasureRecord:
        row = await self._pool.fetchrow(
            f"""UPDATE user_erasures SET completed_at = COALESCE(completed_at, now())
                WHERE erasure_id = $1 RETURNING {_COLUMNS}""",
            erasure_id,
        )
        return self._found(row, erasure_id)

    async def incomplete(self) -> list[ErasureRecord]:
        rows = await self._pool.fetch(
            f"SELECT {_COLUMNS} FROM user_erasures WHERE completed_at IS NULL ORDER BY erasure_id"
        )
        return [_record(row) for row in rows]

    async def completed(self, environment: str) -> list[ErasureRecord]:
        rows = await self._pool.fetch(
            f"""SELECT {_COLUMNS} FROM user_erasures WHERE environment = $1 AND completed_at IS NOT NULL
                ORDER BY erasure_id""",
            environment,
        )
        return [_record(row) for row in rows]

    @staticmethod
    def _found(row: Any, erasure_id: int) -> ErasureRecord:
        if row is None:
            raise LookupError(f"no user erasure {erasure_id}")
        return _record(row)
