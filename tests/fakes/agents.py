"""`InMemoryAgents`: the `AgentStore` (`core.stores.agents`) in memory.

What the contract suite (`tests/core/stores/test_agents.py`) asserts of every store holds here: a
record per (environment, account, agent), its capabilities replaced exactly (duplicates
collapse), `created_at` kept and `updated_at` moved on update, `list` by agent id. `clock` gives
the times (default: now, UTC). The state is public for tests: `records`.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from core.stores.agents import AgentRecord


class InMemoryAgents:
    """See the module doc."""

    def __init__(self, clock: Callable[[], datetime] | None = None) -> None:
        self.records: dict[tuple[str, str, str], AgentRecord] = {}
        self.clock = clock or (lambda: datetime.now(UTC))

    async def upsert_capabilities(
        self, environment: str, account_id: str, agent_id: str, capabilities: Sequence[str]
    ) -> AgentRecord:
        key, now = (environment, account_id, agent_id), self.clock()
        existing = self.records.get(key)
        record = AgentRecord(
            environment,
            account_id,
            agent_id,
            frozenset(capabilities),
            created_at=existing.created_at if existing is not None else now,
            updated_at=now,
        )
        self.records[key] = record
        return record

    async def get(self, environment: str, account_id: str, agent_id: str) -> AgentRecord | None:
        return self.records.get((environment, account_id, agent_id))

    async def list(self, environment: str, account_id: str) -> builtins.list[AgentRecord]:
        mine = [r for (e, a, _), r in self.records.items() if (e, a) == (environment, account_id)]
        return sorted(mine, key=lambda r: r.agent_id)
