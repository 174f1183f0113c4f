"""The immutable part of threads, remembered in process (`ThreadIdentities`).

What an append (and a read of messages) needs of its thread is only who it belongs to: its scope
(environment, account_id, thread_id) and its agent_id and user_id. None of that ever changes once
the thread is committed, and a thread is never deleted (no statement deletes from `threads`;
`core.threads`: agent_id and user_id never change, the only update is of metadata). So an identity
read from the store stays true for as long as it is kept, on every node, without invalidation:
caching it is correct by construction, and no TTL is needed. Should a path that deletes or
re-keys threads ever be added, it must empty this cache on every node (the way `core.cached_api_keys`
is, by a change feed) before it is used.

Only committed rows are put (the result of `ThreadStore.get`, never a thread being created inside
a transaction that may still roll back). Entries are keyed by the full scope, so a lookup can only
find a thread of the caller's own environment and account. Metadata (the context window) is
mutable and is not kept: readers of it ask the store. At most `max_entries` are kept (the
least recently used is dropped first).
"""

from __future__ import annotations

from dataclasses import dataclass

from core.journal.models import ThreadRef


@dataclass(frozen=True)
class ThreadIdentity:
    """Who a thread belongs to (the part of `core.threads.Thread` that never changes)."""

    ref: ThreadRef
    agent_id: str
    user_id: str | None

    @property
    def thread_id(self) -> str:
        return self.ref.thread_id


Scope = tuple[str, str, str]


class ThreadIdentities:
    """See the module doc."""

    def __init__(self, *, max_entries: int = 50_000) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self._max_entries = max_entries
        self._entries: dict[Scope, ThreadIdentity] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, environment: str, account_id: str, thread_id: str) -> ThreadIdentity | None:
        scope = (environment, account_id, thread_id)
        identity = self._entries.pop(scope, None)
        if identity is not None:
            self._entries[scope] = identity  # most recently used last
        return identity

    def put(self, identity: ThreadIdentity) -> None:
        """Remember a committed thread's identity."""
        ref = identity.ref
        scope = (ref.environment, ref.account_id, ref.thread_id)
        self._entries.pop(scope, None)
        while len(self._entries) >= self._max_entries:
            del self._entries[next(iter(self._entries))]
        self._entries[scope] = identity
