"""How the API's dependencies are built (the node's wiring; tests use the same): `build_api_deps`
and `build_memory_deps` (see `memstream.api.deps` for who opens and closes what). Neither does I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

from core.cached_agents import CachedAgents
from core.cached_api_keys import CachedApiKeys
from core.cached_pinned import CachedPinnedFacts
from core.cached_summaries import CachedSummaries
from core.cached_threads import CachedThreads
from core.config import Settings
from core.embeddings.base import Embedder, SparseEncoder
from core.memory.agents import AgentService
from core.memory.clock import Clock, utc_now
from core.memory.pinned import MemoryPinnedFacts, NoPinnedFacts, PinnedFactsProvider
from core.memory.recall import Recaller
from core.memory.service import MemoryService
from core.memory.tools import MemoryTools
from core.stores.api_keys import ApiKeyStore
from core.stores.journal import ThreadJournal
from core.stores.vectors import VectorIndex
from core.summaries.layered import CachedSummaryReader
from core.summaries.models import SummaryHistory, SummaryReader
from core.thread_deletion import DeletionStep, Publish, ThreadDeletion
from core.threads import ThreadService, ThreadStore
from core.transcripts.tools import JournalTools
from core.turn_context import ContextReader
from core.user_erasure import ErasureStep, UserErasure
from memstream.api.deps import ApiDeps, MemoryDeps, ProcessorStatuses
from sinks.objectstore.health import ObjectStoreProbe
from sinks.objectstore.summaries import ObjectStoreSummaryReader
from sinks.postgres.agents import PostgresAgents
from sinks.postgres.api_keys import PostgresApiKeys
from sinks.postgres.deletions import PostgresDeletions
from sinks.postgres.erasures import PostgresErasures
from sinks.postgres.invalidation import (
    AGENTS_CHANNEL,
    API_KEYS_CHANNEL,
    PINNED_CHANNEL,
    SUMMARIES_CHANNEL,
    THREADS_CHANNEL,
    PostgresInvalidations,
)
from sinks.postgres.memory import PostgresMemoryStore
from sinks.postgres.threads import PostgresThreadStore
from sinks.redis.summary_cache import RedisSummaryCache


def build_memory_deps(
    pool: asyncpg.Pool,
    embedder: Embedder,
    sparse: SparseEncoder,
    index: VectorIndex,
    *,
    clock: Clock = utc_now,
) -> MemoryDeps:
    """The standard wiring of agent memory over one pool, embedder, sparse encoder and index. Does
    no I/O."""
    service = MemoryService(PostgresMemoryStore(pool), clock)
    recaller = Recaller(service, embedder, sparse, index, model_id=embedder.model_id)
    return MemoryDeps(
        service=service,
        agents=AgentService(PostgresAgents(pool)),
        recaller=recaller,
        tools=MemoryTools(service, recaller),
        pinned=MemoryPinnedFacts(service, clock),
    )


def build_api_deps(
    settings: Settings,
    journal: ThreadJournal,
    pool: asyncpg.Pool,
    *,
    summaries: SummaryReader | None = None,
    pinned: PinnedFactsProvider | None = None,
    memory: MemoryDeps | None = None,
    summary_cache: RedisSummaryCache | None = None,
    transcripts: JournalTools | None = None,
    processors: ProcessorStatuses | None = None,
    invalidations: PostgresInvalidations | None = None,
    publish_deletion: Publish | None = None,
    deletion_steps: Sequence[DeletionStep] = (),
    erasure_steps: Sequence[ErasureStep] = (),
) -> ApiDeps:
    """The standard wiring: Postgres threads, summaries from `settings.object_store` (through the
    Redis cache `summary_cache`, else through one on `settings.redis` when `settings.redis_url` is
    set, else uncached), pinned facts from `pinned`, else from agent memory when `memory` is
    given, else none; the journal tools from `transcripts` when given; `/readyz` reports
    `processors` when given. `summaries`, when given,
    replaces the object store reader (and is cached only when `summary_cache` is given too).
    `/readyz` checks `settings.object_store` (the summarizer writes there whatever the reader).
    With `invalidations` (whose `run` the caller starts), API keys, threads, agents' bindings, agent
    memory's pinned facts and summaries are looked up through caches fed by it
    (`core.cached_api_keys`, `core.cached_threads`, `core.cached_agents`, `core.cached_pinned`,
    `core.cached_summaries`; `settings.*_cache_ttl_s`); without, in Postgres (and Redis).
    With `publish_deletion` (`streams.deletions.DeletionEvents.publish`), threads can be deleted
    (`core.thread_deletion`, register in Postgres, then `deletion_steps`), and users erased
    (`core.user_erasure`: their threads as above, their agent memory when `memory` is given, then
    `erasure_steps`).

    Does no I/O (the object store and Redis clients connect lazily).
    """
    thread_store: ThreadStore = PostgresThreadStore(pool)
    if invalidations is not None and settings.thread_cache_ttl_s > 0:
        cached_threads = CachedThreads(thread_store, ttl_s=settings.thread_cache_ttl_s)
        invalidations.subscribe(THREADS_CHANNEL, cached_threads)
        thread_store = cached_threads
    threads = ThreadService(thread_store, journal)
    if pinned is None:
        pinned = memory.pinned if memory is not None else NoPinnedFacts()
        if memory is not None and invalidations is not None and settings.pinned_cache_ttl_s > 0:
            cached_pinned = CachedPinnedFacts(memory.pinned, ttl_s=settings.pinned_cache_ttl_s)
            invalidations.subscribe(PINNED_CHANNEL, cached_pinned)
            memory.service.listen(cached_pinned.changed)
            pinned = cached_pinned
    if summaries is None:
        summaries = ObjectStoreSummaryReader.from_settings(settings)
        if summary_cache is None and settings.redis_url is not None:
            summary_cache = RedisSummaryCache.from_settings(settings)
    history = summaries if isinstance(summaries, SummaryHistory) else None  # every version, uncached
    if summary_cache is not None:
        summaries = CachedSummaryReader(summary_cache, summaries)
    if invalidations is not None and settings.summary_cache_ttl_s > 0:
        cached_summaries = CachedSummaries(summaries, ttl_s=settings.summary_cache_ttl_s)
        invalidations.subscribe(SUMMARIES_CHANNEL, cached_summaries)
        summaries = cached_summaries
    reader = ContextReader(journal, threads, pinned, summaries, history)
    api_keys: ApiKeyStore = PostgresApiKeys(pool)
    if invalidations is not None and settings.api_key_cache_ttl_s > 0:
        cached = CachedApiKeys(api_keys, ttl_s=settings.api_key_cache_ttl_s)
        invalidations.subscribe(API_KEYS_CHANNEL, cached)
        api_keys = cached
    agents = memory.agents if memory is not None else AgentService(PostgresAgents(pool))
    if invalidations is not None and settings.agent_cache_ttl_s > 0:
        cached_agents = CachedAgents(PostgresAgents(pool), ttl_s=settings.agent_cache_ttl_s)
        invalidations.subscribe(AGENTS_CHANNEL, cached_agents)
        agents = AgentService(cached_agents)
    deletions: ThreadDeletion | None = None
    erasures: UserErasure | None = None
    if publish_deletion is not None:
        deletions = ThreadDeletion(
            thread_store, journal, PostgresDeletions(pool), publish_deletion, deletion_steps
        )
        erasures = UserErasure(
            thread_store,
            deletions,
            PostgresErasures(pool),
            memory.service if memory is not None else None,
            erasure_steps,
        )
    return ApiDeps(
        settings=settings,
        journal=journal,
        pool=pool,
        api_keys=api_keys,
        agents=agents,
        threads=threads,
        context_reader=reader,
        memory=memory,
        summary_cache=summary_cache,
        transcripts=transcripts,
        object_store=ObjectStoreProbe.from_settings(settings),
        processors=processors,
        deletions=deletions,
        erasures=erasures,
    )
