"""Pinning: which agent-memory entries are shown in every turn's context (`MemoryPinnedFacts`).

Rule: an entry is pinned when it is not expired, of category `user_profile`, private to the
scope's user (same environment, account and agent), and of importance >= `PIN_MIN_IMPORTANCE`;
at most `PIN_MAX`, by importance then recency (`updated_at`), newest first. A user is shown only
their own profile facts: a shared `user_profile` entry (written before profile facts needed a
user, `core.memory.service`) is pinned for nobody, and a scope without a user pins nothing.
Pinning does not depend on the agent's capability binding: facts are loaded whether or not Memory
is bound.

The pinned set is a snapshot: `pinned(scope)` reads it once, when the context is built; the
context returned to the caller is a value, so a store during the turn does not change it (the
next context shows it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Protocol

from core.memory.clock import Clock, utc_now
from core.memory.models import PIN_MAX, PIN_MIN_IMPORTANCE, PROFILE_CATEGORY, MemoryEntry
from core.memory.pinned import MemoryScope, PinnedFact

PINNED_CATEGORY = PROFILE_CATEGORY


class PinnedCandidates(Protocol):
    """The part of `MemoryService` pinning needs."""

    async def pinned_candidates(self, scope: MemoryScope, limit: int = PIN_MAX) -> Sequence[MemoryEntry]:
        """Entries to pin in `scope` now, at most `limit` (the rule is re-applied here all the same)."""
        ...


def is_visible(entry: MemoryEntry, scope: MemoryScope) -> bool:
    """Same environment, account and agent; shared, or private to the scope's (present) user."""
    if (entry.environment, entry.account_id, entry.agent_id) != (
        scope.environment,
        scope.account_id,
        scope.agent_id,
    ):
        return False
    if entry.visibility == "shared":
        return True
    return scope.user_id is not None and entry.user_id == scope.user_id


def is_expired(entry: MemoryEntry, now: datetime) -> bool:
    return entry.expires_at is not None and entry.expires_at <= now


def is_own_profile(entry: MemoryEntry, scope: MemoryScope) -> bool:
    """A profile fact of the scope's (present) user: private to them, in the scope."""
    return (
        entry.category == PINNED_CATEGORY
        and entry.visibility == "private"
        and scope.user_id is not None
        and is_visible(entry, scope)
    )


def is_pinnable(entry: MemoryEntry, scope: MemoryScope, now: datetime) -> bool:
    return (
        is_own_profile(entry, scope) and entry.importance >= PIN_MIN_IMPORTANCE and not is_expired(entry, now)
    )


def select_pinned(entries: Iterable[MemoryEntry], scope: MemoryScope, now: datetime) -> list[MemoryEntry]:
    """The pinned entries among `entries`, in display order, at most `PIN_MAX`. Pure."""
    pinnable = [entry for entry in entries if is_pinnable(entry, scope, now)]
    pinnable.sort(key=lambda e: (e.importance, e.updated_at, e.entry_id), reverse=True)
    return pinnable[:PIN_MAX]


def to_pinned_fact(entry: MemoryEntry) -> PinnedFact:
    return PinnedFact(fact_id=entry.entry_id, key=entry.key, content=entry.content)


class MemoryPinnedFacts:
    """The `PinnedFactsProvider` over agent memory (Postgres, the authority)."""

    def __init__(self, service: PinnedCandidates, clock: Clock = utc_now) -> None:
        self._service = service
        self._clock = clock

    async def pinned_entries(self, scope: MemoryScope) -> list[MemoryEntry]:
        """The pinned entries of `scope` now, in display order."""
        candidates = await self._service.pinned_candidates(scope, PIN_MAX)
        return select_pinned(candidates, scope, self._clock())

    async def pinned(self, scope: MemoryScope) -> list[PinnedFact]:
        return [to_pinned_fact(entry) for entry in await self.pinned_entries(scope)]
