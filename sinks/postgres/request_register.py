"""`RequestTable`: the SQL shared by the registers of long requests that are resumed until done -
thread deletions (`sinks.postgres.deletions`, table `thread_deletions`) and user erasures
(`sinks.postgres.erasures`, table `user_erasures`).

Such a table has a serial id column, a scope of (environment, account_id, <subject>), a `report`
JSON object with one key per completed step and a `completed_at` set once; a partial unique index
on the scope `WHERE completed_at IS NULL` allows one incomplete request per scope, so a second,
concurrent `open` of the same scope gets the same row. The table and column names are the
registers' constants, never input.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

import asyncpg

R = TypeVar("R")

Scope = tuple[str, str, str]
"""(environment, account_id, subject id)."""


class RequestTable(Generic[R]):
    """The rows of one register's table, read as records `R` by `record` (module doc)."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        *,
        table: str,
        id_column: str,
        subject_column: str,
        columns: str,
        record: Callable[[Any], R],
        what: str,
    ) -> None:
        self.pool = pool
        self.table = table
        self.id_column = id_column
        self.subject_column = subject_column
        self.columns = columns
        self.record = record
        self.what = what
        """What a row is, for errors (`thread deletion`)."""

    async def open(self, scope: Scope, extra: Mapping[str, Any] | None = None) -> R:
        """The scope's incomplete request, made with `extra` columns when there is none."""
        names = ["environment", "account_id", self.subject_column, *(extra or {})]
        values = [*scope, *(extra or {}).values()]
        placeholders = ", ".join(f"${i}" for i in range(1, len(values) + 1))
        row = await self.pool.fetchrow(
            f"""INSERT INTO {self.table} ({", ".join(names)}) VALUES ({placeholders})
                ON CONFLICT (environment, account_id, {self.subject_column}) WHERE completed_at IS NULL
                DO NOTHING RETURNING {self.columns}""",
            *values,
        )
        if row is None:  # an incomplete one exists
            row = await self.pool.fetchrow(
                f"""SELECT {self.columns} FROM {self.table} WHERE environment = $1 AND account_id = $2
                    AND {self.subject_column} = $3 AND completed_at IS NULL""",
                *scope,
            )
            if row is None:  # completed in between: start a new one
                return await self.open(scope, extra)
        return self.record(row)

    async def latest(self, scope: Scope) -> R | None:
        row = await self.pool.fetchrow(
            f"""SELECT {self.columns} FROM {self.table} WHERE environment = $1 AND account_id = $2
                AND {self.subject_column} = $3 ORDER BY {self.id_column} DESC LIMIT 1""",
            *scope,
        )
        return None if row is None else self.record(row)

    async def get(self, request_id: int) -> R | None:
        row = await self.pool.fetchrow(
            f"SELECT {self.columns} FROM {self.table} WHERE {self.id_column} = $1", request_id
        )
        return None if row is None else self.record(row)

    async def record_step(self, request_id: int, step: str, report: Mapping[str, Any]) -> R:
        row = await self.pool.fetchrow(
            f"""UPDATE {self.table} SET report = report || jsonb_build_object($2::text, $3::jsonb)
                WHERE {self.id_column} = $1 RETURNING {self.columns}""",
            request_id,
            step,
            dict(report),
        )
        return self.found(row, request_id)

    async def complete(self, request_id: int) -> R:
        row = await self.pool.fetchrow(
            f"""UPDATE {self.table} SET completed_at = COALESCE(completed_at, now())
                WHERE {self.id_column} = $1 RETURNING {self.columns}""",
            request_id,
        )
        return self.found(row, request_id)

    async def incomplete(self) -> list[R]:
        rows = await self.pool.fetch(
            f"SELECT {self.columns} FROM {self.table} WHERE completed_at IS NULL ORDER BY {self.id_column}"
        )
        return [self.record(row) for row in rows]

    def found(self, row: Any, request_id: int) -> R:
        """`row` as a record; LookupError when there is no such request."""
        if row is None:
            raise LookupError(f"no {self.what} {request_id}")
        return self.record(row)
