"""Where agents' capability bindings are kept (`AgentStore`): one record per agent with a
binding (no record = no capabilities). The adapter is `sinks.postgres.agents.PostgresAgents`; the
rules (which capability names exist) live in `core.memory.agents`.

Contract: every call names the full key (environment, account_id, agent_id), or the account for
`list`. Storage errors are the adapter's and propagate.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol


@dataclass(frozen=True)
class AgentRecord:
    environment: str
    account_id: str
    agent_id: str
    capabilities: frozenset[str]
    created_at: datetime
    updated_at: datetime


class AgentStore(Protocol):
    async def upsert_capabilities(
        self, environment: str, account_id: str, agent_id: str, capabilities: Sequence[str]
    ) -> AgentRecord:
        """Set the agent's capabilities to exactly `capabilities` (creating the record when
        missing; `created_at` is kept when it exists)."""
        ...

    async def get(self, environment: str, account_id: str, agent_id: str) -> AgentRecord | None:
        """The agent's record, or None when it never had one."""
        ...

    async def list(self, environment: str, account_id: str) -> builtins.list[AgentRecord]:
        """The account's agents with a record, by agent_id."""
        ...
