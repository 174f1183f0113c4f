"""Thread lookups through an in-process cache (`CachedThreads`, a `core.threads.ThreadStore`).

`get` answers from an `InvalidatedCache` (`core.invalidated_cache`) keyed by the full scope
(environment, account_id, thread_id), so a lookup only ever finds a thread of the caller's own
environment and account; a thread that does not exist is not cached. Every write (`upsert`,
`creating`, `update_metadata`) goes to the store and then evicts the thread locally, so a change
made through this store shows at once (a thread being created is only cached once committed and
read again).

Across nodes the cache relies on the store's change feed (module doc of `core.invalidated_cache`):
`invalidated(payload)` evicts the thread whose scope is the payload (a JSON array
`[environment, account_id, thread_id]`; anything else empties the cache), `set_live` follows the
feed. Until the feed is live, and whenever it is down, every lookup reads the store. A metadata
change on another node (the context window) therefore shows once its notice arrives, and in any
case after `ttl_s`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from core.invalidated_cache import InvalidatedCache
from core.threads import Thread, ThreadStore

DEFAULT_TTL_S = 5.0

Scope = tuple[str, str, str]


class CachedThreads:
    """See the module doc. `store` is the authority (Postgres)."""

    def __init__(
        self,
        store: ThreadStore,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        cache: InvalidatedCache[Scope, Thread] | None = None,
    ) -> None:
        self.store = store
        self.ttl_s = ttl_s
        self.cache: InvalidatedCache[Scope, Thread] = cache if cache is not None else InvalidatedCache()

    # ---- the change feed ---------------------------------------------------------------------------

    def set_live(self, live: bool) -> None:
        self.cache.set_live(live)

    def invalidated(self, payload: str) -> None:
        """A thread changed in the store: `payload` is its scope as a JSON array."""
        self.cache.notice(payload, 3, what="thread")

    # ---- ThreadStore ------------------------------------------------------------------------------

    async def get(self, environment: str, account_id: str, thread_id: str) -> Thread | None:
        scope = (environment, account_id, thread_id)
        entry = self.cache.get(scope)
        if entry is not None:
            return entry.value
        ticket = self.cache.ticket()
        thread = await self.store.get(environment, account_id, thread_id)
        if thread is not None:
            self.cache.put(scope, thread, ticket=ticket, ttl_s=self.ttl_s)
        return thread

    async def list_threads(
        self,
        environment: str,
        account_id: str,
        *,
        agent_id: str | None = None,
        user_id: str | None = None,
        after: str | None = None,
        limit: int,
    ) -> list[Thread]:
        """Always from the store (pages are not cached)."""
        return await self.store.list_threads(
            environment, account_id, agent_id=agent_id, user_id=user_id, after=after, limit=limit
        )

    async def agent_ids(self, environment: str, account_id: str) -> list[str]:
        return await self.store.agent_ids(environment, account_id)

    async def upsert(
        self,
        environment: str,
        account_id: str,
        thread_id: str,
        agent_id: str,
        user_id: str | None,
        metadata: dict[str, Any],
    ) -> tuple[Thread, bool]:
        try:
            return await self.store.upsert(environment, account_id, thread_id, agent_id, user_id, metadata)
        finally:
            self.cache.evict((environment, account_id, thread_id))

    @asynccontextmanager
    async def creating(
        self, environment: str, account_id: str, thread_id: str, agent_id: str, user_id: str | None
    ) -> AsyncIterator[Thread]:
        try:
            async with self.store.creating(environment, account_id, thread_id, agent_id, user_id) as thread:
                yield thread
        finally:
            self.cache.evict((environment, account_id, thread_id))

    async def delete(self, environment: str, account_id: str, thread_id: str) -> bool:
        try:
            return await self.store.delete(environment, account_id, thread_id)
        finally:
            self.cache.evict((environment, account_id, thread_id))

    async def update_metadata(
        self,
        environment: str,
        account_id: str,
        thread_id: str,
        update: Callable[[dict[str, Any]], dict[str, Any]],
    ) -> Thread | None:
        try:
            return await self.store.update_metadata(environment, account_id, thread_id, update)
        finally:
            self.cache.evict((environment, account_id, thread_id))
