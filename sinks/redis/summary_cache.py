"""`core.summaries.models.SummaryCache` in Redis: a thread's latest summary, cached for one hour.

Each entry is a hash `{version, body}` under
`memstream/summary/{store}/{environment}/{account}/{agent}/{thread}`, where `{store}` is a short
hash of the object store URL (deployments sharing one Redis but not one object store never see
each other's entries; `/` cannot occur in ids, so keys of different tenants never collide).

Never older than it was told: `put` runs one Lua script that writes only when the cached version
is lower (or absent), and sets the TTL (`ttl_s`, 3600) on every write. A slow cache-aside fill of
version 5 therefore cannot overwrite the 6 a writer has just put. Writers also `invalidate` before
their commit, so a writer that dies between its commit and its `put` leaves a miss, not a stale
entry. Entries are not refreshed on reads: the TTL bounds how long any residual staleness lives.

Redis down or unreachable: no method raises. `get` is a miss (the caller reads the object store);
`put` and `invalidate` are remembered (up to `max_pending` keys, the newest summary per key) and
replayed on the next call that finds Redis reachable - which matters when Redis comes back with
old entries from its append-only file. After a failure Redis is not tried again for
`retry_after_s`, so an outage costs the context path one timeout, not one per read. The outage is
logged once (warning) and the recovery once (info).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable

from redis.asyncio import Redis

from core.config import Settings
from core.journal.models import ThreadRef
from core.summaries.models import Summary
from sinks.redis.client import redis_client

log = logging.getLogger(__name__)

SUMMARY_TTL_S = 3600.0

_SET_IF_NEWER = """
local cached = redis.call('HGET', KEYS[1], 'version')
if cached and tonumber(cached) >= tonumber(ARGV[1]) then
  return 0
end
redis.call('HSET', KEYS[1], 'version', ARGV[1], 'body', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"""

_INVALIDATE = None  # sentinel in the pending map: "delete this key"


def store_namespace(object_store_url: str) -> str:
    """A short, stable name of an object store for cache keys."""
    return hashlib.sha256(object_store_url.encode()).hexdigest()[:16]


class RedisSummaryCache:
    """See the module doc. `client` is owned by the caller unless built by `from_settings`."""

    def __init__(
        self,
        client: Redis,
        *,
        namespace: str,
        ttl_s: float = SUMMARY_TTL_S,
        retry_after_s: float = 5.0,
        max_pending: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._namespace = namespace
        self._ttl_ms = int(ttl_s * 1000)
        self._retry_after_s = retry_after_s
        self._max_pending = max_pending
        self._clock = clock
        self._set_if_newer = client.register_script(_SET_IF_NEWER)
        self._retry_at: float | None = None  # backing off after a failure until then
        self._outage = False  # an outage was logged and no call succeeded since
        self._pending: dict[str, Summary | None] = {}

    @classmethod
    def from_settings(cls, settings: Settings) -> RedisSummaryCache:
        """A cache on `settings.redis`, namespaced by `settings.object_store`. Does no I/O."""
        return cls(redis_client(settings.redis), namespace=store_namespace(settings.object_store))

    async def aclose(self) -> None:
        await self._client.aclose()

    def key(self, thread: ThreadRef, agent_id: str) -> str:
        return (
            f"memstream/summary/{self._namespace}/{thread.environment}/{thread.account_id}/"
            f"{agent_id}/{thread.thread_id}"
        )

    @property
    def pending(self) -> int:
        """Updates waiting for Redis to come back."""
        return len(self._pending)

    async def get(self, thread: ThreadRef, agent_id: str) -> Summary | None:
        if not await self._reachable():
            return None
        key = self.key(thread, agent_id)
        try:
            version, body = await self._client.hmget(key, ["version", "body"])
        except Exception as exc:
            self._failed(exc)
            return None
        self._succeeded()
        if body is None:
            return None
        try:
            summary = Summary.model_validate_json(body)
        except ValueError:
            log.warning("ignoring the unreadable cached summary %s", key)
            return None
        return summary if version is not None and int(version) == summary.version else None

    async def put(self, thread: ThreadRef, agent_id: str, summary: Summary) -> None:
        key = self.key(thread, agent_id)
        if not await self._reachable() or not await self._apply(key, summary):
            self._remember(key, summary)

    async def invalidate(self, thread: ThreadRef, agent_id: str) -> None:
        key = self.key(thread, agent_id)
        if not await self._reachable() or not await self._apply(key, _INVALIDATE):
            self._remember(key, _INVALIDATE)

    async def flush_pending(self) -> int:
        """Replay remembered updates now (when Redis is reachable); returns how many are left."""
        await self._reachable()
        return len(self._pending)

    async def _apply(self, key: str, summary: Summary | None) -> bool:
        try:
            if summary is None:
                await self._client.delete(key)
            else:
                await self._set_if_newer(
                    keys=[key], args=[summary.version, summary.model_dump_json(), self._ttl_ms]
                )
        except Exception as exc:
            self._failed(exc)
            return False
        self._succeeded()
        return True

    async def _reachable(self) -> bool:
        """False while backing off after a failure; replays remembered updates first when due."""
        if self._retry_at is not None and self._clock() < self._retry_at:
            return False
        while self._pending:
            key, summary = next(iter(self._pending.items()))
            if not await self._apply(key, summary):
                return False
            if self._pending.get(key, 0) is summary:
                del self._pending[key]
        return True

    def _succeeded(self) -> None:
        self._retry_at = None
        if self._outage:
            self._outage = False
            log.info("Redis is reachable again: summary cache in use")

    def _failed(self, exc: Exception) -> None:
        if not self._outage:
            self._outage = True
            log.warning(
                "Redis unavailable (%s: %s): summaries are read from the object store; retrying in %.0f s",
                type(exc).__name__,
                exc,
                self._retry_after_s,
            )
        self._retry_at = self._clock() + self._retry_after_s

    def _remember(self, key: str, summary: Summary | None) -> None:
        known = self._pending.pop(key, 0)
        if summary is not None and isinstance(known, Summary) and known.version > summary.version:
            summary = known
        if len(self._pending) >= self._max_pending:
            dropped = next(iter(self._pending))
            del self._pending[dropped]
            log.warning("summary cache: too many pending updates, dropped the oldest (%s)", dropped)
        self._pending[key] = summary
