"""Leased locks in Redis (`RedisLocks`, a `core.stores.locks.Locks`), e.g. one summarizer per
thread at a time.

`acquire(name, ttl_s)` sets `{namespace}/lock/{name}` to a random token with `SET NX PX`: the
lock is held until released or until the lease (`ttl_s`) runs out, so a holder that dies frees it
by itself. `release` and `extend` act only when the key still holds the lease's token (a Lua
compare-and-delete / compare-and-pexpire): a holder whose lease expired and was taken over can
never release or prolong the new holder's lock.

A lease is not a fence: a holder that stalls past its lease may still act while another holds the
lock. Whatever the lock guards must therefore be correct without it (summaries are written with an
optimistic version check); the lock only avoids wasted duplicate work. Redis failures raise
`core.stores.locks.LockUnavailable`.
"""

from __future__ import annotations

import secrets
import time

from redis.asyncio import Redis

from core.stores.locks import Lease, LockUnavailable

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

_EXTEND = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""


def _ttl_ms(ttl_s: float) -> int:
    ttl_ms = int(ttl_s * 1000)
    if ttl_ms < 1:
        raise ValueError(f"a lease lasts at least 1 ms, not {ttl_s} s")
    return ttl_ms


class RedisLocks:
    """Leased locks under `{namespace}/lock/` (`core.stores.locks.Locks`). `client` is owned by the
    caller."""

    def __init__(self, client: Redis, *, namespace: str = "memstream") -> None:
        self._client = client
        self._namespace = namespace
        self._release = client.register_script(_RELEASE)
        self._extend = client.register_script(_EXTEND)

    def key(self, name: str) -> str:
        return f"{self._namespace}/lock/{name}"

    async def acquire(self, name: str, ttl_s: float) -> Lease | None:
        """The lease when the lock was free, None when someone holds it."""
        ttl_ms = _ttl_ms(ttl_s)
        key, token = self.key(name), secrets.token_hex(16)
        started = time.monotonic()
        try:
            acquired = await self._client.set(key, token, nx=True, px=ttl_ms)
        except Exception as exc:
            raise LockUnavailable(f"cannot acquire lock {name!r}: {type(exc).__name__}: {exc}") from exc
        if not acquired:
            return None
        return Lease(name=name, key=key, token=token, ttl_ms=ttl_ms, expires_at=started + ttl_ms / 1000)

    async def release(self, lease: Lease) -> bool:
        """Release the lock if this lease still holds it; False when it expired (or was taken over)."""
        try:
            released = await self._release(keys=[lease.key], args=[lease.token])
        except Exception as exc:
            raise LockUnavailable(f"cannot release lock {lease.name!r}: {type(exc).__name__}: {exc}") from exc
        return bool(released)

    async def extend(self, lease: Lease, ttl_s: float | None = None) -> Lease | None:
        """Restart the lease (for `ttl_s`, default: the lease's own TTL) if it still holds the lock;
        the renewed lease, or None when it was lost."""
        ttl_ms = _ttl_ms(ttl_s) if ttl_s is not None else lease.ttl_ms
        started = time.monotonic()
        try:
            extended = await self._extend(keys=[lease.key], args=[lease.token, ttl_ms])
        except Exception as exc:
            raise LockUnavailable(f"cannot extend lock {lease.name!r}: {type(exc).__name__}: {exc}") from exc
        if not extended:
            return None
        return Lease(
            name=lease.name,
            key=lease.key,
            token=lease.token,
            ttl_ms=ttl_ms,
            expires_at=started + ttl_ms / 1000,
        )
