"""Rows restored as an account export holds them (`memstream.ops.account_import`): a thread and an
agent's capability bindings inserted with their original timestamps. SQL only.

Both insert only when the key is free (`ON CONFLICT DO NOTHING`) and answer the row as stored now
with whether it was inserted: an existing row is never changed here (the importer compares it with
the file's and reports a difference as a conflict). The tables' NOTIFY triggers (migrations 0009
and 0012) tell every node's caches about an insert, as for any other write.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import asyncpg

from core.stores.agents import AgentRecord
from core.threads import Thread
from sinks.postgres.threads import thread_of


def _agent(row: Any) -> AgentRecord:
    return AgentRecord(
        environment=row["environment"],
        account_id=row["account_id"],
        agent_id=row["agent_id"],
        capabilities=frozenset(row["capabilities"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


_THREAD_COLUMNS = "environment, account_id, thread_id, agent_id, user_id, metadata, created_at, updated_at"
_AGENT_COLUMNS = "environment, account_id, agent_id, capabilities, created_at, updated_at"


class PostgresAccountRestore:
    """Thread and agent rows restored with their own timestamps (module doc)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def restore_thread(self, thread: Thread) -> tuple[Thread, bool]:
        """Insert `thread` as given unless its key exists; (the stored row, inserted)."""
        async with self._pool.acquire() as conn:
            row = await conn.fetchrow(
                f"""INSERT INTO threads ({_THREAD_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                    ON CONFLICT (environment, account_id, thread_id) DO NOTHING
                    RETURNING {_THREAD_COLUMNS}""",
                thread.environment,
                thread.account_id,
                thread.thread_id,
                thread.agent_id,
                thread.user_id,
                thread.metadata,
                thread.created_at,
                thread.updated_at,
            )
            if row is not None:
                return thread_of(row), True
            row = await conn.fetchrow(
                f"""SELECT {_THREAD_COLUMNS} FROM threads
                    WHERE environment = $1 AND account_id = $2 AND thread_id = $3""",
                thread.environment,
                thread.account_id,
                thread.thread_id,
            )
            return thread_of(row), False

    async def restore_agent(
        self,
        environment: str,
        account_id: str,
        agent_id: str,
        capabilities: Sequence[str],
        created_at: datetime,
        updated_at: datetime,
    ) -> tuple[AgentRecord, bool]:
        """Insert the agent's bindings as given unless it has a row; (the stored row, inserted)."""
        async with self._pool.acquire() as conn:
            row = await conn.fetchrow(
                f"""INSERT INTO agents ({_AGENT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6)
                    ON CONFLICT (environment, account_id, agent_id) DO NOTHING
                    RETURNING {_AGENT_COLUMNS}""",
                environment,
                account_id,
                agent_id,
                sorted(set(capabilities)),
                created_at,
                updated_at,
            )
            if row is not None:
                return _agent(row), True
            row = await conn.fetchrow(
                f"""SELECT {_AGENT_COLUMNS} FROM agents
                    WHERE environment = $1 AND account_id = $2 AND agent_id = $3""",
                environment,
                account_id,
                agent_id,
            )
            return _agent(row), False
