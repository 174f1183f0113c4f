"""The erasure under test over the fakes (`Setup`), shared by the tests of `core.user_erasure` and of
the admin route that drives it: a thread deletion with one further step (`Summaries`, which can
fail or act while it runs), agent memory, and one further erasure step (`Caches`, which can fail)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from core.journal.models import NewMessage, ThreadRef
from core.memory.clock import utc_now
from core.memory.models import MemoryScope
from core.memory.service import MemoryService
from core.stores.deletions import DeletionRecord, Tombstone
from core.stores.erasures import ErasureRecord
from core.thread_deletion import ThreadDeletion
from core.user_erasure import UserErasure
from tests.fakes.deletions import InMemoryDeletions
from tests.fakes.erasures import InMemoryErasures
from tests.fakes.journal import InMemoryJournal
from tests.fakes.memory import InMemoryMemoryStore
from tests.fakes.threads import InMemoryThreadStore


class Summaries:
    """A further deletion step: `failures` crashes first, then `during(thread_id)` on each run."""

    name = "summaries"

    def __init__(self) -> None:
        self.failures = 0
        self.during: Any = None
        self.runs: list[str] = []

    async def run(self, record: DeletionRecord) -> Mapping[str, Any]:
        self.runs.append(record.thread_id)
        await asyncio.sleep(0)  # a store's round trip: other calls run meanwhile
        if self.failures:
            self.failures -= 1
            raise RuntimeError("injected crash")
        if self.during is not None:
            await self.during(record.thread_id)
        return {"objects": 2, "agents": ["bot"]}


class Caches:
    """A further erasure step that fails its first `failures` runs."""

    name = "caches"

    def __init__(self) -> None:
        self.failures = 0
        self.runs = 0

    async def run(self, record: ErasureRecord) -> Mapping[str, Any]:
        self.runs += 1
        if self.failures:
            self.failures -= 1
            raise RuntimeError("injected crash")
        return {"evicted": 1}


class Setup:
    def __init__(self) -> None:
        self.threads = InMemoryThreadStore()
        self.journal = InMemoryJournal()
        self.deletions = InMemoryDeletions()
        self.summaries = Summaries()
        self.published: list[Tombstone] = []
        deletion = ThreadDeletion(self.threads, self.journal, self.deletions, self.publish, [self.summaries])
        self.now: datetime | None = None
        """The memory's clock when set (an entry written "earlier"), else the time."""
        self.memory = MemoryService(InMemoryMemoryStore(), lambda: self.now or utc_now())
        self.register = InMemoryErasures()
        self.caches = Caches()
        self.erasure = UserErasure(self.threads, deletion, self.register, self.memory, [self.caches])

    async def publish(self, deletion_id: int, tombstone: Tombstone, requested_at: datetime) -> None:
        self.published.append(tombstone)

    async def thread(self, thread_id: str, user: str | None, account: str = "acme", n: int = 2) -> None:
        await self.threads.upsert("dev", account, thread_id, "bot", user, {})
        ref = ThreadRef(environment="dev", account_id=account, thread_id=thread_id)
        await self.journal.append(
            ref, "bot", user, [NewMessage(role="user", content=f"m{i}") for i in range(n)]
        )

    async def remember(self, user: str, key: str, visibility: str = "private", account: str = "acme") -> None:
        scope = MemoryScope(environment="dev", account_id=account, agent_id="bot", user_id=user)
        await self.memory.store(scope, key, f"about {key}", "project_fact", scope_visibility=visibility)

    async def threads_of(self, user: str, account: str = "acme") -> list[str]:
        return [t.thread_id for t in await self.threads.list_threads("dev", account, user_id=user, limit=100)]

    async def journal_threads(self) -> list[tuple[str, str]]:
        return sorted({(m.account_id, m.thread_id) for m in await self.journal.read_from_seq(0, 1000)})
