"""The processors memstream ships, by name: what `memstream worker NAME` and the node can run, and
how each is built (`build_<name>`, plus the node's compaction recovery and the shared threshold
store).

Each entry maps a processor name (its step id and consumer group `memstream.<name>`) to a factory
building the processor from the settings. A processor listed here must also be listed under
`dead_letter.processors` in topics.yaml, so that its dead-letter topic exists.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from core.config import Settings
from streams.runtime.errors import UnknownProcessor
from streams.runtime.processor import Processor

if TYPE_CHECKING:  # the processor modules load on use (each builder imports its own)
    from memstream.engines import Engines
    from processors.clickhouse_projection import ClickHouseProjection
    from processors.compaction_recovery import CompactionRecovery
    from processors.flush import Flush
    from processors.qdrant_projection import QdrantProjection
    from processors.summarizer import Summarizer
    from processors.thresholds import Thresholds
    from processors.transcript_vectors import TranscriptVectors
    from sinks.redis.thresholds import RedisThresholdStore

ProcessorFactory = Callable[[Settings, "Engines | None"], Processor]
"""Builds a processor. With `engines` (the node), shared engines are used and left open; without
(a worker alone), the processor builds its own and closes them when it stops."""


def build_clickhouse_projection(settings: Settings, engines: Engines | None = None) -> ClickHouseProjection:
    """The processor for `settings` (`settings.clickhouse`). With the process's `engines` (a chdb
    path can be open in one process only), the store is shared and the caller closes it; without
    (`memstream worker clickhouse-projection`), the processor opens its own and closes it."""
    # imported on use (as in every builder below): it loads clickhouse-connect
    from processors.clickhouse_projection import ClickHouseProjection
    from sinks.clickhouse.factory import build_transcript_store
    from sinks.postgres.deletions import OwnPoolDeletions, PostgresDeletions

    if engines is not None and engines.pool is not None:
        register = PostgresDeletions(engines.pool)
        return ClickHouseProjection(engines.transcripts(), close_store=False, tombstones=register)
    tombstones = OwnPoolDeletions(settings)
    if engines is not None:
        return ClickHouseProjection(engines.transcripts(), close_store=False, tombstones=tombstones)
    return ClickHouseProjection(build_transcript_store(settings), tombstones=tombstones)


def build_transcript_vectors(settings: Settings, engines: Engines | None = None) -> TranscriptVectors:
    """The processor for `settings` (`settings.clickhouse`, `settings.embedding_model`). With the
    process's `engines`, the transcript store's client and the embedder are shared (the caller
    closes them); without (`memstream worker transcript-vectors`), it opens its own store and
    closes it. Built whether or not `settings.transcript_vectors` is on: `enabled` decides
    whether it runs."""
    from processors.transcript_vectors import TranscriptVectors
    from sinks.clickhouse.factory import build_transcript_store
    from sinks.clickhouse.vectors import ClickHouseMessageVectors
    from sinks.embeddings.factory import build_embedder
    from sinks.postgres.deletions import OwnPoolDeletions, PostgresDeletions

    if engines is not None:
        register = PostgresDeletions(engines.pool) if engines.pool is not None else OwnPoolDeletions(settings)
        return TranscriptVectors(engines.message_vectors(), engines.embedder(), tombstones=register)
    store = ClickHouseMessageVectors(build_transcript_store(settings), close_store=True)
    embedder = build_embedder(settings.embedding_model)
    return TranscriptVectors(store, embedder, tombstones=OwnPoolDeletions(settings))


def build_flush(settings: Settings, engines: Engines | None = None) -> Flush:
    """The processor with the node's journal, agent memory on its Postgres pool and its chat model
    (`engines`). Without the journal or the pool it refuses to start (NeedsNode). Does no I/O."""
    from core.memory.agents import AgentService
    from core.memory.service import MemoryService
    from processors.flush import Flush
    from sinks.postgres.agents import PostgresAgents
    from sinks.postgres.memory import PostgresMemoryStore

    pool = engines.pool if engines is not None else None
    return Flush(
        settings,
        engines.journal if engines is not None else None,
        MemoryService(PostgresMemoryStore(pool)) if pool is not None else None,
        AgentService(PostgresAgents(pool)) if pool is not None else None,
        open_chat_model=engines.chat_model if engines is not None else None,
    )


def build_qdrant_projection(settings: Settings, engines: Engines | None = None) -> QdrantProjection:
    """The processor for `settings` (`settings.qdrant`, `settings.embedding_model`). With the
    process's `engines` (an Edge shard can be open once per process), the index and the model are
    shared and the caller closes them; without, the processor opens its own and closes them. It
    notes applied outbox records on the node's pool, or on its own pool to `settings.postgres`."""
    from processors.qdrant_projection import QdrantProjection
    from sinks.embeddings.bm25 import Bm25Sparse
    from sinks.embeddings.factory import build_embedder
    from sinks.postgres.outbox import PostgresAppliedOutbox
    from sinks.qdrant.factory import build_index

    if engines is not None:
        applied = (
            PostgresAppliedOutbox(engines.pool)
            if engines.pool is not None
            else PostgresAppliedOutbox(dsn=settings.postgres)
        )
        return QdrantProjection(
            engines.index(), engines.embedder(), engines.sparse(), close_index=False, applied=applied
        )
    return QdrantProjection(
        build_index(settings),
        build_embedder(settings.embedding_model),
        Bm25Sparse(),
        applied=PostgresAppliedOutbox(dsn=settings.postgres),
    )


