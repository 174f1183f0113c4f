"""The `agents` table (`PostgresAgents`, a `core.stores.agents.AgentStore`): one row per agent
with capability bindings (no row = no capabilities).

Every statement names the full key (environment, account_id, agent_id). The rules (which
capability names exist) live in `core.memory.agents`.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

import asyncpg

from core.stores.agents import AgentRecord

_KEY = "environment = $1 AND account_id = $2 AND agent_id = $3"
_COLUMNS = "environment, account_id, agent_id, capabilities, created_at, updated_at"


def _record(row: Any) -> AgentRecord:
    return AgentRecord(
        environment=row["environment"],
        account_id=row["account_id"],
        agent_id=row["agent_id"],
        capabilities=frozenset(row["capabilities"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


class PostgresAgents:
    """Capability bindings in PostgreSQL (`core.stores.agents.AgentStore`). `pool` is the caller's."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def upsert_capabilities(
        self, environment: str, account_id: str, agent_id: str, capabilities: Sequence[str]
    ) -> AgentRecord:
        """Set the agent's capabilities to exactly `capabilities` (creating the row when missing)."""
        row = await self._pool.fetchrow(
            f"""INSERT INTO agents (environment, account_id, agent_id, capabilities)
                VALUES ($1, $2, $3, $4)
                ON CONFLICT (environment, account_id, agent_id) DO UPDATE
                    SET capabilities = EXCLUDED.capabilities, updated_at = now()
                RETURNING {_COLUMNS}""",
            environment,
            account_id,
            agent_id,
            sorted(set(capabilities)),
        )
        return _record(row)

    async def get(self, environment: str, account_id: str, agent_id: str) -> AgentRecord | None:
        row = await self._pool.fetchrow(
            f"SELECT {_COLUMNS} FROM agents WHERE {_KEY}", environment, account_id, agent_id
        )
        return None if row is None else _record(row)

    async def list(self, environment: str, account_id: str) -> builtins.list[AgentRecord]:
        """The account's agents with a binding row, by agent_id."""
        rows = await self._pool.fetch(
            f"SELECT {_COLUMNS} FROM agents WHERE environment = $1 AND account_id = $2 ORDER BY agent_id",
            environment,
            account_id,
        )
        return [_record(row) for row in rows]
