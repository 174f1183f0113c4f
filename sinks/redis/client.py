"""The asyncio Redis client memstream uses: bounded timeouts, no hidden retries.

Redis holds only derived or coordination state, and its callers sit on latency paths (the context
read) or decide themselves what a failure means (locks), so a call fails fast instead of retrying.
"""

from __future__ import annotations

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff


def redis_client(url: str, *, timeout_s: float = 0.5) -> Redis:
    """A client of `url` (`redis://[user:password@]host:port/db`, `rediss://` for TLS). Connects
    lazily: creating it does no I/O. Close it with `await client.aclose()`."""
    return Redis.from_url(
        url,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        retry=Retry(NoBackoff(), 0),
        decode_responses=False,
    )