def threshold_namespace(settings: Settings) -> str:
    """The Redis namespace of one deployment's counters: its journal (the authority they derive
    from), so deployments sharing a Redis never share counters."""
    from sinks.redis.thresholds import DEFAULT_NAMESPACE

    digest = hashlib.sha256(settings.journal.encode("utf-8")).hexdigest()[:16]
    return f"{DEFAULT_NAMESPACE}/{digest}"


def threshold_store(settings: Settings) -> RedisThresholdStore:
    """The deployment's threshold state on `settings.redis` (its own client: `aclose` it). The
    summarizer uses it too: `release_guard(scope_of(message))` and `reset_counters(scope, offset)`
    after its summary is written. Does no I/O."""
    from processors.thresholds import MESSAGE_LIMIT, TOKEN_LIMIT
    from sinks.redis.thresholds import RedisThresholdStore

    return RedisThresholdStore.from_url(
        settings.redis,
        token_limit=TOKEN_LIMIT,
        message_limit=MESSAGE_LIMIT,
        namespace=threshold_namespace(settings),
    )


def build_thresholds(
    settings: Settings, engines: Engines | None = None, *, name: str = "thresholds"
) -> Thresholds:
    """The processor for `settings` (`settings.redis`, `settings.object_store`) with the node's
    journal and Postgres pool (`engines`). Without them the processor refuses to start
    (NeedsNodeJournal). `name` is the consumer's name (the compaction recovery drives its own)."""
    from processors.thresholds import Thresholds
    from sinks.objectstore.summaries import ObjectStoreSummaryWriter
    from sinks.postgres.compactions import PostgresCompactions
    from sinks.postgres.deletions import PostgresDeletions

    store = threshold_store(settings)
    journal = engines.journal if engines is not None else None
    pool = engines.pool if engines is not None else None
    return Thresholds(
        settings,
        store,
        journal,
        None,
        ledger=PostgresCompactions(pool) if pool is not None else None,
        open_summaries=lambda: ObjectStoreSummaryWriter.from_settings(settings),
        name=name,
        tombstones=PostgresDeletions(pool) if pool is not None else None,
    )


def summarizer_lock_namespace(settings: Settings) -> str:
    """The Redis namespace of one deployment's summarization locks (a hash of its journal URL)."""
    return "memstream/summarizer/" + hashlib.sha256(settings.journal.encode("utf-8")).hexdigest()[:16]


def build_summarizer(settings: Settings, engines: Engines | None = None) -> Summarizer:
    """The processor for `settings` (`settings.redis`, `settings.object_store`) with the node's
    journal, Postgres pool and chat model (`engines`). Without the journal or the pool it refuses to
    start (NeedsNodeJournal)."""
    from core.summaries.layered import CachedSummaryWriter, MonotonicSummaryStore
    from core.summaries.models import SummaryStore
    from processors.errors import NeedsNodeJournal
    from processors.summarizer import Summarizer
    from sinks.objectstore.summaries import ObjectStoreSummaryWriter
    from sinks.postgres.compactions import PostgresCompactions, PostgresSummaryVersions
    from sinks.redis.client import redis_client
    from sinks.redis.locks import RedisLocks
    from sinks.redis.summary_cache import RedisSummaryCache

    thresholds = threshold_store(settings)
    cache = RedisSummaryCache.from_settings(settings)
    lock_client = redis_client(settings.redis, timeout_s=2.0)
    pool = engines.pool if engines is not None else None

    def open_summaries() -> SummaryStore:
        cached = CachedSummaryWriter(cache, ObjectStoreSummaryWriter.from_settings(settings))
        if pool is None:
            raise NeedsNodeJournal("the summarizer needs the node's Postgres pool")
        return MonotonicSummaryStore(cached, PostgresSummaryVersions(pool))

    return Summarizer(
        thresholds=thresholds,
        summaries=None,
        open_summaries=open_summaries,
        locks=RedisLocks(lock_client, namespace=summarizer_lock_namespace(settings)),
        journal=engines.journal if engines is not None else None,
        ledger=PostgresCompactions(pool) if pool is not None else None,
        chat_model_factory=engines.chat_model if engines is not None else None,
        closers=(thresholds.aclose, cache.aclose, lock_client.aclose),
    )


