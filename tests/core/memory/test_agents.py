"""Capability bindings against real Postgres."""

from __future__ import annotations

import asyncpg
import pytest

from core.errors import InvalidInput
from core.memory.agents import AgentRef, AgentService, normalise_capabilities
from sinks.postgres.agents import PostgresAgents


def ref(agent: str = "bot", account: str = "acme", env: str = "test") -> AgentRef:
    return AgentRef(environment=env, account_id=account, agent_id=agent)


async def test_bind_and_read(pool: asyncpg.Pool) -> None:
    agents = AgentService(PostgresAgents(pool))
    assert await agents.capabilities(ref()) == set()
    assert not await agents.has_memory(ref())
    record = await agents.bind(ref(), ["Memory", "memory"])
    assert record.capabilities == frozenset({"memory"})
    assert await agents.has_memory(ref())
    assert not await agents.has_memory(ref(account="globex"))  # tenancy
    assert not await agents.has_memory(ref(env="prod"))
    assert not await agents.has_memory(ref(agent="bot2"))
    await agents.bind(ref(), [])  # unbind
    assert await agents.capabilities(ref()) == set()
    assert [a.agent_id for a in await agents.list("test", "acme")] == ["bot"]


@pytest.mark.parametrize("capabilities", [["memory", "shell"], ["memroy"], [1], "memory"])
async def test_unknown_capability_is_invalid_and_writes_nothing(
    pool: asyncpg.Pool, capabilities: object
) -> None:
    agents = AgentService(PostgresAgents(pool))
    with pytest.raises(InvalidInput) as info:
        await agents.bind(ref(), capabilities)  # type: ignore[arg-type]
    assert info.value.field == "capabilities"
    assert await agents.get(ref()) is None


async def test_invalid_ids(pool: asyncpg.Pool) -> None:
    agents = AgentService(PostgresAgents(pool))
    with pytest.raises(InvalidInput) as info:
        await agents.bind(ref(agent="bad agent"), ["memory"])
    assert info.value.field == "agent_id"
    with pytest.raises(InvalidInput):
        await agents.capabilities(ref(env="Prod!"))


def test_normalise() -> None:
    assert normalise_capabilities([" MEMORY "]) == frozenset({"memory"})
