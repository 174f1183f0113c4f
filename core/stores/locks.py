"""Leased locks (`Locks`), e.g. one summarizer per thread at a time. The adapter is
`sinks.redis.locks.RedisLocks`.

Contract: a lock is held until released or until its lease (`ttl_s`) runs out, so a holder that
dies frees it by itself. `release` and `extend` act only while the lease still holds the lock: a
holder whose lease expired and was taken over can never release or prolong the new holder's lock.

A lease is not a fence: a holder that stalls past its lease may still act while another holds the
lock. Whatever the lock guards must therefore be correct without it; the lock only avoids wasted
duplicate work. When the lock state cannot be known (the store is unreachable or failed), every
call raises `LockUnavailable`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from core.errors import MemstreamError


class LockUnavailable(MemstreamError):
    """The lock store could not be reached or answered with an error: the lock state is unknown."""

    code = "lock_unavailable"


@dataclass(frozen=True)
class Lease:
    """A held lock. `expires_at` is a `time.monotonic()` instant (as of the last acquire/extend)."""

    name: str
    key: str
    token: str
    ttl_ms: int
    expires_at: float


class Locks(Protocol):
    async def acquire(self, name: str, ttl_s: float) -> Lease | None:
        """The lease when the lock was free, None when someone holds it."""
        ...

    async def release(self, lease: Lease) -> bool:
        """Release the lock if this lease still holds it; False when it expired (or was taken over)."""
        ...

    async def extend(self, lease: Lease, ttl_s: float | None = None) -> Lease | None:
        """Restart the lease (for `ttl_s`, default: the lease's own TTL) if it still holds the lock;
        the renewed lease, or None when it was lost."""
        ...
