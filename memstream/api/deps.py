"""What the API needs, built by the node and injected into `create_app`.

The app opens and closes nothing: the owner of `ApiDeps` opens the pool (and runs the
migrations) and the journal before serving, and closes them after the server stopped. The same
holds for agent memory (`MemoryDeps`): its owner opens the vector index and the embedder, and
closes the index after the server stopped. Without `memory`, the agent and memory routes are
absent and contexts have no pinned facts. The owner also closes `summary_cache` when set
(`await deps.summary_cache.aclose()`). `transcripts` (the journal tools over the transcript store
and the chat model) is likewise opened and closed by its owner; without it the journal tools are
not offered. `object_store` is the readiness probe of `settings.object_store` (`/readyz`); without
it `/readyz` does not check the object store. `processors` (the node's `ProcessorSupervisor`) lets
`/readyz` report processors that are crashed or waiting (`degraded`); without it they are not checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import asyncpg

from core.config import Settings
from core.embeddings.base import Embedder, SparseEncoder
from core.memory.agents import AgentService
from core.memory.clock import Clock, utc_now
from core.memory.pinned import NoPinnedFacts, PinnedFactsProvider
from core.memory.pinning import MemoryPinnedFacts
from core.memory.recall import Recaller
from core.memory.service import MemoryService
from core.memory.tools import MemoryTools
from core.stores.journal import Journal
from core.stores.vectors import VectorIndex
from core.summaries.layered import CachedSummaryReader
from core.summaries.models import SummaryReader
from core.threads import ThreadService
from core.transcripts.tools import JournalTools
from core.turn_context import ContextReader
from sinks.objectstore.health import ObjectStoreProbe
from sinks.objectstore.summaries import ObjectStoreSummaryReader
from sinks.postgres.threads import PostgresThreadStore
from sinks.redis.summary_cache import RedisSummaryCache
from streams.runtime.supervisor import ProcessorStatus


class ProcessorStatuses(Protocol):
    """What `/readyz` reads of the processors (a `ProcessorSupervisor`)."""

    def statuses(self) -> list[ProcessorStatus]: ...


@dataclass
class MemoryDeps:
    """Agent memory as the API uses it: the service (Postgres), capability bindings, recall, the
    tools and the pinned-facts provider."""

    service: MemoryService
    agents: AgentService
    recaller: Recaller
    tools: MemoryTools
    pinned: MemoryPinnedFacts

    @classmethod
    def build(
        cls,
        pool: asyncpg.Pool,
        embedder: Embedder,
        sparse: SparseEncoder,
        index: VectorIndex,
        *,
        clock: Clock = utc_now,
    ) -> MemoryDeps:
        """The standard wiring over one pool, embedder, sparse encoder and index. Does no I/O."""
        service = MemoryService(pool, clock)
        recaller = Recaller(service, embedder, sparse, index, model_id=embedder.model_id)
        return cls(
            service=service,
            agents=AgentService(pool),
            recaller=recaller,
            tools=MemoryTools(service, recaller),
            pinned=MemoryPinnedFacts(service, clock),
        )


@dataclass
class ApiDeps:
    """`settings.environment` scopes every request; `pool` serves API keys and threads."""

    settings: Settings
    journal: Journal
    pool: asyncpg.Pool
    threads: ThreadService
    context_reader: ContextReader
    readiness_timeout_s: float = 2.0
    memory: MemoryDeps | None = None
    summary_cache: RedisSummaryCache | None = None
    transcripts: JournalTools | None = None
    object_store: ObjectStoreProbe | None = None
    processors: ProcessorStatuses | None = None


def build_api_deps(
    settings: Settings,
    journal: Journal,
    pool: asyncpg.Pool,
    *,
    summaries: SummaryReader | None = None,
    pinned: PinnedFactsProvider | None = None,
    memory: MemoryDeps | None = None,
    summary_cache: RedisSummaryCache | None = None,
    transcripts: JournalTools | None = None,
    processors: ProcessorStatuses | None = None,
) -> ApiDeps:
    """The standard wiring: Postgres threads, summaries from `settings.object_store` (through the
    Redis cache `summary_cache`, else through one on `settings.redis` when `settings.redis_url` is
    set, else uncached), pinned facts from `pinned`, else from agent memory when `memory` is
    given, else none; the journal tools from `transcripts` when given; `/readyz` reports
    `processors` when given. `summaries`, when given,
    replaces the object store reader (and is cached only when `summary_cache` is given too).
    `/readyz` checks `settings.object_store` (the summarizer writes there whatever the reader).

    Does no I/O (the object store and Redis clients connect lazily).
    """
    threads = ThreadService(PostgresThreadStore(pool), journal)
    if pinned is None:
        pinned = memory.pinned if memory is not None else NoPinnedFacts()
    if summaries is None:
        summaries = ObjectStoreSummaryReader.from_settings(settings)
        if summary_cache is None and settings.redis_url is not None:
            summary_cache = RedisSummaryCache.from_settings(settings)
    if summary_cache is not None:
        summaries = CachedSummaryReader(summary_cache, summaries)
    reader = ContextReader(journal, threads, pinned, summaries)
    return ApiDeps(
        settings=settings,
        journal=journal,
        pool=pool,
        threads=threads,
        context_reader=reader,
        memory=memory,
        summary_cache=summary_cache,
        transcripts=transcripts,
        object_store=ObjectStoreProbe.from_settings(settings),
        processors=processors,
    )
