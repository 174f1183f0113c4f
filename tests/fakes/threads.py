"""`InMemoryThreadStore`: the `ThreadStore` (`core.threads`) in memory.

What the contract suite (`tests/core/stores/test_threads.py`) asserts of every thread store holds
here: rows are keyed by the full scope (environment, account_id, thread_id); `upsert` replaces the
metadata only when agent_id and user_id equal the stored ones (else writes nothing and answers the
stored row) and moves `updated_at` forward; `creating` stores its thread only when its block exits
normally, other readers do not see it before, and while it inserts a thread another creator (or
`upsert`) of the same thread waits for its block to end; `update_metadata` writes nothing when
`update` raises. Metadata is stored as JSON (a copy: like jsonb, later changes to the caller's dict
change nothing). The state is public for tests: `threads` by (environment, account_id, thread_id).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from core.threads import Thread

Key = tuple[str, str, str]


def _json(metadata: dict[str, Any]) -> dict[str, Any]:
    copied: dict[str, Any] = json.loads(json.dumps(metadata))
    return copied


def _new(key: Key, agent_id: str, user_id: str | None, metadata: dict[str, Any]) -> Thread:
    environment, account_id, thread_id = key
    now = datetime.now(UTC)
    return Thread(
        environment=environment,
        account_id=account_id,
        thread_id=thread_id,
        agent_id=agent_id,
        user_id=user_id,
        metadata=metadata,
        created_at=now,
        updated_at=now,
    )


class InMemoryThreadStore:
    """See the module doc."""

    def __init__(self) -> None:
        self.threads: dict[Key, Thread] = {}
        self._creators: dict[Key, asyncio.Lock] = {}

    async def get(self, environment: str, account_id: str, thread_id: str) -> Thread | None:
        thread = self.threads.get((environment, account_id, thread_id))
        return None if thread is None else thread.model_copy(deep=True)

    async def delete(self, environment: str, account_id: str, thread_id: str) -> bool:
        return self.threads.pop((environment, account_id, thread_id), None) is not None

    async def list_threads(
        self,
        environment: str,
        account_id: str,
        *,
        agent_id: str | None = None,
        user_id: str | None = None,
        after: str | None = None,
        limit: int,
    ) -> list[Thread]:
        found = sorted(
            (
                t
                for (env, account, _), t in self.threads.items()
                if (env, account) == (environment, account_id)
            ),
            key=lambda t: t.thread_id,
        )
        return [
            t.model_copy(deep=True)
            for t in found
            if (agent_id is None or t.agent_id == agent_id)
            and (user_id is None or t.user_id == user_id)
            and (after is None or t.thread_id > after)
        ][:limit]

    async def agent_ids(self, environment: str, account_id: str) -> list[str]:
        return sorted(
            {
                t.agent_id
                for (env, account, _), t in self.threads.items()
                if (env, account) == (environment, account_id)
            }
        )

    async def upsert(
        self,
        environment: str,
        account_id: str,
        thread_id: str,
        agent_id: str,
        user_id: str | None,
        metadata: dict[str, Any],
    ) -> tuple[Thread, bool]:
        key = (environment, account_id, thread_id)
        async with self._creator(key):  # like a row insert, it waits for an uncommitted creation
            stored = self.threads.get(key)
            if stored is None:
                thread = _new(key, agent_id, user_id, _json(metadata))
                self.threads[key] = thread
                return thread.model_copy(deep=True), True
            if (stored.agent_id, stored.user_id) == (agent_id, user_id):
                stored = self._replace(key, _json(metadata))
            return stored.model_copy(deep=True), False

    @asynccontextmanager
    async def creating(
        self, environment: str, account_id: str, thread_id: str, agent_id: str, user_id: str | None
    ) -> AsyncIterator[Thread]:
        key = (environment, account_id, thread_id)
        stored = self.threads.get(key)
        if stored is not None:  # nothing to insert: nothing to wait for
            yield stored.model_copy(deep=True)
            return
        async with self._creator(key):
            stored = self.threads.get(key)
            if stored is not None:  # created by the creator this one waited for
                yield stored.model_copy(deep=True)
                return
            thread = _new(key, agent_id, user_id, {})
            yield thread.model_copy(deep=True)
            self.threads[key] = thread  # the block ended normally: commit

    async def update_metadata(
        self,
        environment: str,
        account_id: str,
        thread_id: str,
        update: Callable[[dict[str, Any]], dict[str, Any]],
    ) -> Thread | None:
        key = (environment, account_id, thread_id)
        stored = self.threads.get(key)
        if stored is None:
            return None
        return self._replace(key, _json(update(_json(stored.metadata)))).model_copy(deep=True)

    def _replace(self, key: Key, metadata: dict[str, Any]) -> Thread:
        stored = self.threads[key]
        # a later write's updated_at is later, even within one clock tick
        updated_at = max(datetime.now(UTC), stored.updated_at + timedelta(microseconds=1))
        thread = stored.model_copy(update={"metadata": metadata, "updated_at": updated_at})
        self.threads[key] = thread
        return thread

    def _creator(self, key: Key) -> asyncio.Lock:
        """The lock a creation of `key` holds until its block ends."""
        return self._creators.setdefault(key, asyncio.Lock())
