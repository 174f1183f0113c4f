"""How the node's components are built and connected (`build_node`); `memstream.node` runs them.

`build_node` does the start-up work that precedes serving: the relays (one per journal shard,
each woken by its shard's append listener instead of polling; `core.sharding.shards`), the topic
sync (checked once here, before any relay runs; once the processors exist it restarts the
consumers of a replaced topic: `memstream.ops.topic_restart`), the compaction recovery, the
shared engines, agent memory, the ClickHouse schema (a server that is down is only logged: the
projection creates it later), the object-store probe, the processor supervisor, the FastAPI app
with the admin router and the MCP endpoint (`memstream.mcp_server.http`, at `/mcp/{agent_id}`),
and the read-only SQL endpoint on its own port (`memstream.sql`, when `settings.sql.enabled`). It
opens no server and starts no task: `Node.tasks` starts the components, `Node.close` releases what
`build_node` opened (the pool and the shards' journals belong to the caller).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg
from fastapi import FastAPI

from core.config import Settings
from core.memory.clock import utc_now
from core.memory.hygiene import run_daily
from core.metrics import REGISTRY
from core.sharding.journal import ShardedJournal
from core.sql.service import SqlService
from core.stores.transcripts import TranscriptUnavailable
from core.thread_deletion import ThreadDeletion
from core.transcripts.rerank import DenseRerank
from core.transcripts.tools import JournalTools
from core.user_erasure import UserErasure
from memstream.api.app import create_app
from memstream.api.deps import MemoryDeps
from memstream.api.routes.admin import AdminDeps, admin_router
from memstream.api.routes.metrics import metrics_router
from memstream.api.routes.shard_journal import shard_journal_router
from memstream.api.routes.shard_messages import shard_messages_router
from memstream.deletion_steps import deletion_steps
from memstream.engines import Engines
from memstream.erasure_steps import QueryVectorsStep
from memstream.fencing import watch_fence
from memstream.mcp_server.http import MOUNT_PATH, McpEndpoint
from memstream.metrics import NodeFigures
from memstream.ops.topic_restart import ConsumerRestart
from memstream.ops.verify_erasures import ErasureStores
from memstream.sharding.journal_views import LazyJournalViews
from memstream.sql.server import SqlEndpoint
from memstream.wiring.accounts import build_account_stores
from memstream.wiring.api import build_api_deps, build_memory_deps
from memstream.wiring.membership import Membership, build_membership
from memstream.wiring.processors import (
    SOURCES,
    build_recovery,
    consumers_of,
    create_processor,
    enabled,
    node_processor_names,
    summarizer_lock_namespace,
    threshold_store,
)
from memstream.wiring.projection_ops import projection_ops
from processors.compaction_recovery import CompactionRecovery
from sinks.objectstore.health import ObjectStoreProbe
from sinks.objectstore.summaries import ObjectStoreSummaryWriter
from sinks.postgres.compactions import PostgresCompactions, compaction_totals
from sinks.postgres.deletions import PostgresDeletions
from sinks.postgres.erasures import PostgresErasures
from sinks.postgres.invalidation import PostgresInvalidations
from sinks.postgres.outbox import PostgresEntriesOutbox
from sinks.postgres.progress import PostgresProgress
from sinks.postgres.threads import PostgresThreadStore
from sinks.redis.locks import RedisLocks
from sinks.redis.summary_cache import RedisSummaryCache
from sinks.redis.thresholds import RedisThresholdStore
from sinks.slatedb.journal import SlateJournal
from streams.admin import apply_topics
from streams.deletions import DeletionEvents
from streams.journal_shards import LocalShard, LocalShards, relay_lag
from streams.relays.journal import JOURNAL_TOPIC, Relay
from streams.relays.memory_entries import EntriesOutboxRelay
from streams.runtime.processor import group_id
from streams.runtime.supervisor import ProcessorSupervisor
from streams.topic_guards import EntriesTopicGuard, JournalTopicGuard, compaction_guards
from streams.topic_sync import TopicSync, in_admin_thread
from streams.topics import load_topics

log = logging.getLogger("memstream.node")


@dataclass
class Node:
    """The node's built components (see the module doc)."""

    settings: Settings
    journal: ShardedJournal[SlateJournal]
    """Routes every thread to its shard's journal (`core.sharding.journal`)."""
    shards: LocalShards
    """Each local shard's journal, relay and topic guard."""
    app: FastAPI
    entries_relay: EntriesOutboxRelay
    topic_sync: TopicSync
    recovery: CompactionRecovery
    supervisor: ProcessorSupervisor
    engines: Engines
    summary_cache: RedisSummaryCache
    memory: MemoryDeps
    invalidations: PostgresInvalidations
    figures: NodeFigures
    mcp: McpEndpoint
    deletion_events: DeletionEvents
    deletions: ThreadDeletion
    erasures: UserErasure
    deletion_thresholds: RedisThresholdStore
    sql: SqlEndpoint | None = None
    membership: Membership | None = None
    """With `settings.membership`: the loop deciding which shards are local, and the forwarding."""

    def tasks(self, stop: asyncio.Event) -> list[asyncio.Task[None]]:
        """Start every component except the API; each runs until `stop` is set (or it fails)."""
        tasks = [
            *(
                asyncio.create_task(local.relay.run(stop), name=_named("relay", local, self.journal.shards))
                for local in self.shards
            ),
            asyncio.create_task(self.entries_relay.run(stop), name="memory-outbox-relay"),
            asyncio.create_task(self.supervisor.run(stop), name="processors"),
            asyncio.create_task(self.recovery.run(stop), name="compaction-recovery"),
            asyncio.create_task(self.topic_sync.run(stop), name="topic-sync"),
            asyncio.create_task(
                run_daily(self.memory.service, utc_now, stop, at=self.settings.hygiene_at), name="hygiene"
            ),
            *(
                asyncio.create_task(
                    watch_fence(local.journal, stop), name=_named("fence-watch", local, self.journal.shards)
                )
                for local in self.shards
            ),
            asyncio.create_task(self.invalidations.run(stop), name="cache-invalidation"),
            asyncio.create_task(self.figures.run(stop), name="metrics"),
            asyncio.create_task(self.mcp.run(stop), name="mcp"),
            asyncio.create_task(self._resume_deletions(stop), name="deletions"),
        ]
        if self.sql is not None:
            tasks.append(asyncio.create_task(self.sql.run(stop), name="sql"))
        if self.membership is not None:
            tasks.append(asyncio.create_task(self.membership.loop.run(stop), name="membership"))
        return tasks

    async def _resume_deletions(self, stop: asyncio.Event) -> None:
        """Finish the thread deletions a crash left incomplete (`core.thread_deletion`), then the
        user erasures (`core.user_erasure`: theirs were among them), then wait for `stop` (a node
        task ends only when the node stops)."""
        try:
            finished = await self.deletions.resume()
            if finished:
                log.info("finished %d interrupted thread deletion(s)", len(finished))
        except Exception:
            log.exception("the incomplete thread deletions could not be read; a repeated DELETE finishes one")
        try:
            erased = await self.erasures.resume()
            if erased:
                log.info("finished %d interrupted user erasure(s)", len(erased))
        except Exception:
            log.exception(
                "the incomplete user erasures could not be read; the same erasure again finishes one"
            )
        await stop.wait()

    async def close(self) -> None:
        """Write the recall counters still waiting, then close the relays' producers, the engines
        and the summary cache (after the tasks ended; before the pool closes)."""
        with contextlib.suppress(KeyError):
            REGISTRY.unregister(self.figures)
        await self.memory.recaller.counts.drain()
        if self.membership is not None:
            await self.membership.aclose()  # and the shards the loop did not close (it was cancelled)
        for local in self.shards:
            await local.relay.close()
        await self.entries_relay.close()
        self.deletion_events.close()
        await self.deletion_thresholds.aclose()
        await self.engines.close()
        await self.summary_cache.aclose()


