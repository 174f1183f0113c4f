"""API key lookups through an in-process cache (`CachedApiKeys`, an `ApiKeyStore`).

`find_by_hash` answers from an `InvalidatedCache` (`core.invalidated_cache`) keyed by the key's
hash: a found key for `ttl_s`, "no such key" for `missing_ttl_s` (shorter: it only blunts repeated
guesses of the same key, and a key created on another node is accepted once it passes). A key of
another environment is a miss. Every other call goes to the store; `revoke` and `insert` evict
locally once the store answered, so a key revoked through this store is refused at once.

Across nodes the cache relies on the store's change feed (module doc of `core.invalidated_cache`):
`invalidated(payload)` evicts the key whose hash is the payload (hex), `set_live` follows the
feed. Until the feed is live, and whenever it is down, every lookup reads the store. A revocation
on another node is therefore refused once its notice arrives, and in any case after `ttl_s`.
"""

from __future__ import annotations

import builtins
import logging

from core.invalidated_cache import InvalidatedCache
from core.stores.api_keys import ApiKeyRecord, ApiKeyStore

log = logging.getLogger("memstream.api_keys")

DEFAULT_TTL_S = 5.0
MISSING_TTL_S = 1.0


class CachedApiKeys:
    """See the module doc. `store` is the authority (Postgres)."""

    def __init__(
        self,
        store: ApiKeyStore,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        missing_ttl_s: float = MISSING_TTL_S,
        cache: InvalidatedCache[bytes, tuple[str, ApiKeyRecord | None]] | None = None,
    ) -> None:
        self.store = store
        self.ttl_s = ttl_s
        self.missing_ttl_s = min(missing_ttl_s, ttl_s)
        self.cache: InvalidatedCache[bytes, tuple[str, ApiKeyRecord | None]] = (
            cache if cache is not None else InvalidatedCache()
        )

    # ---- the change feed ---------------------------------------------------------------------------

    def set_live(self, live: bool) -> None:
        self.cache.set_live(live)

    def invalidated(self, payload: str) -> None:
        """A key changed in the store: `payload` is its hash in hex (anything else empties the cache)."""
        try:
            key_hash = bytes.fromhex(payload)
        except ValueError:
            log.warning("API key change notice %r is not a hash: forgetting every cached key", payload)
            self.cache.clear()
            return
        self.cache.evict(key_hash)

    # ---- ApiKeyStore ------------------------------------------------------------------------------

    async def find_by_hash(self, key_hash: bytes, *, environment: str) -> ApiKeyRecord | None:
        entry = self.cache.get(key_hash)
        if entry is not None and entry.value[0] == environment:
            return entry.value[1]
        ticket = self.cache.ticket()
        record = await self.store.find_by_hash(key_hash, environment=environment)
        self.cache.put(
            key_hash,
            (environment, record),
            ticket=ticket,
            ttl_s=self.missing_ttl_s if record is None else self.ttl_s,
        )
        return record

    async def insert(
        self,
        *,
        key_id: str,
        environment: str,
        account_id: str,
        key_hash: bytes,
        prefix: str,
        label: str,
        surface: str = "agent",
    ) -> ApiKeyRecord:
        try:
            return await self.store.insert(
                key_id=key_id,
                environment=environment,
                account_id=account_id,
                key_hash=key_hash,
                prefix=prefix,
                label=label,
                surface=surface,
            )
        finally:
            self.cache.evict(key_hash)  # a cached "no such key"

    async def list(self, *, environment: str, account_id: str) -> builtins.list[ApiKeyRecord]:
        return await self.store.list(environment=environment, account_id=account_id)

    async def revoke(self, *, environment: str, account_id: str, key_id: str) -> bool:
        try:
            return await self.store.revoke(environment=environment, account_id=account_id, key_id=key_id)
        finally:
            self.cache.clear()  # by key id: revocations are rare, forgetting all is simplest
