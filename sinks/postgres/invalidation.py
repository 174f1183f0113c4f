"""The change feed of in-process caches (`PostgresInvalidations`): Postgres `LISTEN` on the channels
that triggers NOTIFY when cached rows change (migrations 0008-0012: `memstream_api_keys`,
`memstream_threads`, `memstream_pinned`, `memstream_summaries`, `memstream_agents`).

`subscribe(channel, feed)` registers a cache (`Feed`: `invalidated(payload)` per notice,
`set_live(bool)` when the feed starts and when it may miss notices). `run(stop)` holds one pooled
connection LISTENing on every subscribed channel until `stop` is set, like the outbox relay's
listener (`sinks.postgres.outbox`): it reports live once every LISTEN is in place, pings the
connection every `ping_s` (a connection that broke silently is noticed within `ping_s` plus the
ping's own timeout of `ping_s`), and on any failure reports down at once, gives the connection
back (broken: the pool replaces it) and tries again every `retry_s`. The caches bypass themselves
while down (`core.invalidated_cache`); their TTL bounds what a silently broken feed can miss.
Before releasing its connection it UNLISTENs (`remove_listener`), so no pool user inherits it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Protocol

import asyncpg

log = logging.getLogger("memstream.postgres.invalidation")

API_KEYS_CHANNEL = "memstream_api_keys"
THREADS_CHANNEL = "memstream_threads"
PINNED_CHANNEL = "memstream_pinned"
SUMMARIES_CHANNEL = "memstream_summaries"
AGENTS_CHANNEL = "memstream_agents"


class Feed(Protocol):
    def invalidated(self, payload: str) -> None: ...

    def set_live(self, live: bool) -> None: ...


class PostgresInvalidations:
    """See the module doc. Uses the caller's pool (holding one connection while running)."""

    def __init__(self, pool: asyncpg.Pool, *, ping_s: float = 2.0, retry_s: float = 1.0) -> None:
        self.pool = pool
        self.ping_s = ping_s
        self.retry_s = retry_s
        self._feeds: dict[str, list[Feed]] = {}
        self.live = asyncio.Event()
        """Set while every subscribed channel is LISTENed on (for tests and logs)."""

    def subscribe(self, channel: str, feed: Feed) -> None:
        """Deliver `channel`'s notices to `feed` (before `run`)."""
        self._feeds.setdefault(channel, []).append(feed)
        feed.set_live(False)

    def _set_live(self, live: bool) -> None:
        for feeds in self._feeds.values():
            for feed in feeds:
                feed.set_live(live)
        if live:
            self.live.set()
        else:
            self.live.clear()

    def _notice(self, _conn: object, _pid: int, channel: str, payload: str) -> None:
        for feed in self._feeds.get(channel, ()):
            feed.invalidated(payload)

    async def run(self, stop: asyncio.Event) -> None:
        """LISTEN until `stop` is set (module doc). Never raises for Postgres errors."""
        if not self._feeds:
            await stop.wait()  # nothing cached: nothing to listen for
            return
        while not stop.is_set():
            try:
                await self._listen(stop)
            except Exception as exc:
                log.warning(
                    "cache invalidation feed lost (%r): caches bypassed, listening again in %.1fs",
                    exc,
                    self.retry_s,
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.retry_s)

    async def _acquire(self, stop: asyncio.Event) -> asyncpg.pool.PoolConnectionProxy | None:
        """A pooled connection, or None once `stop` is set first (a connect to a server that is
        down may take long: it must not hold up the node's stop)."""
        acquiring = asyncio.ensure_future(self.pool.acquire())
        stopping = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({acquiring, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
        if acquiring.done():
            return acquiring.result()  # the connection, or its error
        acquiring.cancel()
        await asyncio.wait({acquiring})
        if not acquiring.cancelled() and acquiring.exception() is None:
            await self.pool.release(acquiring.result())  # acquired as it was cancelled
        return None

    async def _listen(self, stop: asyncio.Event) -> None:
        conn = await self._acquire(stop)
        if conn is None:
            return
        healthy = False
        try:
            for channel in self._feeds:
                await conn.add_listener(channel, self._notice)
            self._set_live(True)
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.ping_s)
                if conn.is_closed():
                    raise ConnectionError("the listening connection closed")
                await conn.fetchval("SELECT 1", timeout=self.ping_s)
            healthy = True
        finally:
            self._set_live(False)
            try:
                if not healthy:
                    raise ConnectionError("not reusable")
                for channel in self._feeds:
                    await conn.remove_listener(channel, self._notice)  # UNLISTEN
            except Exception:
                conn.terminate()  # the pool connects anew: no LISTEN survives in it
            with contextlib.suppress(Exception):
                await self.pool.release(conn)
