"""An in-process cache of rows read from a store that other nodes write (`InvalidatedCache`).

Correct across nodes only together with an invalidation feed: a listener (for Postgres
`sinks.postgres.invalidation.PostgresInvalidations`) that calls `set_live(True)` once it receives
the store's change notices, `evict(key)` for each notice, and `set_live(False)` as soon as it
knows it may miss one (its connection broke or stopped answering).

Contract:
- The cache serves entries only while live. Going live or down empties it, so nothing read before
  the feed could announce its change is ever served. While down every read goes to the store (the
  cache is bypassed, not trusted for its TTL).
- A value read from the store is kept only when no eviction and no live/down transition happened
  since the read began (`ticket()` before the read, `put(..., ticket=...)` after): a change
  announced while the read was in flight cannot be overwritten by the older value.
- Every entry expires after its `ttl_s` even while live: the bound on staleness when the feed
  broke without the listener noticing yet (a half-open connection until its next ping).
- At most `max_entries` are kept (the oldest put is dropped first).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

log = logging.getLogger("memstream.caches")

Scope = tuple[str | None, ...]


def notice_scope(payload: str, parts: int, *, last_may_be_null: bool = False) -> Scope | None:
    """The scope a change notice names: a JSON array of `parts` strings (the last one may be null
    when `last_may_be_null`); None for anything else."""
    try:
        scope = json.loads(payload)
    except ValueError:
        return None
    if not (isinstance(scope, list) and len(scope) == parts):
        return None
    head, last = scope[:-1], scope[-1]
    if not all(isinstance(part, str) for part in head):
        return None
    if not (isinstance(last, str) or (last is None and last_may_be_null)):
        return None
    return tuple(scope)


@dataclass(frozen=True)
class Ticket:
    """Taken before reading the store (`InvalidatedCache.ticket`)."""

    generation: int


@dataclass(frozen=True)
class _Entry(Generic[V]):
    value: V
    expires: float


class InvalidatedCache(Generic[K, V]):
    """See the module doc. `clock` is monotonic seconds."""

    def __init__(self, *, max_entries: int = 10_000, clock: Callable[[], float] = time.monotonic) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self._entries: dict[K, _Entry[V]] = {}
        self._max_entries = max_entries
        self._clock = clock
        self._generation = 0
        self._live = False

    @property
    def live(self) -> bool:
        """True while the invalidation feed is known to deliver every change."""
        return self._live

    def __len__(self) -> int:
        return len(self._entries)

    def set_live(self, live: bool) -> None:
        """The feed started (True) or may miss changes (False); either way the cache is emptied."""
        self._live = live
        self.clear()

    def get(self, key: K) -> _Entry[V] | None:
        """The unexpired entry of `key` while live (its `.value`), else None."""
        if not self._live:
            return None
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry.expires <= self._clock():
            del self._entries[key]
            return None
        return entry

    def ticket(self) -> Ticket:
        return Ticket(self._generation)

    def put(self, key: K, value: V, *, ticket: Ticket, ttl_s: float) -> bool:
        """Keep `value` (read after `ticket` was taken) for `ttl_s`; False when it was not kept
        (down, or an eviction happened since the ticket)."""
        if not self._live or ticket.generation != self._generation or ttl_s <= 0:
            return False
        self._entries.pop(key, None)
        while len(self._entries) >= self._max_entries:
            del self._entries[next(iter(self._entries))]
        self._entries[key] = _Entry(value, self._clock() + ttl_s)
        return True

    def evict(self, key: K) -> None:
        """Forget `key` (the store changed it, or may have)."""
        self._generation += 1
        self._entries.pop(key, None)

    def clear(self) -> None:
        """Forget everything."""
        self._generation += 1
        self._entries.clear()

    def notice(self, payload: str, parts: int, *, what: str, last_may_be_null: bool = False) -> None:
        """Apply a change notice naming a scope (`notice_scope`): evict that key, or forget
        everything when the payload is not a scope ('*' is the store's "everything changed"; any
        other payload is logged, naming `what` the cache holds)."""
        scope = notice_scope(payload, parts, last_may_be_null=last_may_be_null)
        if scope is None:
            if payload != "*":
                log.warning("%s change notice %r is not a scope: forgetting every cached one", what, payload)
            self.clear()
            return
        self.evict(scope)  # type: ignore[arg-type]  # the caller's keys are these scope tuples

    async def through(self, key: K, load: Callable[[], Awaitable[V]], *, ttl_s: float) -> V:
        """The cached value of `key`, else `load()`'s, kept (see `put`) for `ttl_s`."""
        entry = self.get(key)
        if entry is not None:
            return entry.value
        ticket = self.ticket()
        value = await load()
        self.put(key, value, ticket=ticket, ttl_s=ttl_s)
        return value
