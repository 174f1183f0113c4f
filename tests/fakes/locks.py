"""`InMemoryLocks`: the leased `Locks` (`core.stores.locks`) in memory.

What the contract suite (`tests/core/stores/test_locks.py`) asserts of every lock store holds
here: a lock is held until released or until its lease runs out (on `time.monotonic()`, like a
Redis PX expiry); `release` and `extend` act only while the lease's token still holds the lock; a
lease lasts at least 1 ms. The state is public for tests: `held` maps a lock name to its token
and expiry instant.
"""

from __future__ import annotations

import secrets
import time

from core.stores.locks import Lease


def _ttl_ms(ttl_s: float) -> int:
    ttl_ms = int(ttl_s * 1000)
    if ttl_ms < 1:
        raise ValueError(f"a lease lasts at least 1 ms, not {ttl_s} s")
    return ttl_ms


class InMemoryLocks:
    """See the module doc."""

    def __init__(self) -> None:
        self.held: dict[str, tuple[str, float]] = {}

    async def acquire(self, name: str, ttl_s: float) -> Lease | None:
        ttl_ms = _ttl_ms(ttl_s)
        if self._token(name) is not None:
            return None
        token, expires_at = secrets.token_hex(16), time.monotonic() + ttl_ms / 1000
        self.held[name] = (token, expires_at)
        return Lease(name=name, key=f"lock/{name}", token=token, ttl_ms=ttl_ms, expires_at=expires_at)

    async def release(self, lease: Lease) -> bool:
        if self._token(lease.name) != lease.token:
            return False
        del self.held[lease.name]
        return True

    async def extend(self, lease: Lease, ttl_s: float | None = None) -> Lease | None:
        ttl_ms = _ttl_ms(ttl_s) if ttl_s is not None else lease.ttl_ms
        if self._token(lease.name) != lease.token:
            return None
        expires_at = time.monotonic() + ttl_ms / 1000
        self.held[lease.name] = (lease.token, expires_at)
        return Lease(name=lease.name, key=lease.key, token=lease.token, ttl_ms=ttl_ms, expires_at=expires_at)

    def _token(self, name: str) -> str | None:
        """The token holding `name` now (an expired lease holds nothing)."""
        held = self.held.get(name)
        if held is None or held[1] <= time.monotonic():
            self.held.pop(name, None)
            return None
        return held[0]
