"""`core.cached_agents.CachedAgents` over the in-memory agent store: hits (a record and "none"),
TTL, the key is the full scope, bindings changed here show at once, notices evict, bypass while the
feed is down. Against Postgres and its feed: `tests/sinks/postgres/test_invalidation.py`."""

from __future__ import annotations

import json

import pytest

from core.cached_agents import CachedAgents
from core.invalidated_cache import InvalidatedCache
from core.stores.agents import AgentRecord
from tests.core.ticks import Ticks
from tests.fakes.agents import InMemoryAgents

pytestmark = pytest.mark.unit


class CountingAgents(InMemoryAgents):
    def __init__(self) -> None:
        super().__init__()
        self.gets = 0

    async def get(self, environment: str, account_id: str, agent_id: str) -> AgentRecord | None:
        self.gets += 1
        return await super().get(environment, account_id, agent_id)


@pytest.fixture
def ticks() -> Ticks:
    return Ticks()


@pytest.fixture
def store() -> CountingAgents:
    return CountingAgents()


@pytest.fixture
def cached(store: CountingAgents, ticks: Ticks) -> CachedAgents:
    agents = CachedAgents(store, ttl_s=5, cache=InvalidatedCache(clock=ticks))
    agents.set_live(True)
    return agents


def bound(record: AgentRecord | None) -> set[str]:
    return set(record.capabilities) if record is not None else set()


async def test_none_and_a_record_are_kept_until_the_ttl(
    cached: CachedAgents, store: CountingAgents, ticks: Ticks
) -> None:
    assert await cached.get("test", "acme", "bot") is None
    assert await cached.get("test", "acme", "bot") is None
    assert store.gets == 1
    await store.upsert_capabilities("test", "acme", "bot", ["memory"])  # elsewhere, not announced
    assert await cached.get("test", "acme", "bot") is None
    ticks.now = 5.1
    assert bound(await cached.get("test", "acme", "bot")) == {"memory"}


async def test_bindings_changed_here_show_at_once_and_only_for_that_agent(
    cached: CachedAgents, store: CountingAgents
) -> None:
    assert await cached.get("test", "acme", "bot") is None
    await cached.upsert_capabilities("test", "acme", "bot", ["memory"])
    assert bound(await cached.get("test", "acme", "bot")) == {"memory"}
    for key in [("test", "globex", "bot"), ("prod", "acme", "bot"), ("test", "acme", "other")]:
        assert await cached.get(*key) is None
    await cached.upsert_capabilities("test", "acme", "bot", [])
    assert bound(await cached.get("test", "acme", "bot")) == set()


async def test_a_notice_evicts_its_agent(cached: CachedAgents, store: CountingAgents) -> None:
    await cached.get("test", "acme", "bot")
    await cached.get("test", "acme", "other")
    await store.upsert_capabilities("test", "acme", "bot", ["memory"])
    cached.invalidated(json.dumps(["test", "acme", "bot"]))
    assert bound(await cached.get("test", "acme", "bot")) == {"memory"}
    await cached.get("test", "acme", "other")
    assert store.gets == 3
    cached.invalidated("*")
    await cached.get("test", "acme", "other")
    assert store.gets == 4


async def test_the_store_answers_while_the_feed_is_down(cached: CachedAgents, store: CountingAgents) -> None:
    cached.set_live(False)
    await cached.get("test", "acme", "bot")
    await cached.get("test", "acme", "bot")
    assert store.gets == 2
