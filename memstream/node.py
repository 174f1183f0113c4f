"""The node: one process hosting the HTTP API, the journal's single writer, the relays and the processors.

Start-up order: Postgres schema, topics (topics.yaml), the journal (this fences any previous
writer), the relay (resuming from its durable cursor; when the broker's topic is not the one the
cursor was confirmed on - the memory-only embedded broker lost it, or another node's relay moved
the cursor - from the lowest progress of the journal's consumer groups, `streams.topic_sync`,
which also re-checks every few seconds), the agent-memory outbox relay, the
processors (sharing the process's single index and embedding model with recall: `Engines`; run
by a `ProcessorSupervisor`, so the admin API can pause and resume one, a crashed one is restarted
alone and `/readyz` reports it degraded: a processor never stops the node), the compaction recovery
(`processors.compaction_recovery`: requests lost with the broker are requested again), the daily
hygiene pass,
then the API (with the operator commands under `/admin/v1`, behind the admin token: configured, or
generated into `{data_dir}/admin.token`).
Shutdown runs the other way round: the API stops taking appends, the relay publishes what is
durable, processors commit what is done, the journal and the pool close.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Iterator, Sequence

import asyncpg
import uvicorn

from core.config import Settings
from core.errors import JournalFenced
from core.journal.models import Message, NewMessage, ThreadRef
from core.memory.clock import utc_now
from core.memory.hygiene import run_daily
from core.stores.journal import Journal
from core.stores.transcripts import TranscriptUnavailable
from core.transcripts.tools import JournalTools
from memstream import exit_codes
from memstream.api.access_log import log_config
from memstream.api.app import create_app
from memstream.api.routes.admin import AdminDeps, Rebuilder, admin_router
from memstream.engines import Engines
from memstream.fencing import watch_fence
from memstream.ops.admin_token import ensure_admin_token
from memstream.ops.progress import ProgressCallback
from memstream.ops.rebuild import rebuild_clickhouse, rebuild_qdrant
from memstream.ops.topic_restart import ConsumerRestart
from memstream.permissions import restrict_dir, restrict_umask
from memstream.shutdown import StopSignals
from memstream.wiring.api import build_api_deps, build_memory_deps
from memstream.wiring.processors import build_recovery, consumers_of, create_processor, processor_names
from processors.compaction_recovery import CompactionRecovery
from sinks.objectstore.health import ObjectStoreProbe
from sinks.postgres.migrations import migrate
from sinks.postgres.pool import create_pool
from sinks.postgres.progress import PostgresProgress
from sinks.redis.summary_cache import RedisSummaryCache
from sinks.slatedb.journal import SlateJournal
from streams.admin import apply_topics
from streams.relays.journal import JOURNAL_TOPIC, Relay
from streams.relays.memory_entries import EntriesOutboxRelay
from streams.runtime.processor import group_id
from streams.runtime.supervisor import ProcessorSupervisor
from streams.topic_sync import (
    EntriesTopicGuard,
    JournalTopicGuard,
    TopicSync,
    compaction_guards,
    in_admin_thread,
)
from streams.topics import load_topics

log = logging.getLogger("memstream.node")


class NotifyingJournal:
    """The journal, waking the relay after every durable append (instead of it polling)."""

    def __init__(self, journal: SlateJournal, relay: Relay) -> None:
        self._journal = journal
        self._relay = relay

    async def append(
        self, thread: ThreadRef, agent_id: str, user_id: str | None, messages: Sequence[NewMessage]
    ) -> list[Message]:
        stored = await self._journal.append(thread, agent_id, user_id, messages)
        self._relay.notify()
        return stored

    async def last(self, thread: ThreadRef, n: int) -> list[Message]:
        return await self._journal.last(thread, n)

    async def after(self, thread: ThreadRef, offset: int, limit: int = 1000) -> list[Message]:
        return await self._journal.after(thread, offset, limit)

    async def read_from_seq(self, after_seq: int, limit: int) -> list[Message]:
        return await self._journal.read_from_seq(after_seq, limit)

    async def last_seq(self) -> int:
        return await self._journal.last_seq()

    async def get_cursor(self, name: str) -> int:
        return await self._journal.get_cursor(name)

    async def set_cursor(self, name: str, seq: int) -> None:
        await self._journal.set_cursor(name, seq)

    async def close(self) -> None:
        await self._journal.close()


async def run_node(settings: Settings, stop: asyncio.Event) -> None:
    """Run until `stop` is set (or a component fails, which is raised after a clean shutdown)."""
    restrict_dir(settings.data_path)
    log.info("configuration: %s", settings.describe())
    admin_token = ensure_admin_token(settings)
    pool = await create_pool(settings.postgres)
    try:
        await migrate(pool)
        report = await asyncio.to_thread(apply_topics, settings, load_topics())
        log.info("topics: %s", report.render().replace("\n", "; "))
        journal = await SlateJournal.open(
            settings.journal,
            s3=settings.s3,
            flush_interval_ms=settings.journal_flush_interval_ms,
            max_message_bytes=settings.journal_max_message_bytes,
        )
        try:
            await _serve(
                settings,
                stop,
                pool,
                journal,
                created_topics=report.created,
                admin_token=admin_token,
            )
        finally:
            await journal.close()
    finally:
        await pool.close()


async def _serve(
    settings: Settings,
    stop: asyncio.Event,
    pool: asyncpg.Pool,
    journal: SlateJournal,
    *,
    created_topics: Sequence[str],
    admin_token: str,
) -> None:
    topic_sync: TopicSync
    recovery: CompactionRecovery

    async def topic_missing() -> None:
        # The broker lost a topic while we ran (the embedded broker keeps topics in memory): declare
        # the topics again and publish what the consumers lack (they are idempotent).
        report = await in_admin_thread(apply_topics, settings, load_topics())
        recovery.topics_applied(report.created)
        await topic_sync.check(created=report.created)

    progress = PostgresProgress(pool)
    relay = Relay(journal, settings, on_topic_missing=topic_missing, bounds_store=progress)
    entries_relay = EntriesOutboxRelay(pool, settings)
    journal_groups = [group_id(name, settings) for name in consumers_of(JOURNAL_TOPIC)]
    journal_guard = JournalTopicGuard(journal, relay, progress, journal_groups)
    topic_sync = TopicSync(
        settings,
        [
            journal_guard,
            EntriesTopicGuard(pool, entries_relay),
            *compaction_guards(settings, pool, lambda: recovery.topics_lost()),
        ],
        on_topics_applied=lambda created: recovery.topics_applied(created),
    )
    api_journal: Journal = NotifyingJournal(journal, relay)
    engines = Engines(settings, journal=journal, pool=pool)
    recovery = build_recovery(
        settings, engines, created_topics=created_topics, on_topic_missing=topic_missing
    )
    await topic_sync.check(created=created_topics)  # before the relays run
    memory = build_memory_deps(pool, engines.embedder(), engines.sparse(), engines.index())
    summary_cache = RedisSummaryCache.from_settings(settings)  # Redis: embedded or configured
    transcripts = engines.transcripts()
    try:
        await transcripts.ensure_schema()
    except TranscriptUnavailable as exc:  # a server DSN that is down: the projection creates it later
        log.warning("ClickHouse is not reachable yet (%s): transcript search answers 503 until it is", exc)
    await ObjectStoreProbe.from_settings(settings).log_if_not_ready()  # e.g. a missing S3 bucket
    journal_tools = JournalTools.build(transcripts, engines.chat_model())
    supervisor = ProcessorSupervisor(  # restarts a crashed processor alone: it never stops the node
        {
            name: functools.partial(create_processor, name, settings, engines=engines)
            for name in processor_names()
        },
        settings,
        progress=progress,
    )
    topic_sync.restart_consumers = ConsumerRestart(settings, supervisor, consumers_of)
    app = create_app(
        build_api_deps(
            settings,
            api_journal,
            pool,
            memory=memory,
            summary_cache=summary_cache,
            transcripts=journal_tools,
            processors=supervisor,
        )
    )
    app.include_router(
        admin_router(
            AdminDeps(
                settings=settings,
                token=admin_token,
                journal=api_journal,
                relay=relay,
                processors=supervisor,
                transcripts=engines.transcripts,
                rebuilders=_rebuilders(engines, journal_guard),
                forget_progress=progress.forget,
            )
        )
    )
    server = _NodeServer(
        uvicorn.Config(
            app,
            host=settings.api_host,
            port=settings.api_port,
            log_level="info",
            lifespan="off",
            log_config=log_config(),
        )
    )
    components_stop = asyncio.Event()
    api = asyncio.create_task(server.serve(), name="api")
    components = [
        asyncio.create_task(relay.run(components_stop), name="relay"),
        asyncio.create_task(entries_relay.run(components_stop), name="memory-outbox-relay"),
        asyncio.create_task(supervisor.run(components_stop), name="processors"),
        asyncio.create_task(recovery.run(components_stop), name="compaction-recovery"),
        asyncio.create_task(topic_sync.run(components_stop), name="topic-sync"),
        asyncio.create_task(
            run_daily(memory.service, utc_now, components_stop, at=settings.hygiene_at), name="hygiene"
        ),
        asyncio.create_task(watch_fence(journal, components_stop), name="fence-watch"),
    ]
    stopper = asyncio.create_task(stop.wait(), name="stop")
    try:
        done, _ = await asyncio.wait({api, *components, stopper}, return_when=asyncio.FIRST_COMPLETED)
        for task in done - {stopper}:
            error = task.exception()
            log.error("%s stopped unexpectedly%s", task.get_name(), f": {error!r}" if error else "")
    finally:
        # API first (no new appends), then the relay publishes what is durable and processors
        # commit what is done.
        server.should_exit = True
        await asyncio.gather(api, return_exceptions=True)
        components_stop.set()
        stopper.cancel()
        results = await asyncio.gather(*components, return_exceptions=True)
        await relay.close()
        await entries_relay.close()
        await engines.close()
        await summary_cache.aclose()
    errors = [r for r in results if isinstance(r, Exception)]
    errors.sort(key=lambda error: not isinstance(error, JournalFenced))  # a fence explains the rest
    if errors and not stop.is_set():
        raise errors[0]


def _rebuilders(engines: Engines, journal_guard: JournalTopicGuard) -> dict[str, Rebuilder]:
    """`memstream rebuild clickhouse|qdrant`, run over the node's engines (the journal topic is
    first refilled from seq 1 when it may lack early seqs: the rebuild reads all of them)."""

    async def clickhouse(progress: ProgressCallback) -> object:
        await journal_guard.ensure_full_history()
        return await rebuild_clickhouse(engines, progress=progress)

    async def qdrant(progress: ProgressCallback) -> object:
        return await rebuild_qdrant(engines, progress=progress)

    return {"clickhouse": clickhouse, "qdrant": qdrant}


class _NodeServer(uvicorn.Server):
    """uvicorn without its own signal handling: the node owns SIGINT/SIGTERM and stops it in order."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def serve(settings: Settings) -> int:
    """Run the node until SIGINT/SIGTERM; returns the exit code (`memstream.exit_codes`: FENCED
    when another writer took the journal). After a signal the process ends within
    `settings.stop_deadline_s` whatever it is doing; the caller ends it with
    `shutdown.exit_process` (`memstream node` does)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    restrict_umask()

    async def main() -> None:
        stop = asyncio.Event()
        StopSignals(stop.set, deadline_s=settings.stop_deadline_s).install(asyncio.get_running_loop())
        await run_node(settings, stop)

    try:
        asyncio.run(main())
    except JournalFenced as exc:
        log.error(
            "node stopped for good (exit status %d): another writer opened the journal (%s). Restarting "
            "this node would fence that writer in turn. Decide which node owns the journal, stop the "
            "other one, and only then start this one again.",
            exit_codes.FENCED,
            exc,
        )
        return exit_codes.FENCED
    except Exception as exc:
        log.error("node stopped: %s", exc)
        return exit_codes.FAILED
    with contextlib.suppress(Exception):
        logging.shutdown()
    return 0
