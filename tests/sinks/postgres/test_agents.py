"""The agents table adapter."""

from __future__ import annotations

import asyncpg

from sinks.postgres.agents import get_agent, list_agents, upsert_capabilities


async def test_upsert_replaces_capabilities_and_keeps_created_at(pool: asyncpg.Pool) -> None:
    first = await upsert_capabilities(pool, "test", "acme", "bot", ["memory", "memory"])
    assert first.capabilities == frozenset({"memory"})
    second = await upsert_capabilities(pool, "test", "acme", "bot", [])
    assert second.capabilities == frozenset() and second.created_at == first.created_at
    assert await get_agent(pool, "test", "acme", "nobody") is None
    assert await get_agent(pool, "test", "globex", "bot") is None
    await upsert_capabilities(pool, "test", "globex", "bot", ["memory"])
    assert [a.account_id for a in await list_agents(pool, "test", "acme")] == ["acme"]