def _named(task: str, local: LocalShard, shards: int) -> str:
    """A task's name: `relay`, or `relay shard 2` when there are several shards."""
    return task if shards == 1 else f"{task} shard {local.shard}"


async def build_node(
    settings: Settings,
    pool: asyncpg.Pool,
    journals: ShardedJournal[SlateJournal],
    *,
    created_topics: Sequence[str],
    admin_token: str,
) -> Node:
    """Build the node over a migrated pool and the open journals of its shards (`journals`: every
    shard of `settings.journal_shards` is local today); `created_topics` are the topics this start
    created (the topic sync and the recovery treat them as lost and refilled)."""
    topic_sync: TopicSync
    recovery: CompactionRecovery

    async def topic_missing() -> None:
        # The broker lost a topic while we ran (the embedded broker keeps topics in memory): declare
        # the topics again and publish what the consumers lack (they are idempotent).
        report = await in_admin_thread(apply_topics, settings, load_topics())
        recovery.topics_applied(report.created)
        await topic_sync.check(created=report.created)

    progress = PostgresProgress(pool)
    journal_groups = [group_id(name, settings) for name in consumers_of(JOURNAL_TOPIC, settings)]

    def local_shard(shard: int, shard_journal: SlateJournal) -> LocalShard:
        relay = Relay(
            shard_journal,
            settings,
            on_topic_missing=topic_missing,
            bounds_store=progress,
            shard=shard if journals.shards > 1 else None,
        )
        shard_journal.add_append_listener(relay.notify)  # wake the relay after every durable append
        guard = JournalTopicGuard(shard_journal, relay, progress, journal_groups)
        return LocalShard(shard, shard_journal, relay, guard)

    shards = [local_shard(shard, shard_journal) for shard, shard_journal in journals.local().items()]
    entries_relay = EntriesOutboxRelay(PostgresEntriesOutbox(pool), settings)
    topic_sync = TopicSync(
        settings,
        [
            *(local.guard for local in shards),
            EntriesTopicGuard(pool, entries_relay),
            *compaction_guards(settings, pool, lambda: recovery.topics_lost()),
        ],
        on_topics_applied=lambda created: recovery.topics_applied(created),
    )
    # With membership the processors read every shard through read-only views (most threads are
    # written by other nodes); without, through the node's writers.
    views = LazyJournalViews(settings) if settings.membership else None
    engines = Engines(settings, journal=views or journals, pool=pool)
    recovery = build_recovery(
        settings, engines, created_topics=created_topics, on_topic_missing=topic_missing
    )
    await topic_sync.check(created=created_topics)  # before the relays run
    memory = build_memory_deps(pool, engines.embedder(), engines.sparse(), engines.index())
    summary_cache = RedisSummaryCache.from_settings(settings)  # Redis: embedded or configured
    transcripts = engines.transcripts()
    if settings.hosts_projections:  # else the node hosting the embedded projections serves them
        try:
            await transcripts.ensure_schema()
        except TranscriptUnavailable as exc:  # a server DSN that is down: the projection creates it later
            log.warning(
                "ClickHouse is not reachable yet (%s): transcript search answers 503 until it is", exc
            )
    await ObjectStoreProbe.from_settings(settings).log_if_not_ready()  # e.g. a missing S3 bucket
    rerank = (
        DenseRerank(engines.message_vectors(), engines.embedder()) if settings.transcript_vectors else None
    )
    journal_tools = JournalTools.build(transcripts, engines.chat_model(), rerank)
    supervisor = ProcessorSupervisor(  # restarts a crashed processor alone: it never stops the node
        {
            name: functools.partial(create_processor, name, settings, engines=engines)
            for name in node_processor_names(settings)  # the others run in workers
        },
        settings,
        progress=progress,
    )
    topic_sync.restart_consumers = ConsumerRestart(settings, supervisor, consumers_of)
    invalidations = PostgresInvalidations(pool)  # the API's caches' change feed (LISTEN)
    deletion_events = DeletionEvents(settings)
    deletion_thresholds = threshold_store(settings)  # its own Redis client, closed by `close`
    compactions = PostgresCompactions(pool)
    steps = deletion_steps(
        ObjectStoreSummaryWriter.from_settings(settings),
        deletion_thresholds,
        compactions,
        memory.service,
        summary_cache,
        RedisLocks(deletion_thresholds.client, namespace=summarizer_lock_namespace(settings)),
    )
    membership = (
        build_membership(settings, pool, journals, shards, topic_sync, local_shard, admin_token)
        if settings.membership
        else None
    )
    api_deps = build_api_deps(
        settings,
        membership.journal if membership is not None else journals,
        pool,
        memory=memory,
        summary_cache=summary_cache,
        transcripts=journal_tools,
        processors=supervisor,
        invalidations=invalidations,
        publish_deletion=deletion_events.publish,
        deletion_steps=steps,
        erasure_steps=[
            QueryVectorsStep([memory.recaller.query_vectors, *([rerank.queries] if rerank else [])])
        ],
    )
    assert api_deps.deletions is not None and api_deps.erasures is not None
    app = create_app(api_deps, forwarding=membership.forwarding if membership else None)

    figures = NodeFigures(
        settings,
        {name: topics for name, topics in SOURCES.items() if enabled(name, settings)},
        relay_lag=functools.partial(relay_lag, shards),
        totals=lambda: compaction_totals(pool, settings.environment),
    )
    ops = projection_ops(
        engines, journals, shards, views, membership.full_history if membership is not None else None
    )
    app.include_router(
        admin_router(
            AdminDeps(
                settings=settings,
                token=admin_token,
                journal=ops.journal,
                shards=shards,
                every_shard=ops.every_shard,
                processors=supervisor,
                transcripts=engines.transcripts,
                rebuilders=ops.rebuilders,
                forget_progress=progress.forget,
                figures=figures,
                accounts=build_account_stores(
                    settings, pool, membership.journal if membership is not None else journals, summary_cache
                ),
                deletions=PostgresDeletions(pool),
                message_vectors=engines.message_vectors,
                erasures=api_deps.erasures,
                erasure_stores=ErasureStores(
                    PostgresErasures(pool), PostgresDeletions(pool), PostgresThreadStore(pool), memory.service
                ),
                owner_republish=membership.republish if membership is not None else None,
            )
        )
    )
    app.include_router(metrics_router(admin_token, settings))
    if membership is not None:  # other nodes delete, read and append threads of its shards through it
        app.include_router(shard_journal_router(journals, shards, admin_token, settings))
        app.include_router(shard_messages_router(journals, admin_token, settings))
    REGISTRY.register(figures)  # unregistered by `close`
    mcp = McpEndpoint(api_deps)
    app.mount(MOUNT_PATH, mcp)  # after every route: the API's (and FastRoutes before them) come first
    sql = (
        SqlEndpoint(
            settings, SqlService(engines.sql(), settings.sql, settings.environment), api_deps.api_keys
        )
        if settings.sql.enabled and settings.hosts_projections
        else None
    )
    if settings.sql.enabled and sql is None:
        log.info("SQL endpoint: off on this node (the node hosting the embedded projections serves it)")
    return Node(
        settings=settings,
        journal=journals,
        shards=shards,
        app=app,
        entries_relay=entries_relay,
        topic_sync=topic_sync,
        recovery=recovery,
        supervisor=supervisor,
        engines=engines,
        summary_cache=summary_cache,
        memory=memory,
        invalidations=invalidations,
        figures=figures,
        mcp=mcp,
        deletion_events=deletion_events,
        deletions=api_deps.deletions,
        erasures=api_deps.erasures,
        deletion_thresholds=deletion_thresholds,
        sql=sql,
        membership=membership,
    )
