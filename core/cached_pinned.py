"""Pinned facts through an in-process cache (`CachedPinnedFacts`, a `PinnedFactsProvider`).

Every turn's context starts with the user's pinned facts (`core.memory.pinned`), read from Postgres:
one query per context. `CachedPinnedFacts` keeps each scope's pinned entries in an
`InvalidatedCache` (`core.invalidated_cache`) keyed by the full scope (environment, account_id,
agent_id, user_id), so a lookup only finds the facts of the caller's own scope.

Freshness:
- across nodes (and for the worker's pre-compaction flush and the hygiene pass) through the store's
  change feed: `invalidated(payload)` evicts the scope in the payload (a JSON array
  `[environment, account_id, agent_id, user_id]`, which migration 0010 NOTIFYs for every change of
  a private `user_profile` entry; anything else empties the cache), `set_live` follows the feed,
  and while the feed is down every lookup reads the store;
- on this node at once: `changed(entries)` evicts the scopes of entries this node just changed
  (`MemoryService`'s `on_change`, called after the commit), so a fact stored or forgotten here shows
  in the next context without waiting for the notice;
- in time: an entry is kept `ttl_s` at most, and never past the earliest `expires_at` of the facts
  it holds (an expired fact leaves the pinned set, which may let another one in).
"""

from __future__ import annotations

from collections.abc import Iterable

from core.invalidated_cache import InvalidatedCache
from core.memory.clock import Clock, utc_now
from core.memory.models import MemoryEntry, MemoryScope
from core.memory.pinned import MemoryPinnedFacts, PinnedFact, to_pinned_fact

DEFAULT_TTL_S = 5.0

Key = tuple[str, str, str, str | None]


def scope_key(scope: MemoryScope) -> Key:
    return (scope.environment, scope.account_id, scope.agent_id, scope.user_id)


class CachedPinnedFacts:
    """See the module doc. `source` reads the pinned entries from the store (Postgres)."""

    def __init__(
        self,
        source: MemoryPinnedFacts,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        clock: Clock = utc_now,
        cache: InvalidatedCache[Key, list[MemoryEntry]] | None = None,
    ) -> None:
        self.source = source
        self.ttl_s = ttl_s
        self._clock = clock
        self.cache: InvalidatedCache[Key, list[MemoryEntry]] = (
            cache if cache is not None else InvalidatedCache()
        )

    # ---- the change feed ---------------------------------------------------------------------------

    def set_live(self, live: bool) -> None:
        self.cache.set_live(live)

    def invalidated(self, payload: str) -> None:
        """A pinnable entry changed in the store: `payload` is its scope as a JSON array."""
        self.cache.notice(payload, 4, what="pinned-fact", last_may_be_null=True)

    def changed(self, entries: Iterable[MemoryEntry]) -> None:
        """Entries this node changed (committed): forget their scopes' pinned facts."""
        for entry in entries:
            self.cache.evict((entry.environment, entry.account_id, entry.agent_id, entry.user_id))

    # ---- PinnedFactsProvider ---------------------------------------------------------------------------

    async def pinned_entries(self, scope: MemoryScope) -> list[MemoryEntry]:
        key = scope_key(scope)
        cached = self.cache.get(key)
        if cached is not None:
            now = self._clock()
            if all(entry.expires_at is None or entry.expires_at > now for entry in cached.value):
                return cached.value
            self.cache.evict(key)
        return await self.cache.through(key, lambda: self.source.pinned_entries(scope), ttl_s=self.ttl_s)

    async def pinned(self, scope: MemoryScope) -> list[PinnedFact]:
        return [to_pinned_fact(entry) for entry in await self.pinned_entries(scope)]
