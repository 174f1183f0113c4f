"""Agents' capability bindings through an in-process cache (`CachedAgents`, an `AgentStore`).

Every memory tool call checks the agent's bindings (`memory` bound or not), one Postgres query each.
`CachedAgents.get` answers from an `InvalidatedCache` (`core.invalidated_cache`) keyed by the full
key (environment, account_id, agent_id), keeping "no record" too. `upsert_capabilities` goes to
the store and then evicts the agent here, so a binding changed through this node shows at once;
one changed on another node shows once Postgres announces it (migration 0012 NOTIFYs every
insert, update and delete of an `agents` row: `invalidated(payload)`, a JSON array
`[environment, account_id, agent_id]`; anything else empties the cache), and after `ttl_s` at the
latest. While the feed is down every lookup reads the store. `list` always reads the store.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence

from core.invalidated_cache import InvalidatedCache
from core.stores.agents import AgentRecord, AgentStore

DEFAULT_TTL_S = 5.0

Key = tuple[str, str, str]


class CachedAgents:
    """See the module doc. `store` is the authority (Postgres)."""

    def __init__(
        self,
        store: AgentStore,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        cache: InvalidatedCache[Key, AgentRecord | None] | None = None,
    ) -> None:
        self.store = store
        self.ttl_s = ttl_s
        self.cache: InvalidatedCache[Key, AgentRecord | None] = (
            cache if cache is not None else InvalidatedCache()
        )

    # ---- the change feed ---------------------------------------------------------------------------

    def set_live(self, live: bool) -> None:
        self.cache.set_live(live)

    def invalidated(self, payload: str) -> None:
        """An agent's bindings changed in the store: `payload` is its key as a JSON array."""
        self.cache.notice(payload, 3, what="agent")

    # ---- AgentStore ---------------------------------------------------------------------------------

    async def upsert_capabilities(
        self, environment: str, account_id: str, agent_id: str, capabilities: Sequence[str]
    ) -> AgentRecord:
        try:
            return await self.store.upsert_capabilities(environment, account_id, agent_id, capabilities)
        finally:
            self.cache.evict((environment, account_id, agent_id))

    async def get(self, environment: str, account_id: str, agent_id: str) -> AgentRecord | None:
        return await self.cache.through(
            (environment, account_id, agent_id),
            lambda: self.store.get(environment, account_id, agent_id),
            ttl_s=self.ttl_s,
        )

    async def list(self, environment: str, account_id: str) -> builtins.list[AgentRecord]:
        return await self.store.list(environment, account_id)