def build_recovery(
    settings: Settings,
    engines: Engines,
    *,
    created_topics: Iterable[str] = (),
    on_topic_missing: Callable[[], Awaitable[None]] | None = None,
) -> CompactionRecovery:
    """The node's compaction recovery over its journal and Postgres pool (`engines`);
    `created_topics` are the topics the node's start-up had to create (every open request is
    requested again at once when the compaction topics are among them). Does no I/O."""
    from processors.compaction_recovery import NAME, CompactionRecovery, requests_lost
    from sinks.postgres.compactions import PostgresCompactions

    if engines.pool is None or engines.journal is None:
        raise ValueError("the compaction recovery needs the node's journal and Postgres pool")
    thresholds = build_thresholds(settings, engines, name=NAME)
    ledger = PostgresCompactions(engines.pool)
    return CompactionRecovery(
        thresholds,
        ledger,
        lost_at_start=requests_lost(created_topics),
        on_topic_missing=on_topic_missing,
    )


PROCESSORS: Mapping[str, ProcessorFactory] = {
    "clickhouse-projection": build_clickhouse_projection,
    "flush": build_flush,
    "qdrant-projection": build_qdrant_projection,
    "summarizer": build_summarizer,
    "thresholds": build_thresholds,
    "transcript-vectors": build_transcript_vectors,
}
"""Registered processors, by name."""

OPT_IN: Mapping[str, Callable[[Settings], bool]] = {
    "transcript-vectors": lambda settings: settings.transcript_vectors,
}
"""The processors that run only when their setting is on (`enabled`); the others always do."""


def enabled(name: str, settings: Settings) -> bool:
    """Whether processor `name` runs under `settings` (an opt-in one only when switched on)."""
    switch = OPT_IN.get(name)
    return switch is None or switch(settings)


SOURCES: Mapping[str, tuple[str, ...]] = {
    "clickhouse-projection": ("journal.messages", "journal.deletions"),
    "flush": ("compaction.requested",),
    "qdrant-projection": ("memory.entries",),
    "summarizer": ("compaction.flushed",),
    "thresholds": ("journal.messages", "journal.deletions"),
    "transcript-vectors": ("journal.messages", "journal.deletions"),
}
"""The topics each registered processor consumes (as its `source_topics`; a test keeps them equal),
known without building the processor: the node republishes a topic from the lowest progress of
the groups that consume it."""


THREAD_MEMORY: tuple[str, ...] = ("flush", "summarizer", "thresholds")
"""The processors that read the journal and write through the node's Postgres pool (a thread's
counters, compaction, agent-memory flush, summary). Outside the node, `memstream worker` gives them
a read-only view of the journal (`sinks.slatedb.reader`), its own pool and chat model. Run together
as `memstream worker --group thread-memory`; `memstream up` runs them in such a worker."""

GROUPS: Mapping[str, tuple[str, ...]] = {"thread-memory": THREAD_MEMORY}
"""Named sets of processors that `memstream worker --group NAME` runs."""


PROJECTIONS: Mapping[str, Callable[[Settings], bool]] = {
    "clickhouse-projection": lambda settings: settings.clickhouse.startswith("chdb://"),
    "qdrant-projection": lambda settings: settings.qdrant.startswith("edge://"),
    "transcript-vectors": lambda settings: settings.clickhouse.startswith("chdb://"),
}
"""The processors writing an engine that may be embedded, and whether it is under the settings: with
the shard membership they run only on the node hosting the embedded projections."""


def node_processor_names(settings: Settings) -> list[str]:
    """The processors the node hosts: `settings.node_processors`, or every registered one when
    unset; either way only the `enabled` ones, and with the shard membership on a node that does
    not host the embedded projections, not those writing them (`PROJECTIONS`). An unknown name
    raises UnknownProcessor (listing the registered ones)."""
    if settings.node_processors is None:
        names = [name for name in processor_names() if enabled(name, settings)]
    else:
        for name in settings.node_processors:
            if name not in PROCESSORS:
                raise UnknownProcessor(name, list(PROCESSORS))
        names = sorted(name for name in set(settings.node_processors) if enabled(name, settings))
    if settings.hosts_projections:
        return names
    return [name for name in names if not ((embedded := PROJECTIONS.get(name)) and embedded(settings))]


def consumers_of(topic: str, settings: Settings | None = None) -> list[str]:
    """The registered processors that consume `topic` (unprefixed), sorted; with `settings`, only
    the `enabled` ones (a group that never runs must not hold the topic's progress back)."""
    return sorted(
        name
        for name, topics in SOURCES.items()
        if topic in topics and (settings is None or enabled(name, settings))
    )


def processor_names(registry: Mapping[str, ProcessorFactory] | None = None) -> list[str]:
    """The registered names, sorted."""
    return sorted(PROCESSORS if registry is None else registry)


def create_processor(
    name: str,
    settings: Settings,
    *,
    registry: Mapping[str, ProcessorFactory] | None = None,
    engines: Engines | None = None,
) -> Processor:
    """Build the registered processor `name`; `UnknownProcessor` (listing the names) otherwise."""
    factories = PROCESSORS if registry is None else registry
    try:
        factory = factories[name]
    except KeyError:
        raise UnknownProcessor(name, list(factories)) from None
    processor = factory(settings, engines)
    if processor.name != name:
        raise ValueError(
            f"processor factory registered as {name!r} built a processor named {processor.name!r}"
        )
    return processor
