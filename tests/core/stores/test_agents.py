"""The agent store's contract (`core.stores.agents.AgentStore`), on every store: the in-memory
fake and Postgres. Capabilities replaced exactly, `created_at` kept, records per full key."""

from __future__ import annotations

import asyncio

import pytest

from core.stores.agents import AgentStore
from sinks.postgres.agents import PostgresAgents
from tests.fakes.agents import InMemoryAgents


@pytest.fixture(params=["memory", pytest.param("postgres", marks=pytest.mark.engine)])
def agents(request: pytest.FixtureRequest) -> AgentStore:
    """The store under test, empty."""
    if request.param == "memory":
        return InMemoryAgents()
    return PostgresAgents(request.getfixturevalue("pool"))


async def test_upsert_replaces_capabilities_and_keeps_created_at(agents: AgentStore) -> None:
    assert await agents.get("test", "acme", "bot") is None
    first = await agents.upsert_capabilities("test", "acme", "bot", ["memory", "memory"])
    assert first.capabilities == frozenset({"memory"})
    assert (first.environment, first.account_id, first.agent_id) == ("test", "acme", "bot")
    assert first.updated_at == first.created_at
    await asyncio.sleep(0.002)
    second = await agents.upsert_capabilities("test", "acme", "bot", [])
    assert second.capabilities == frozenset() and second.created_at == first.created_at
    assert second.updated_at > first.updated_at
    assert await agents.get("test", "acme", "bot") == second


async def test_records_are_per_environment_account_and_agent(agents: AgentStore) -> None:
    await agents.upsert_capabilities("test", "acme", "bot", ["memory"])
    assert await agents.get("test", "acme", "nobody") is None
    assert await agents.get("test", "globex", "bot") is None
    assert await agents.get("prod", "acme", "bot") is None
    await agents.upsert_capabilities("test", "globex", "bot", ["memory"])
    await agents.upsert_capabilities("test", "acme", "alpha", [])
    assert [a.account_id for a in await agents.list("test", "acme")] == ["acme", "acme"]
    assert [a.agent_id for a in await agents.list("test", "acme")] == ["alpha", "bot"]
    assert await agents.list("prod", "acme") == []
