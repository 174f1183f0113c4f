"""Agents' capability bindings: which tool groups an agent has.

An agent is identified by (environment, account_id, agent_id). Binding `memory` gives the agent
exactly the three Memory tools (`memory_store`, `memory_recall`, `memory_forget`; see
`core.memory.tools`). An agent without a binding row has no capabilities. Pinned facts are
loaded whether or not Memory is bound (pinning does not ask).

Capability names are case-insensitive (`Memory` == `memory`) and stored lower-case; an unknown
name raises `InvalidInput` naming it and the known ones, and nothing is written.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict

from core.errors import InvalidInput
from core.ids import require_environment, require_id
from core.memory.models import MEMORY_CAPABILITY
from core.stores.agents import AgentRecord, AgentStore

KNOWN_CAPABILITIES: frozenset[str] = frozenset({MEMORY_CAPABILITY})
MAX_CAPABILITIES = 32

__all__ = ["KNOWN_CAPABILITIES", "AgentRecord", "AgentRef", "AgentService", "normalise_capabilities"]


class AgentRef(BaseModel):
    """One agent: environment, account and agent id."""

    model_config = ConfigDict(frozen=True)

    environment: str
    account_id: str
    agent_id: str


def _check_ref(agent: AgentRef) -> None:
    require_id(agent.account_id, "account_id")
    require_id(agent.agent_id, "agent_id")
    require_environment(agent.environment)


def normalise_capabilities(capabilities: Iterable[object]) -> frozenset[str]:
    """Lower-cased, de-duplicated capability names; `InvalidInput` for an unknown or non-string one."""
    if isinstance(capabilities, str):
        raise InvalidInput("capabilities must be a list of names, not a string", field="capabilities")
    names: set[str] = set()
    for item in capabilities:
        if not isinstance(item, str):
            raise InvalidInput(f"capability names are strings, got {item!r}", field="capabilities")
        name = item.strip().lower()
        if name not in KNOWN_CAPABILITIES:
            raise InvalidInput(
                f"unknown capability {item!r}; known capabilities: {', '.join(sorted(KNOWN_CAPABILITIES))}",
                field="capabilities",
            )
        names.add(name)
    if len(names) > MAX_CAPABILITIES:
        raise InvalidInput(f"at most {MAX_CAPABILITIES} capabilities", field="capabilities")
    return frozenset(names)


class AgentService:
    """Capability bindings over an `AgentStore`."""

    def __init__(self, store: AgentStore) -> None:
        self._store = store

    async def bind(self, agent: AgentRef, capabilities: Iterable[object]) -> AgentRecord:
        """Set the agent's capabilities to exactly `capabilities` (an empty list unbinds all)."""
        _check_ref(agent)
        names = normalise_capabilities(capabilities)
        return await self._store.upsert_capabilities(
            agent.environment, agent.account_id, agent.agent_id, sorted(names)
        )

    async def get(self, agent: AgentRef) -> AgentRecord | None:
        """The agent's binding row, or None when it never had one."""
        _check_ref(agent)
        return await self._store.get(agent.environment, agent.account_id, agent.agent_id)

    async def capabilities(self, agent: AgentRef) -> set[str]:
        """The agent's capabilities (empty when it has no binding)."""
        record = await self.get(agent)
        return set() if record is None else set(record.capabilities)

    async def has_memory(self, agent: AgentRef) -> bool:
        """True when the agent has the Memory capability bound."""
        return MEMORY_CAPABILITY in await self.capabilities(agent)

    async def list(self, environment: str, account_id: str) -> builtins.list[AgentRecord]:
        """The account's agents that have a binding row, by agent_id."""
        _check_ref(AgentRef(environment=environment, account_id=account_id, agent_id="x"))
        return await self._store.list(environment, account_id)
