"""The agents table adapter."""

from __future__ import annotations

import asyncpg

from sinks.postgres.agents import PostgresAgents


async def test_upsert_replaces_capabilities_and_keeps_created_at(pool: asyncpg.Pool) -> None:
    agents = PostgresAgents(pool)
    first = await agents.upsert_capabilities("test", "acme", "bot", ["memory", "memory"])
    assert first.capabilities == frozenset({"memory"})
    second = await agents.upsert_capabilities("test", "acme", "bot", [])
    assert second.capabilities == frozenset() and second.created_at == first.created_at
    assert await agents.get("test", "acme", "nobody") is None
    assert await agents.get("test", "globex", "bot") is None
    await agents.upsert_capabilities("test", "globex", "bot", ["memory"])
    assert [a.account_id for a in await agents.list("test", "acme")] == ["acme"]
