"""The `threads` table behind `core.threads.ThreadStore`.

Every statement filters on the full key (environment, account_id, thread_id): there is no query
that could return another account's or another environment's thread.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

from core.threads import Thread

_COLUMNS = "environment, account_id, thread_id, agent_id, user_id, metadata, created_at, updated_at"
_KEY = "environment = $1 AND account_id = $2 AND thread_id = $3"


def thread_of(row: Any) -> Thread:
    """A `threads` row as a `Thread`."""
    return Thread(
        environment=row["environment"],
        account_id=row["account_id"],
        thread_id=row["thread_id"],
        agent_id=row["agent_id"],
        user_id=row["user_id"],
        metadata=row["metadata"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


class PostgresThreadStore:
    """Threads in PostgreSQL (pool from `sinks.postgres.pool.create_pool`, schema from `migrate`)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def get(self, environment: str, account_id: str, thread_id: str) -> Thread | None:
        row = await self._pool.fetchrow(
            f"SELECT {_COLUMNS} FROM threads WHERE {_KEY}", environment, account_id, thread_id
        )
        return None if row is None else thread_of(row)

    async def delete(self, environment: str, account_id: str, thread_id: str) -> bool:
        """Delete the row (its NOTIFY evicts the nodes' cached copies: migration 0009)."""
        status = await self._pool.execute(
            f"DELETE FROM threads WHERE {_KEY}", environment, account_id, thread_id
        )
        return bool(status == "DELETE 1")

    async def upsert(
        self,
        environment: str,
        account_id: str,
        thread_id: str,
        agent_id: str,
        user_id: str | None,
        metadata: dict[str, Any],
    ) -> tuple[Thread, bool]:
        async with self._pool.acquire() as conn:
            row = await conn.fetchrow(
                f"""INSERT INTO threads AS t (environment, account_id, thread_id, agent_id, user_id, metadata)
                    VALUES ($1, $2, $3, $4, $5, $6)
                    ON CONFLICT (environment, account_id, thread_id) DO UPDATE
                        SET metadata = EXCLUDED.metadata, updated_at = now()
                        WHERE t.agent_id = EXCLUDED.agent_id
                          AND t.user_id IS NOT DISTINCT FROM EXCLUDED.user_id
                    RETURNING {_COLUMNS}, (xmax = 0) AS inserted""",
                environment,
                account_id,
                thread_id,
                agent_id,
                user_id,
                metadata,
            )
            if row is not None:
                return thread_of(row), bool(row["inserted"])
            # The thread exists with another agent/user: nothing was written; report what is stored.
            existing = await conn.fetchrow(
                f"SELECT {_COLUMNS} FROM threads WHERE {_KEY}", environment, account_id, thread_id
            )
            return thread_of(existing), False

    @asynccontextmanager
    async def creating(
        self, environment: str, account_id: str, thread_id: str, agent_id: str, user_id: str | None
    ) -> AsyncIterator[Thread]:
        async with self._pool.acquire() as conn, conn.transaction():
            row = await conn.fetchrow(
                f"""INSERT INTO threads (environment, account_id, thread_id, agent_id, user_id)
                    VALUES ($1, $2, $3, $4, $5)
                    ON CONFLICT (environment, account_id, thread_id) DO NOTHING
                    RETURNING {_COLUMNS}""",
                environment,
                account_id,
                thread_id,
                agent_id,
                user_id,
            )
            if row is None:
                row = await conn.fetchrow(
                    f"SELECT {_COLUMNS} FROM threads WHERE {_KEY}", environment, account_id, thread_id
                )
            yield thread_of(row)

    async def list_threads(
        self,
        environment: str,
        account_id: str,
        *,
        agent_id: str | None = None,
        user_id: str | None = None,
        after: str | None = None,
        limit: int,
    ) -> list[Thread]:
        rows = await self._pool.fetch(
            f"""SELECT {_COLUMNS} FROM threads
                WHERE environment = $1 AND account_id = $2
                  AND ($3::text IS NULL OR agent_id = $3) AND ($4::text IS NULL OR user_id = $4)
                  AND ($5::text IS NULL OR thread_id > $5)
                ORDER BY thread_id LIMIT $6""",
            environment,
            account_id,
            agent_id,
            user_id,
            after,
            limit,
        )
        return [thread_of(row) for row in rows]

    async def agent_ids(self, environment: str, account_id: str) -> list[str]:
        rows = await self._pool.fetch(
            "SELECT DISTINCT agent_id FROM threads WHERE environment = $1 AND account_id = $2 "
            "ORDER BY agent_id",
            environment,
            account_id,
        )
        return [row["agent_id"] for row in rows]

    async def update_metadata(
        self,
        environment: str,
        account_id: str,
        thread_id: str,
        update: Callable[[dict[str, Any]], dict[str, Any]],
    ) -> Thread | None:
        async with self._pool.acquire() as conn, conn.transaction():
            current = await conn.fetchval(
                f"SELECT metadata FROM threads WHERE {_KEY} FOR UPDATE", environment, account_id, thread_id
            )
            if current is None:
                return None
            row = await conn.fetchrow(
                f"""UPDATE threads SET metadata = $4, updated_at = now() WHERE {_KEY}
                    RETURNING {_COLUMNS}""",
                environment,
                account_id,
                thread_id,
                update(current),
            )
            return thread_of(row)
